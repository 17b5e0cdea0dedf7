//! Entering the run's namespaces and mounting its overlay with system
//! calls, between `fork` and `exec` (SPEC §17).
//!
//! # Why system calls, not helper programs
//!
//! The first version ran `unshare`, a `sh` script, one `mount` per mount and
//! a nested `unshare`: six programs started before the command, about 10 ms
//! a run — ten times a plain `sh -c true`, paid by every read-only `ls` or
//! `git status` an agent runs. Here the same steps are a clone and a handful
//! of mounts in the spawned child, about a millisecond (most of it the
//! overlay mount).
//!
//! # Implementation details
//!
//! The child the standard library forks (`P`, in writ's namespaces, the
//! process group's leader that writ waits for) runs [`enter`] as its
//! `pre_exec` hook:
//!
//! 1. `P` clones `C` into a new user, mount and PID namespace (`C` is PID 1
//!    there: when it ends, everything it started is killed).
//! 2. `C` maps the caller's uid and gid to root, makes every mount private,
//!    binds the real workspace at `<run>/stage` (so it stays reachable),
//!    mounts overlayfs over the workspace's own path (the real tree the
//!    lower layer, `<run>/upper` the upper one), binds the pass-through
//!    folders from the stage back over the overlay, mounts its own `/proc`,
//!    enters its working folder through the overlay and, unless the caller
//!    is root, a nested user namespace mapping the caller's uid and gid back
//!    (files look owned as they are: git compares owners with its index).
//!    Then it returns, and the standard library `exec`s the command in it.
//! 3. `P` ignores the polite signals (the group's SIGTERM is the command's
//!    to handle; `C` dies with `P` through `PR_SET_PDEATHSIG`), closes every
//!    descriptor it has (the standard library's exec-error pipe among them,
//!    so `spawn` returns once `C` has `exec`ed), waits for `C` and exits with
//!    its status (`128 + N` for a death by signal N, as a shell reports it).
//! 4. Once `spawn` returned, writ opens `/proc/<C>/ns/mnt` ([`hold`]; `C`
//!    is found in `/proc/<P>/task/<P>/children`) and keeps the descriptor
//!    until the run is over. So when `C` ends, unmounting the overlay —
//!    evicting an inode for every file the command looked at, about 2 ms
//!    per 1,000 — is not done by `C`'s exit, which `P` and so the caller
//!    wait for, but by whoever closes the descriptor last: a thread of
//!    writ's, after the report is out. Where the namespace cannot be
//!    opened (the command already ended, no `children` file), `C`'s exit
//!    unmounts: slower, not wrong.
//!
//! Between `fork` and `exec` of a threaded program only async-signal-safe
//! calls are allowed: no allocation, no locks. Everything [`enter`] uses is
//! built before the fork ([`Plan`]); it calls the C library's thin system
//! call wrappers only.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Everything the child needs, built before the fork.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Plan {
    root: CString,
    stage: CString,
    top: Top,
    binds: Vec<(CString, CString)>,
    cwd: CString,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// The nested namespace's maps, when the caller is not root.
    inner: Option<(Vec<u8>, Vec<u8>)>,
}

/// What is mounted over the workspace's path.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Top {
    /// overlayfs, with these options (its layers).
    Overlay(CString),
    /// The real tree again, read-only. The flags are those its mount has
    /// already: in a user namespace they are locked, and a remount that
    /// left one out would be refused.
    ReadOnly(u64),
}

fn c(path: &Path) -> io::Result<CString> {
    c_bytes(path.as_os_str())
}

fn c_bytes(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} holds a NUL byte", s.to_string_lossy()),
        )
    })
}

impl Plan {
    /// The plan of a run over `root` with its layer's `stage`, `upper` and
    /// `work` folders, the pass-through folders `through` (relative to the
    /// root) and the working folder `cwd` (absolute, inside the root).
    pub(crate) fn new(
        root: &Path,
        stage: &Path,
        upper: &Path,
        work: &Path,
        through: &[PathBuf],
        cwd: &Path,
    ) -> io::Result<Plan> {
        let mut data = b"userxattr,lowerdir=".to_vec();
        data.extend_from_slice(root.as_os_str().as_bytes());
        data.extend_from_slice(b",upperdir=");
        data.extend_from_slice(upper.as_os_str().as_bytes());
        data.extend_from_slice(b",workdir=");
        data.extend_from_slice(work.as_os_str().as_bytes());
        let overlay = CString::new(data).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "a layer path holds a NUL byte")
        })?;
        Plan::over(root, stage, Top::Overlay(overlay), through, cwd)
    }

    /// The plan of a run that sees `root` read-only (the pass-through
    /// folders `through` writable, from `stage`), in the working folder
    /// `cwd`.
    pub(crate) fn read_only(
        root: &Path,
        stage: &Path,
        through: &[PathBuf],
        cwd: &Path,
    ) -> io::Result<Plan> {
        let flags = rustix::fs::statvfs(root)?.f_flag.bits();
        Plan::over(root, stage, Top::ReadOnly(flags), through, cwd)
    }

    fn over(
        root: &Path,
        stage: &Path,
        top: Top,
        through: &[PathBuf],
        cwd: &Path,
    ) -> io::Result<Plan> {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let binds = through
            .iter()
            .map(|rel| Ok((c(&stage.join(rel))?, c(&root.join(rel))?)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Plan {
            root: c(root)?,
            stage: c(stage)?,
            top,
            binds,
            cwd: c(cwd)?,
            uid_map: format!("0 {uid} 1\n").into_bytes(),
            gid_map: format!("0 {gid} 1\n").into_bytes(),
            inner: (uid != 0).then(|| {
                (
                    format!("{uid} 0 1\n").into_bytes(),
                    format!("{gid} 0 1\n").into_bytes(),
                )
            }),
        })
    }
}

#[cfg(target_os = "linux")]
fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(target_os = "linux")]
/// Writes `data` to the file at `path` (a `/proc` control file) at once.
fn put(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: plain system calls on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
/// Maps this process's ids in the user namespace it just entered.
fn map_ids(uid_map: &[u8], gid_map: &[u8]) -> io::Result<()> {
    // Absent before Linux 3.19, where gid_map needs no such denial.
    match put(c"/proc/self/setgroups", b"deny") {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => other?,
    }
    put(c"/proc/self/uid_map", uid_map)?;
    put(c"/proc/self/gid_map", gid_map)
}

#[cfg(target_os = "linux")]
fn mount(
    source: &std::ffi::CStr,
    target: &std::ffi::CStr,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    // SAFETY: NUL-terminated strings that outlive the call; null pointers
    // where the kernel takes none.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    })
}

#[cfg(target_os = "linux")]
/// The `pre_exec` hook: see the module docs. Returns (in `C`) once the
/// command may be `exec`ed; `P` never returns.
///
/// # Safety
///
/// To be called only between `fork` and `exec` (it forks, and exits the
/// calling process).
pub(crate) unsafe fn enter(plan: &Plan) -> io::Result<()> {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::SIGCHLD;
    // SAFETY: a fork-like clone (no new stack: the child continues on a copy
    // of this one) of a process with a single thread.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_long::from(flags),
            0 as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        return inside(plan);
    }
    // SAFETY: `pid` is the child just cloned; `P` is single-threaded.
    unsafe { wait_and_exit(pid as libc::pid_t) }
}

#[cfg(target_os = "linux")]
/// `C`: the namespaces' set-up, before the command is `exec`ed.
fn inside(plan: &Plan) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    map_ids(&plan.uid_map, &plan.gid_map)?;
    mount(c"none", c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
    mount(&plan.root, &plan.stage, None, libc::MS_BIND, None)?;
    match &plan.top {
        Top::Overlay(options) => {
            mount(c"writ-run", &plan.root, Some(c"overlay"), 0, Some(options))?;
        }
        Top::ReadOnly(flags) => {
            mount(&plan.root, &plan.root, None, libc::MS_BIND, None)?;
            // statvfs's ST_* flags are the MS_* mount flags on Linux.
            let kept = *flags as libc::c_ulong
                & (libc::MS_NOSUID
                    | libc::MS_NODEV
                    | libc::MS_NOEXEC
                    | libc::MS_NOATIME
                    | libc::MS_NODIRATIME
                    | libc::MS_RELATIME);
            mount(
                c"none",
                &plan.root,
                None,
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | kept,
                None,
            )?;
        }
    }
    for (from, to) in &plan.binds {
        mount(from, to, None, libc::MS_BIND, None)?;
    }
    mount(
        c"proc",
        c"/proc",
        Some(c"proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::chdir(plan.cwd.as_ptr()) })?;
    if let Some((uid_map, gid_map)) = &plan.inner {
        // SAFETY: unshare with flags only.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER) })?;
        map_ids(uid_map, gid_map)?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
/// Closes every descriptor from `first` on.
fn close_from(first: libc::c_uint) {
    // SAFETY: closing descriptors this process owns; nothing in it uses them
    // afterwards.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) != 0 {
            // Before Linux 5.9: close them one by one.
            for fd in first as libc::c_int..1024 {
                libc::close(fd);
            }
        }
    }
}

#[cfg(target_os = "linux")]
/// `P`: waits for `C` and exits with its status.
///
/// # Safety
///
/// Between `fork` and `exec` only; `child` is `P`'s child.
unsafe fn wait_and_exit(child: libc::pid_t) -> ! {
    // SAFETY: system calls with plain arguments and stack buffers only.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        close_from(0);
        let mut status: libc::c_int = 0;
        loop {
            let r = libc::waitpid(child, &mut status, 0);
            if r == child {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else if libc::WIFSIGNALED(status) {
            128 + libc::WTERMSIG(status)
        } else {
            127
        };
        libc::_exit(code)
    }
}

/// No overlay outside Linux: `overlay::available` says so before a run.
///
/// # Safety
///
/// None needed; kept `unsafe` like the Linux one.
#[cfg(not(target_os = "linux"))]
pub(crate) unsafe fn enter(_plan: &Plan) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// A descriptor holding the mount namespace of the overlay run whose
/// waiting parent is `leader` (see the module docs, step 4), if it can be
/// had. Dropping it unmounts the overlay once the command has ended: drop
/// it where nobody waits.
pub(crate) fn hold(leader: u32) -> Option<std::fs::File> {
    let children =
        std::fs::read_to_string(format!("/proc/{leader}/task/{leader}/children")).ok()?;
    let child: u32 = children.split_whitespace().next()?.parse().ok()?;
    std::fs::File::open(format!("/proc/{child}/ns/mnt")).ok()
}

//! `writ-sched`: the distribution's name as a command, so that the tools
//! that run a package's command of the same name (`uvx writ-sched serve .`,
//! `pipx run writ-sched`) run writ. It runs the `writ` installed beside it
//! with the same arguments; it is not part of the `writ` binary.
//!
//! It tells writ how it was run (`WRIT_LAUNCHER`: `uvx` or `pipx`, when it
//! lives in one of their temporary environments), so that `writ config`
//! writes a command the client can run where `writ` is not on PATH.

use std::process::{Command, ExitCode};

/// The tool whose temporary environment `exe` lies in: `uvx` (uv's cache,
/// `…/uv/archive-v0/…`) or `pipx run` (`…/pipx/.cache/…`). An installed
/// writ-sched (`uv tool install`, `pipx install`, pip) puts `writ` on PATH.
fn launcher(exe: &std::path::Path) -> Option<&'static str> {
    let parts: Vec<String> = exe
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let after = |name: &str, next: &dyn Fn(&str) -> bool| {
        parts
            .windows(2)
            .any(|w| w[0] == name && next(w[1].as_str()))
    };
    if after("uv", &|n| {
        n.starts_with("archive-") || n.starts_with("environments-")
    }) {
        Some("uvx")
    } else if after("pipx", &|n| n == ".cache") {
        Some("pipx")
    } else {
        None
    }
}

fn main() -> ExitCode {
    let writ = match std::env::current_exe() {
        Ok(me) => me.with_file_name(format!("writ{}", std::env::consts::EXE_SUFFIX)),
        Err(e) => {
            eprintln!("writ-sched: cannot find where this program is: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(&writ);
    command.args(std::env::args_os().skip(1));
    if std::env::var_os("WRIT_LAUNCHER").is_none()
        && let Ok(me) = std::env::current_exe()
        && let Some(launcher) = launcher(&me)
    {
        command.env("WRIT_LAUNCHER", launcher);
    }
    // On Unix the launcher becomes writ: signals, the exit status and the
    // standard streams (`writ mcp` speaks MCP on them) are writ's own.
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let error = command.exec();
        eprintln!("writ-sched: cannot run {}: {error}", writ.display());
        ExitCode::FAILURE
    }
    #[cfg(not(unix))]
    match command.status() {
        Ok(status) => ExitCode::from(
            status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1),
        ),
        Err(error) => {
            eprintln!("writ-sched: cannot run {}: {error}", writ.display());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::launcher;
    use std::path::Path;

    #[test]
    fn the_temporary_environments_of_uvx_and_pipx_run_are_told_apart() {
        let at = |p: &str| launcher(Path::new(p));
        assert_eq!(
            at("/home/u/.cache/uv/archive-v0/Ab12/bin/writ-sched"),
            Some("uvx")
        );
        assert_eq!(
            at("/home/u/.local/pipx/.cache/0f3a/bin/writ-sched"),
            Some("pipx")
        );
        assert_eq!(
            at("/home/u/.local/share/uv/tools/writ-sched/bin/writ-sched"),
            None
        );
        assert_eq!(at("/usr/local/bin/writ-sched"), None);
    }
}

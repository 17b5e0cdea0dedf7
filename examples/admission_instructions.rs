//! A fixed admission workload, for counting the instructions it takes
//! (docs/PERFORMANCE.md, "One rule set: in-process admission before and
//! after"). Wall-clock benchmarks on a shared 2-core machine spread by
//! ±30 % from run to run; an instruction count under callgrind does not.
//!
//! ```text
//! cargo build --release --example admission_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/admission_instructions waiters100 20000
//! ```
//!
//! Modes: `resolved3` (a `try_admit` of a resolved three-component path
//! and its release, nothing else in the table) and `waiters100` (100
//! requests queued behind a fence first, then the same on a free path).
//! Each runs the setup, then `N` rounds: the count for `N` = 0 is the
//! setup alone (in `waiters100`, 100 waits, each with its deadlock check).

use std::future::Future;
use std::hint::black_box;
use std::task::{Context, Waker};

use writ::{Config, Grant, Scheduler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: admission_instructions resolved3|waiters100 ROUNDS";
    let mode = args.next().ok_or(usage)?;
    let rounds: usize = args.next().ok_or(usage)?.parse()?;
    // A name of one length whatever the pid: path handling is counted too.
    let dir = std::env::temp_dir().join(format!("writ-admission-{:010}", std::process::id()));
    std::fs::create_dir_all(dir.join("a/b"))?;
    std::fs::write(dir.join("a/b/c.rs"), b"x")?;
    let root = std::fs::canonicalize(&dir)?;
    let sched = Scheduler::new(Config::default());
    match mode.as_str() {
        "resolved3" => {
            let actor = sched.actor("bench", Grant::workspace(&root))?;
            let resolved = actor.resolve(["a/b/c.rs"])?;
            for _ in 0..rounds {
                drop(black_box(actor.try_admit(&resolved)?));
            }
        }
        "waiters100" => {
            let owner = sched.actor("owner", Grant::workspace(&root))?;
            let caller = sched.actor("caller", Grant::workspace(&root))?;
            let waiter = sched.actor("waiter", Grant::workspace(&root))?;
            let _fence = owner.fence(["queued/"])?;
            let free = caller.resolve(["src/free.rs"])?;
            let mut pending = Vec::new();
            for i in 0..100 {
                let path = format!("queued/f{i}.rs");
                let mut admit = Box::pin(waiter.admit([path.as_str()]));
                let mut cx = Context::from_waker(Waker::noop());
                if admit.as_mut().poll(&mut cx).is_ready() {
                    return Err("a request behind the fence was answered".into());
                }
                pending.push(admit);
            }
            for _ in 0..rounds {
                drop(black_box(caller.try_admit(&free)?));
            }
        }
        _ => return Err(usage.into()),
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

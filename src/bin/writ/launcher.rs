//! `writ-sched`: the distribution's name as a command, so that the tools
//! that run a package's command of the same name (`uvx writ-sched serve .`,
//! `pipx run writ-sched`) run writ. It runs the `writ` installed beside it
//! with the same arguments; it is not part of the `writ` binary.

use std::process::{Command, ExitCode};

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

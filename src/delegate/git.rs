//! Commits made during a run, read with the `git` command line.
//!
//! Before the run, each fenced folder that lies in a git work tree has its
//! repository's `HEAD` recorded; afterwards, the commits in
//! `HEAD-before..HEAD-after` are listed (newest [`MAX_COMMITS`], oldest
//! first). Every `git` call gets the same cleared environment as the run,
//! a time limit, and is killed (not just abandoned) when it passes it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::Commit;

/// At most this many commits are listed per repository.
pub(crate) const MAX_COMMITS: usize = 200;

const GIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A repository and its `HEAD` before the run (`None`: no commit yet).
#[derive(Debug, Clone)]
pub(crate) struct Head {
    top: PathBuf,
    head: Option<String>,
}

/// Why commits could not be read, if they could not.
#[derive(Debug)]
pub(crate) enum GitError {
    /// The `git` program is not installed.
    Missing,
    /// It ran but failed or timed out.
    Failed(String),
}

async fn git(dir: &Path, args: &[&str], env: &[(OsString, OsString)]) -> Result<String, GitError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(GitError::Missing),
        Err(e) => return Err(GitError::Failed(e.to_string())),
    };
    match tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output()).await {
        Err(_) => Err(GitError::Failed(format!(
            "git {} timed out after {GIT_TIMEOUT:?}",
            args.join(" ")
        ))),
        Ok(Err(e)) => Err(GitError::Failed(e.to_string())),
        Ok(Ok(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(Ok(out)) => Err(GitError::Failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
    }
}

/// The repositories the folders lie in, with their `HEAD`. Folders outside
/// any work tree are skipped.
pub(crate) async fn heads(
    dirs: &[PathBuf],
    env: &[(OsString, OsString)],
) -> Result<Vec<Head>, GitError> {
    let mut heads: Vec<Head> = Vec::new();
    for dir in dirs {
        let top = match git(dir, &["rev-parse", "--show-toplevel"], env).await {
            Ok(top) => PathBuf::from(top.trim_end_matches('\n')),
            Err(GitError::Missing) => return Err(GitError::Missing),
            Err(GitError::Failed(_)) => continue, // not a work tree
        };
        if heads.iter().any(|h| h.top == top) {
            continue;
        }
        let head = git(&top, &["rev-parse", "--verify", "--quiet", "HEAD"], env)
            .await
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        heads.push(Head { top, head });
    }
    Ok(heads)
}

/// Commits reachable from each repository's `HEAD` now and not from its
/// `HEAD` before, oldest first.
pub(crate) async fn commits_since(
    heads: &[Head],
    env: &[(OsString, OsString)],
) -> Result<Vec<Commit>, GitError> {
    let mut commits = Vec::new();
    for Head { top, head } in heads {
        let max = format!("--max-count={MAX_COMMITS}");
        let range = match head {
            Some(h) => format!("{h}..HEAD"),
            None => "HEAD".to_string(),
        };
        let now = git(top, &["rev-parse", "--verify", "--quiet", "HEAD"], env).await;
        if now.is_err() {
            continue; // still no commit
        }
        let out = git(
            top,
            &["log", "--reverse", "--format=%H%x09%s", &max, &range, "--"],
            env,
        )
        .await?;
        for line in out.lines() {
            let (id, summary) = line.split_once('\t').unwrap_or((line, ""));
            commits.push(Commit {
                id: id.to_string(),
                summary: summary.to_string(),
            });
        }
    }
    Ok(commits)
}

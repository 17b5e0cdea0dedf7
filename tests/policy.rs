//! The path policy (SPEC §8) as `Files` applies it.

use writ::{Config, Durability, Error, Grant, Scheduler, Target};

fn sched(config: Config) -> Scheduler {
    Scheduler::new(config.durability(Durability::Process))
}

fn policy_reason<T: std::fmt::Debug>(r: writ::Result<T>) -> String {
    match r {
        Err(Error::Policy { reason, .. }) => reason,
        other => panic!("expected Policy, got {other:?}"),
    }
}

#[test]
fn a_read_only_root_is_readable_but_refuses_writes() {
    let ws = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("guide.md"), "read me\n").unwrap();
    let sched = sched(Config::default());
    let a = sched
        .actor("a", Grant::workspace(ws.path()).read_root(docs.path()))
        .unwrap();
    let guide = docs.path().join("guide.md");
    let (bytes, mark) = a.files().read(&guide).unwrap();
    assert_eq!(bytes, b"read me\n");
    assert_eq!(mark.path, guide.canonicalize().unwrap());
    for result in [
        a.files().write(&guide, "x"),
        a.files().append(&guide, "x"),
        a.files().replace(&guide, "read", "x"),
        a.files().delete(&guide),
        a.files().write(docs.path().join("new.md"), "x"),
        a.files().rename(&guide, "moved.md"),
    ] {
        let reason = policy_reason(result);
        assert!(reason.contains("read-only root"), "{reason}");
    }
    assert_eq!(std::fs::read(&guide).unwrap(), b"read me\n");
    assert!(!docs.path().join("new.md").exists());
    // Everything else is denied.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("x"), "x").unwrap();
    assert!(matches!(
        a.files().read(elsewhere.path().join("x")),
        Err(Error::OutsideGrant { .. })
    ));
}

#[test]
fn sensitive_names_are_refused_for_reads_and_writes() {
    let ws = tempfile::tempdir().unwrap();
    for name in [
        ".env",
        ".env.local",
        "id_rsa",
        "tls.key",
        "cert.pem",
        "credentials",
    ] {
        std::fs::write(ws.path().join(name), "SECRET=1\n").unwrap();
    }
    std::fs::create_dir(ws.path().join(".ssh")).unwrap();
    std::fs::write(ws.path().join(".ssh/id_ed25519"), "key").unwrap();
    let sched = sched(Config::default());
    let a = sched.actor("a", Grant::workspace(ws.path())).unwrap();
    let files = a.files();
    for name in [
        ".env",
        ".env.local",
        "id_rsa",
        "tls.key",
        "cert.pem",
        "credentials",
        ".ssh/id_ed25519",
        ".ENV",
        "config/.env.production",
    ] {
        let reason = policy_reason(files.read(name));
        assert!(reason.contains("sensitive-name pattern"), "{reason}");
        policy_reason(files.write(name, "x"));
        policy_reason(files.append(name, "x"));
        policy_reason(files.delete(name));
        policy_reason(files.rename("plain.txt", name));
    }
    assert!(!ws.path().join("config").exists());
    assert_eq!(
        std::fs::read(ws.path().join(".env")).unwrap(),
        b"SECRET=1\n"
    );
    let message = files.read(".env").unwrap_err().to_string();
    assert!(
        message.contains("not allowed") && message.contains(".env"),
        "{message}"
    );
}

#[test]
fn a_symlink_to_a_secret_is_refused_too() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join(".env"), "SECRET=1\n").unwrap();
    std::os::unix::fs::symlink(".env", ws.path().join("settings.txt")).unwrap();
    // And a secret-looking link to a harmless file: the spelling counts.
    std::fs::write(ws.path().join("plain.txt"), "plain\n").unwrap();
    std::os::unix::fs::symlink("plain.txt", ws.path().join("server.pem")).unwrap();
    let sched = sched(Config::default());
    let a = sched.actor("a", Grant::workspace(ws.path())).unwrap();
    let reason = policy_reason(a.files().read("settings.txt"));
    assert!(reason.contains("where the path resolves"), "{reason}");
    policy_reason(a.files().write("settings.txt", "x"));
    policy_reason(a.files().read("server.pem"));
    assert_eq!(
        std::fs::read(ws.path().join(".env")).unwrap(),
        b"SECRET=1\n"
    );
}

#[test]
fn sensitive_names_can_be_allowed_or_reconfigured() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join(".env.example"), "PORT=1\n").unwrap();
    std::fs::write(ws.path().join(".env"), "SECRET=1\n").unwrap();
    let sched1 = sched(Config::default());
    let a = sched1.actor("a", Grant::workspace(ws.path())).unwrap();
    let files = a.files().allow_sensitive(".env.example");
    files.read(".env.example").unwrap();
    files.write(".env.example", "PORT=2\n").unwrap();
    // Only what was allowed.
    policy_reason(files.read(".env"));
    // A scheduler with its own patterns: added to the built-in ones, which
    // no configuration removes (they protect `.writ/`).
    let sched2 = sched(Config::default().sensitive_names(["*.secret"]));
    let b = sched2.actor("b", Grant::workspace(ws.path())).unwrap();
    policy_reason(b.files().read(".env"));
    policy_reason(b.files().write("db.secret", "x"));
    policy_reason(b.files().write(".writ/serve.json", "{}"));
}

#[test]
fn the_policy_does_not_restrict_reservations() {
    let ws = tempfile::tempdir().unwrap();
    let sched = sched(Config::default());
    let a = sched.actor("a", Grant::workspace(ws.path())).unwrap();
    let shell = a.try_admit([Target::workspace()]).unwrap();
    drop(shell);
    let r = a.try_admit([".env"]).unwrap();
    drop(r);
}

#[test]
fn windows_reserved_names_are_refused_under_portable_names() {
    let ws = tempfile::tempdir().unwrap();
    let sched1 = sched(Config::default());
    let a = sched1.actor("a", Grant::workspace(ws.path())).unwrap();
    for name in [
        "CON",
        "nul.txt",
        "src/com1.rs",
        "aux",
        "trailing.",
        "space ",
    ] {
        match a.files().write(name, "x") {
            Err(Error::InvalidPath { reason, .. }) => {
                assert!(reason.contains("Windows"), "{reason}")
            }
            other => panic!("{name}: expected InvalidPath, got {other:?}"),
        }
        assert!(matches!(
            a.files().read(name),
            Err(Error::InvalidPath { .. })
        ));
    }
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
    // Without portable names they are ordinary names on Unix.
    let sched2 = sched(Config::default().portable_names(false));
    let b = sched2.actor("b", Grant::workspace(ws.path())).unwrap();
    b.files().write("CON", "x").unwrap();
}

#[test]
fn malformed_paths_are_invalid() {
    let ws = tempfile::tempdir().unwrap();
    let sched = sched(Config::default());
    let a = sched.actor("a", Grant::workspace(ws.path())).unwrap();
    for bad in ["", "a\0b"] {
        assert!(matches!(
            a.files().write(bad, "x"),
            Err(Error::InvalidPath { .. })
        ));
    }
    let long = "x".repeat(300);
    assert!(matches!(
        a.files().write(&long, "x"),
        Err(Error::InvalidPath { .. })
    ));
}

/// The attack: a name that a case-insensitive file system (or a tool that
/// folds names) takes for a secret, spelled with characters an ASCII-only
/// comparison does not fold. The check folds as keys do (§2, §8).
#[test]
fn unicode_spellings_of_a_sensitive_name_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let sched = sched(Config::default());
    let a = sched.actor("a", Grant::workspace(ws.path())).unwrap();
    let files = a.files();
    // `ſ` (long s) folds to `s`; `K` (the Kelvin sign) folds to `k`.
    for name in ["id_rſa", "ID_RſA", "tls.\u{212A}ey"] {
        let reason = policy_reason(files.write(name, "x"));
        assert!(
            reason.contains("sensitive-name pattern"),
            "{name}: {reason}"
        );
        assert!(!ws.path().join(name).exists(), "{name} was written");
    }
}

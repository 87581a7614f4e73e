//! With -q a command that succeeds on a healthy repository writes nothing
//! on stderr (no progress, summary or hint), unmounted and through a
//! mount's daemon, yet prints what it exists to print on stdout (`get`'s
//! bytes, reports, --json); an error is still shown. `--help` says so.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{cairn, random, require_fuse, Mount, CAIRN};

/// Runs `cairn -q ARGS`, asserting success and an empty stderr; its stdout.
fn silent(repo: &Path, args: &[&str]) -> Vec<u8> {
    let out = cairn(repo, args);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cairn -q {args:?} failed: {said}");
    assert!(said.is_empty(), "cairn -q {args:?} wrote on stderr: {said}");
    out.stdout
}

/// The commands run both unmounted and mounted.
fn everyday(repo: &Path, file: &Path, data: &[u8], out: &Path, tag: &str) {
    let label = format!("l-{tag}");
    silent(repo, &["put", file.to_str().unwrap(), "--name", &label]);
    assert!(silent(repo, &["get", &label]) == data);
    silent(
        repo,
        &["get", &label, "-o", out.to_str().unwrap(), "--force"],
    );
    assert!(fs::read(out).unwrap() == data);
    assert!(String::from_utf8(silent(repo, &["roots"]))
        .unwrap()
        .contains(&label));
    let stats = silent(repo, &["stats", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&stats).unwrap();
    silent(repo, &["status"]);
    silent(repo, &["check"]);
    silent(repo, &["scrub"]);
    silent(repo, &["version"]);
    let snap = format!("s-{tag}");
    silent(repo, &["snapshot", "create", &snap]);
    silent(repo, &["snapshot", "list"]);
    silent(repo, &["snapshot", "delete", &snap]);
    silent(repo, &["gc"]);
    silent(repo, &["rm", &label]);
}

#[test]
fn quiet_commands_leave_stderr_to_errors_and_warnings() {
    require_fuse();
    let help = Command::new(CAIRN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Nothing on stderr but errors and warnings"),
        "{help}"
    );

    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let file = base.path().join("data");
    let data = random(700_000, 3);
    fs::write(&file, &data).unwrap();
    let back = base.path().join("back");
    silent(&repo, &["init"]);
    everyday(&repo, &file, &data, &back, "plain");

    let key = base.path().join("key");
    silent(&repo, &["key", "export", key.to_str().unwrap()]);
    silent(&repo, &["key", "import", key.to_str().unwrap()]);
    silent(&repo, &["config", "recover", "--force"]);
    assert!(repo.join("cairn.toml.old").exists());

    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    let m = Mount::start(repo.clone(), dir.clone());
    everyday(&repo, &file, &data, &back, "mounted");
    m.unmount();

    // A mount whose daemon was killed is detached without a word.
    let mut dead = Mount::start(repo.clone(), dir.clone());
    let mut child = dead.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    silent(&repo, &["umount", dir.to_str().unwrap()]);

    let out = cairn(&repo, &["get", "no-such-label"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no-such-label"), "{said}");
}

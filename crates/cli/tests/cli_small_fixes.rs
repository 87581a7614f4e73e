//! Small things a user meets on the first day: a closed pipe on standard
//! output, `get -o` over an existing file, progress without a known total,
//! an empty snapshot list in JSON, `status` and `scrub` on the default
//! one-branch repository.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
use common::{cairn, ok, CAIRN};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A repository holding one stored file, `a`, and its bytes.
fn repo_with_a(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let repo = dir.join("repo");
    ok(&repo, &["init"]);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let file = dir.join("a");
    fs::write(&file, &data).unwrap();
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "a"]);
    (repo, data)
}

#[test]
fn a_closed_standard_output_ends_commands_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, _) = repo_with_a(dir.path());
    for args in [
        &["roots"][..],
        &["roots", "--json"],
        &["get", "a"],
        &["stats"],
        &["status"],
        &["snapshot", "list"],
    ] {
        // The reader is gone before cairn writes its first byte.
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let out = Command::new(CAIRN)
            .arg("--repo")
            .arg(&repo)
            .args(args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("panicked"),
            "{args:?} exited with {} on a closed pipe: {err}",
            out.status
        );
    }
    // The same through a shell pipeline, as a user types it.
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"set -o pipefail; for i in 1 2 3; do "$CAIRN" --repo "$REPO" get a; done | head -c 10"#)
        .env("CAIRN", CAIRN)
        .env("REPO", &repo)
        .output()
        .unwrap();
    assert_eq!(out.stdout.len(), 10);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn get_refuses_to_overwrite_a_file_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, data) = repo_with_a(dir.path());
    let dest = dir.path().join("dest");
    fs::write(&dest, b"precious").unwrap();
    let out = cairn(&repo, &["get", "a", "-o", dest.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("exists") && text(&out).contains("--force"),
        "{}",
        text(&out)
    );
    assert_eq!(fs::read(&dest).unwrap(), b"precious");
    ok(
        &repo,
        &["get", "a", "-o", dest.to_str().unwrap(), "--force"],
    );
    assert!(fs::read(&dest).unwrap() == data);
    // A label that is not there leaves no empty file behind.
    let fresh = dir.path().join("fresh");
    assert!(
        !cairn(&repo, &["get", "nope", "-o", fresh.to_str().unwrap()])
            .status
            .success()
    );
    assert!(!fresh.exists());
}

/// Whether `s` shows a count against a total of zero (`12576/0`).
fn shows_zero_total(s: &str) -> bool {
    let b = s.as_bytes();
    (1..b.len().saturating_sub(1)).any(|i| {
        b[i] == b'/'
            && b[i - 1].is_ascii_digit()
            && b[i + 1] == b'0'
            && !b.get(i + 2).is_some_and(u8::is_ascii_digit)
    })
}

#[test]
fn progress_without_a_total_is_a_count_not_a_bar() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, _) = repo_with_a(dir.path());
    assert!(shows_zero_total("mark 12576/0 "));
    assert!(!shows_zero_total("check 3/30, mark 12"));
    // On a terminal (script(1) gives one), as a user sees it.
    for (cmd, drawn) in [("check", "check"), ("gc", "mark")] {
        let line = format!("{CAIRN} --repo {} {cmd}", repo.display());
        let out = Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {}", text(&out));
        let screen = text(&out);
        assert!(screen.contains(drawn), "{cmd} drew no progress: {screen:?}");
        assert!(!shows_zero_total(&screen), "{cmd}: {screen:?}");
    }
}

#[test]
fn empty_lists_and_the_default_branch_are_reported_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    ok(&repo, &["init"]);
    assert_eq!(ok(&repo, &["snapshot", "list", "--json"]).trim(), "[]");
    let status = ok(&repo, &["status"]);
    assert!(
        status.contains("local") && status.contains("plain"),
        "{status}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&repo, &["status", "--json"])).unwrap();
    assert_eq!(json[0]["plain"], true, "{json}");
    let scrub = ok(&repo, &["scrub"]);
    assert!(scrub.contains("plain branch"), "{scrub}");
}

//! A label, snapshot, path or file that is not there is the user's
//! mistake: the command says so plainly (no "error:"), exits 1, and the
//! repository's log records it as refused, never at ERROR, whether the
//! command ran here or in a mount's daemon. A real failure (a container
//! gone from under the store) is still an error, on stderr and in the log.

mod common;

use std::fs;
use std::path::Path;

use common::{cairn, ok, plain_containers, random, Mount};

/// The repository log's lines at ERROR level.
fn errors_logged(repo: &Path) -> Vec<String> {
    fs::read_to_string(repo.join("log/cairn.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ERROR"))
        .map(String::from)
        .collect()
}

/// Runs a mistaken command; asserts it is refused plainly, naming `what`.
fn typo(repo: &Path, args: &[&str], what: &str) {
    let out = cairn(repo, args);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
    assert!(said.starts_with("cairn: "), "{args:?}: {said}");
    assert!(said.contains(what), "{args:?} does not name {what}: {said}");
    assert!(
        !said.to_lowercase().contains("error"),
        "{args:?} reported as an error: {said}"
    );
}

fn typos(repo: &Path, base: &Path) {
    typo(repo, &["get", "no-such-label"], "no-such-label");
    typo(repo, &["rm", "nosuch"], "nosuch");
    typo(repo, &["snapshot", "delete", "nosnap"], "nosnap");
    let missing = base.join("no-such-file");
    typo(
        repo,
        &["put", missing.to_str().unwrap(), "--name", "x"],
        "no-such-file",
    );
    typo(repo, &["policy", "show", "no/such/path"], "no/such/path");
}

#[test]
fn a_users_typo_is_refused_plainly_and_not_logged_as_an_error() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);

    typos(&repo, base.path());
    let log = fs::read_to_string(repo.join("log/cairn.log")).unwrap();
    assert!(log.contains("refused"), "{log}");
    assert_eq!(errors_logged(&repo), Vec::<String>::new());

    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    let m = Mount::start(repo.clone(), dir);
    typos(&repo, base.path());
    assert_eq!(errors_logged(&repo), Vec::<String>::new());
    m.unmount();

    // A container lost from under the store is a failure.
    let file = base.path().join("data");
    fs::write(&file, random(300_000, 9)).unwrap();
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "kept"]);
    for c in plain_containers(&repo) {
        fs::remove_file(c).unwrap();
    }
    let out = cairn(&repo, &["get", "kept"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("cairn: error: "), "{said}");
    assert!(
        !errors_logged(&repo).is_empty(),
        "the failure is not logged as an error"
    );
}

//! `cairn init --join OTHER` without `--client` takes the lowest client
//! number not registered on the bucket, prints it, and registers it as a
//! given number is: two joins get 1 and 2; after `--client 4`, the next
//! gets 3, and then 5; a number so handed out is refused to `--client`.

mod common;

use std::fs;
use std::path::Path;

use branch::testing::S3Proxy;
use common::{cairn, ok};

/// Joins `other` from `repo` without a number: the one printed, checked
/// against what the repository keeps.
fn join(repo: &Path, other: &Path, extra: &[&str]) -> String {
    let mut args = vec!["init", "--join", other.to_str().unwrap()];
    args.extend(extra);
    let out = ok(repo, &args);
    let n = out
        .lines()
        .find_map(|l| l.strip_prefix("client "))
        .unwrap_or_else(|| panic!("no client number printed: {out:?}"))
        .to_string();
    assert_eq!(
        fs::read_to_string(repo.join("meta/client")).unwrap().trim(),
        n
    );
    n
}

#[test]
fn joins_without_a_number_get_the_lowest_free_one() {
    let s3 = S3Proxy::start();
    let bucket = s3.new_bucket();
    let base = tempfile::tempdir().unwrap();
    let a = base.path().join("a");
    common::s3::first_client(&a, &bucket);
    let repo = |name: &str| base.path().join(name);

    assert_eq!(join(&repo("b"), &a, &[]), "1");
    assert_eq!(join(&repo("c"), &a, &[]), "2");
    // A given number still works, and the next pick fills the gap below it.
    assert_eq!(join(&repo("d"), &a, &["--client", "4"]), "4");
    assert_eq!(join(&repo("e"), &a, &[]), "3");
    assert_eq!(join(&repo("f"), &a, &[]), "5");

    // What was handed out is registered: asked for by hand, it is refused.
    let g = repo("g");
    let out = cairn(
        &g,
        &["init", "--join", a.to_str().unwrap(), "--client", "2"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already registered"), "{err}");
    assert!(
        !g.join("cairn.toml").exists(),
        "a refused join left a repository"
    );
}

//! `cairn branch add` checks a bucket before it adds it: one nothing
//! answers for is refused (exit status 1, the endpoint, bucket and cause
//! named), cairn.toml is left byte for byte as it was, and the repository
//! still opens without it: unmounted, and through a mount's daemon.

mod common;

use std::fs;
use std::path::Path;

use common::shards::{mount, repo_over};
use common::{cairn, ok};
use serde_json::Value;

const ENDPOINT: &str = "http://127.0.0.1:1";
const BUCKET: &str = "nope";

/// Asks for the branch and checks it was refused and left out.
fn refused(repo: &Path, when: &str) {
    let config = repo.join("cairn.toml");
    let before = fs::read(&config).unwrap();
    let out = cairn(
        repo,
        &[
            "branch",
            "add",
            "s3b",
            "--s3-endpoint",
            ENDPOINT,
            "--s3-bucket",
            BUCKET,
        ],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{when}: {said}");
    assert!(
        said.contains("127.0.0.1:1") && said.contains("\"nope\""),
        "{when}: endpoint and bucket not named: {said}"
    );
    assert!(
        said.to_lowercase().contains("connect"),
        "{when}: the cause not named: {said}"
    );
    assert!(!said.contains("added branch"), "{when}: {said}");
    assert_eq!(
        fs::read(&config).unwrap(),
        before,
        "{when}: cairn.toml changed"
    );
    let status: Value = serde_json::from_str(&ok(repo, &["status", "--json"])).unwrap();
    let names: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"], "{when}: {status}");
}

#[test]
fn a_branch_on_a_bucket_that_does_not_answer_is_not_added() {
    let base = tempfile::tempdir().unwrap();
    let repo = repo_over(base.path(), &["a", "b"], "mirror:2");
    ok(&repo, &["status"]);

    refused(&repo, "unmounted");
    let m = mount(&repo, base.path());
    refused(&repo, "mounted");
    m.unmount();
    // Nothing of the bucket was recorded: the repository opens as before,
    // with no warning about a branch that cannot be reached.
    let out = cairn(&repo, &["-v", "check"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("s3b"), "{said}");
}

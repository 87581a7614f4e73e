//! `cairn init --join OTHER --client N` makes a client repository only of
//! a file system whose branches clients can share (S3 buckets), under a
//! client number nobody registered; a refused join leaves no repository
//! behind and names why.

mod common;
mod two_clients_common;

use std::fs;
use std::path::Path;

use common::{cairn, ok};

fn refused(repo: &Path, args: &[&str], why: &str) {
    let out = cairn(repo, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} must be refused");
    assert!(err.contains(why), "{args:?}: {err}");
    assert!(
        !repo.join("cairn.toml").exists(),
        "{args:?} left a repository"
    );
}

#[test]
fn a_join_is_refused_unless_the_branches_can_be_shared() {
    let base = tempfile::tempdir().unwrap();
    let (plain, local, b) = (
        base.path().join("plain"),
        base.path().join("local"),
        base.path().join("b"),
    );
    ok(&plain, &["init"]);
    let join = |other: &Path, n: &str| {
        vec![
            "init".to_string(),
            "--join".into(),
            other.to_str().unwrap().into(),
            "--client".into(),
            n.into(),
        ]
    };
    let args = join(&plain, "1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&b, &args, "plain branch");

    ok(&local, &["init"]);
    let toml = local.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap()
        + "\n[[branch]]\nname = \"disk\"\nkind = \"local\"\npath = \"/tmp/nowhere-shared\"\n";
    fs::write(&toml, text).unwrap();
    let args = join(&local, "1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&b, &args, "local directory");

    // Client 0 is the first repository's.
    let args = join(&plain, "0");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&b, &args, "0");
}

#[test]
fn a_client_number_is_taken_once() {
    let c = two_clients_common::cluster();
    let other = c.base.path().join("c");
    refused(
        &other,
        &["init", "--join", c.a.to_str().unwrap(), "--client", "1"],
        "already registered",
    );
    // Another number joins; the new client reads nothing wrong.
    ok(
        &other,
        &["init", "--join", c.a.to_str().unwrap(), "--client", "2"],
    );
    assert_eq!(
        fs::read_to_string(other.join("meta/client"))
            .unwrap()
            .trim(),
        "2"
    );
    assert_eq!(
        fs::read(other.join("key")).unwrap(),
        fs::read(c.a.join("key")).unwrap()
    );
}

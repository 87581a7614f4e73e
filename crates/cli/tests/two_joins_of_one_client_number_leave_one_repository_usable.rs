//! Two joins claiming one client number at once, on a store that does
//! not refuse to replace a blob (S3Proxy on files ignores
//! `If-None-Match`), both succeed: the later registration replaces the
//! earlier. The repository whose registration was replaced must then
//! refuse to open (it would take the other's containers for its own and
//! collect them as orphans), naming the problem; the other works.
//!
//! The race is laid out step by step: B joins as client 3; C's check
//! runs before B's put landed (here: B's registration is taken off the
//! bucket for C's check), then C's put lands after B's.

mod common;

use std::fs;

use branch::testing::S3Proxy;
use common::{cairn, ok};

#[test]
fn the_repository_whose_registration_was_replaced_is_refused() {
    let s3 = S3Proxy::start();
    let bucket = s3.new_bucket();
    let base = tempfile::tempdir().unwrap();
    let a = base.path().join("a");
    common::s3::first_client(&a, &bucket);
    let (b, c) = (base.path().join("b"), base.path().join("c"));
    let join = |repo: &std::path::Path| {
        ok(
            repo,
            &["init", "--join", a.to_str().unwrap(), "--client", "3"],
        )
    };

    join(&b);
    // The registration's only shard (policy `single`).
    let registration = s3.bucket_dir(&bucket.bucket).join("clients/3/client.s0");
    let b_note = fs::read(&registration).unwrap();
    fs::remove_file(&registration).unwrap();
    join(&c);
    assert_ne!(fs::read(&registration).unwrap(), b_note);

    let out = cairn(&b, &["status"]);
    assert!(!out.status.success(), "B opened with C's client number");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("client number 3 is registered to another repository")
            && err.contains(c.to_str().unwrap()),
        "{err}"
    );
    ok(&c, &["status"]);

    // Without the race, a second join of one number is refused at join.
    let d = base.path().join("d");
    let out = cairn(
        &d,
        &["init", "--join", a.to_str().unwrap(), "--client", "3"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already registered"), "{err}");
    ok(&c, &["status"]);
}

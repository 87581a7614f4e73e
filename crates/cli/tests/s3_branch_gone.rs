//! An S3 branch whose server is gone for good: the repository still opens
//! (with a warning), files the policy protects read back exactly from the
//! other copies, a file kept only on the bucket is named as lost (never
//! read as wrong bytes), `branch replace` rebuilds what it can onto a new
//! branch, `check --drop-lost` gives up the rest, and once the lost file
//! is deleted `check` is clean.

mod common;

use std::fs;

use branch::testing::S3Proxy;
use common::shards::{assert_reads_back, mount, write_all};
use common::{cairn, ok, random};

#[test]
fn a_gone_bucket_loses_only_what_it_alone_held() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let s3 = S3Proxy::start();
    let bucket = s3.new_bucket();
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap() + &common::s3::mirror_over_bucket(&bucket);
    fs::write(&toml, text).unwrap();

    let kept: Vec<(String, Vec<u8>)> = vec![
        ("docs/a".to_string(), random(300_000, 1)),
        ("docs/b".to_string(), random(90_000, 2)),
    ];
    let only_cloud = random(120_000, 3);
    let m = mount(&repo, base.path());
    write_all(&m, &kept);
    write_all(&m, &[("cloud/x".to_string(), only_cloud.clone())]);
    let (repo, _) = m.unmount();

    drop(s3);

    // Still opens, and says why a branch is missing.
    let status = cairn(&repo, &["status"]);
    let err = String::from_utf8_lossy(&status.stderr);
    assert!(status.status.success(), "{err}");
    assert!(err.contains("cannot be reached"), "{err}");

    let m = mount(&repo, base.path());
    assert_reads_back(&m, &kept);
    let e = fs::read(m.path("cloud/x")).expect_err("a file only the gone bucket held");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let (repo, _) = m.unmount();

    // check goes on past what it cannot read and names the file.
    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("/cloud/x"), "{text}");
    assert!(!text.contains("/docs/"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("summary:")), "{text}");

    // The way back: a new branch takes over what can be rebuilt.
    ok(
        &repo,
        &[
            "branch", "add", "spare", "--path", "br/spare", "--label", "m", "--label", "c",
        ],
    );
    let out = cairn(&repo, &["branch", "replace", "cloud", "spare"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("/cloud/x"),
        "replace lists what it could not rebuild: {text}"
    );

    let out = cairn(&repo, &["check", "--drop-lost"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/cloud/x"), "{text}");

    let m = mount(&repo, base.path());
    assert_reads_back(&m, &kept);
    fs::remove_file(m.path("cloud/x")).unwrap();
    let (repo, _) = m.unmount();
    // Versions written while the file existed lost it too: check names
    // them, and says to remove them.
    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for line in text.lines().filter(|l| l.contains("LOST: root")) {
        let label = line.split('"').nth(1).unwrap();
        assert!(label.starts_with("version/"), "{text}");
        ok(&repo, &["rm", label]);
    }
    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let config = fs::read_to_string(&toml).unwrap();
    assert!(!config.contains("name = \"cloud\""), "{config}");

    let m = mount(&repo, base.path());
    assert_reads_back(&m, &kept);
    m.unmount();
}

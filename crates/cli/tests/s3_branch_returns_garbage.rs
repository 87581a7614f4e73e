//! An S3 branch that returns garbage (every object overwritten with random
//! bytes of the same length, the repository's marker included): files the
//! policy protects read back exactly from the good copies, a file kept only
//! on the bucket gives EIO (never wrong bytes) and is named by `scrub` and
//! `check`, `scrub` rewrites the bad copies it can, writing the lost file's
//! data again heals it (the bad copy is never deduplicated against), and
//! after `check --drop-lost` gives up the bad container `check` is clean.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use branch::testing::S3Proxy;
use common::shards::{assert_reads_back, mount, write_all};
use common::{cairn, ok, random};

/// Every object file under a bucket directory (the filesystem back end
/// keeps one file per object).
fn objects(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_bucket_returning_garbage_never_serves_it() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let s3 = S3Proxy::start();
    let bucket = s3.new_bucket();
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap() + &common::s3::mirror_over_bucket(&bucket);
    fs::write(&toml, text).unwrap();

    let kept: Vec<(String, Vec<u8>)> = vec![
        ("docs/a".to_string(), random(300_000, 11)),
        ("docs/b".to_string(), random(90_000, 12)),
    ];
    let m = mount(&repo, base.path());
    write_all(&m, &kept);
    let only_cloud = random(120_000, 13);
    write_all(&m, &[("cloud/x".to_string(), only_cloud.clone())]);
    let (repo, _) = m.unmount();

    let garbled = objects(&s3.bucket_dir(&bucket.bucket));
    assert!(garbled.len() >= 3, "{garbled:?}");
    for (i, p) in garbled.iter().enumerate() {
        let len = fs::metadata(p).unwrap().len() as usize;
        fs::write(p, random(len, 100 + i as u64)).unwrap();
    }

    let m = mount(&repo, base.path());
    assert_reads_back(&m, &kept);
    let e = fs::read(m.path("cloud/x")).expect_err("garbage is never served");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");

    // scrub rewrites the bad copies it has good data for, and names the
    // file whose only copy is bad.
    let out = cairn(&repo, &["scrub"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("/cloud/x"), "{text}");
    assert!(!text.contains("/docs/"), "{text}");

    // The same data written again is stored anew, and heals the old name.
    write_all(&m, &[("cloud/again".to_string(), only_cloud.clone())]);
    assert_eq!(fs::read(m.path("cloud/again")).unwrap(), only_cloud);
    assert_eq!(fs::read(m.path("cloud/x")).unwrap(), only_cloud);
    let (repo, _) = m.unmount();

    // What is left is the bad container, which no file needs any more.
    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("LOST: file"), "{text}");
    ok(&repo, &["check", "--drop-lost"]);
    ok(&repo, &["gc"]);
    let out = cairn(&repo, &["check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &kept);
    assert_eq!(fs::read(m.path("cloud/x")).unwrap(), only_cloud);
    let (repo, _) = m.unmount();
    let out = cairn(&repo, &["scrub", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"], v["containers"], "{v}");

    // The mirrored files now have two good copies again: the local one
    // alone is enough to lose.
    fs::remove_dir_all(repo.join("br/disk")).unwrap();
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &kept);
    m.unmount();
}

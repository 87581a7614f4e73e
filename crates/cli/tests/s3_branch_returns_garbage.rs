//! An S3 branch that returns garbage (every object overwritten with random
//! bytes of the same length, the repository's marker included): files the
//! policy protects read back exactly from the good copies, a file kept only
//! on the bucket gives EIO (never wrong bytes) and is named by `scrub` and
//! `check`, `scrub` rewrites the bad copies it can, writing the lost file's
//! data again heals it (the bad copy is never deduplicated against), and
//! after `check --drop-lost` gives up the bad container `check` is clean.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use branch::testing::S3Proxy;
use common::{cairn, ok, random, Mount};

fn config(bucket: &branch::S3Config) -> String {
    format!(
        "\n[[branch]]\nname = \"disk\"\nkind = \"local\"\npath = \"br/disk\"\nlabels = [\"m\"]\n\
         \n[[branch]]\nname = \"cloud\"\nkind = \"s3\"\nendpoint = \"{}\"\nbucket = \"{}\"\n\
         access_key_id = \"{}\"\nsecret_access_key = \"{}\"\nlabels = [\"m\", \"c\"]\n\
         \n[[rule]]\nname = \"cloud-only\"\npath = \"cloud/**\"\npolicy = \"single\"\nbranches = [\"c\"]\n\
         \n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"m\"]\n",
        bucket.endpoint, bucket.bucket, bucket.access_key_id, bucket.secret_access_key
    )
}

fn write_all(m: &Mount, files: &BTreeMap<&str, Vec<u8>>) {
    for (rel, data) in files {
        let p = m.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
        fs::File::open(&p).unwrap().sync_all().unwrap();
    }
}

fn assert_exact(m: &Mount, files: &BTreeMap<&str, Vec<u8>>) {
    for (rel, data) in files {
        let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
        assert!(got == *data, "{rel} reads back different bytes");
    }
}

fn mount(repo: &Path, base: &Path) -> Mount {
    let dir = base.join("mnt");
    fs::create_dir_all(&dir).unwrap();
    Mount::start(repo.to_path_buf(), dir)
}

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
    let text = fs::read_to_string(&toml).unwrap() + &config(&bucket);
    fs::write(&toml, text).unwrap();

    let kept: BTreeMap<&str, Vec<u8>> = [
        ("docs/a", random(300_000, 11)),
        ("docs/b", random(90_000, 12)),
    ]
    .into();
    let m = mount(&repo, base.path());
    write_all(&m, &kept);
    let only_cloud = random(120_000, 13);
    write_all(&m, &[("cloud/x", only_cloud.clone())].into());
    let (repo, _) = m.unmount();

    let garbled = objects(&s3.bucket_dir(&bucket.bucket));
    assert!(garbled.len() >= 3, "{garbled:?}");
    for (i, p) in garbled.iter().enumerate() {
        let len = fs::metadata(p).unwrap().len() as usize;
        fs::write(p, random(len, 100 + i as u64)).unwrap();
    }

    let m = mount(&repo, base.path());
    assert_exact(&m, &kept);
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
    write_all(&m, &[("cloud/again", only_cloud.clone())].into());
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
    assert_exact(&m, &kept);
    assert_eq!(fs::read(m.path("cloud/x")).unwrap(), only_cloud);
    let (repo, _) = m.unmount();
    let out = cairn(&repo, &["scrub", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"], v["containers"], "{v}");

    // The mirrored files now have two good copies again: the local one
    // alone is enough to lose.
    fs::remove_dir_all(repo.join("br/disk")).unwrap();
    let m = mount(&repo, base.path());
    assert_exact(&m, &kept);
    m.unmount();
}

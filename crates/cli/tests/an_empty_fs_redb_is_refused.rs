//! A zero-length `fs.redb` while the store holds versions is refused at
//! mount (and by gc and stats) with the command that fixes it, so no
//! version is written over it or dropped; `cairn recover` brings every
//! file back exact.

mod common;

use std::fs;

use common::{cairn, ok, random, Mount};

fn refused(repo: &std::path::Path, args: &[&str]) {
    let out = cairn(repo, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "cairn {args:?} accepted an empty fs.redb"
    );
    assert!(
        err.contains("cairn recover") && err.contains("empty"),
        "cairn {args:?} does not say what is wrong and what to run: {err}"
    );
}

#[test]
fn zero_length_fs_redb_is_refused_and_recover_brings_the_files_back() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let big = random(700 << 10, 3);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/big"), &big).unwrap();
    fs::write(m.path("d/small"), b"inline").unwrap();
    let (repo, dir) = m.unmount();
    let roots = ok(&repo, &["roots"]);
    assert!(roots.contains("version/1"), "{roots}");

    fs::File::create(repo.join("meta/fs.redb")).unwrap();
    let mount = cairn(&repo, &["mount", dir.to_str().unwrap()]);
    assert!(!mount.status.success(), "mount accepted an empty fs.redb");
    let err = String::from_utf8_lossy(&mount.stderr);
    assert!(
        err.contains("cairn recover") && err.contains("empty"),
        "{err}"
    );
    refused(&repo, &["gc"]);
    refused(&repo, &["stats"]);
    // Nothing was written into it, and the version is still there.
    assert_eq!(fs::metadata(repo.join("meta/fs.redb")).unwrap().len(), 0);
    assert!(ok(&repo, &["roots"]).contains("version/1"));

    ok(&repo, &["recover"]);
    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    assert_eq!(fs::read(m.path("d/small")).unwrap(), b"inline");
    m.unmount();
    ok(&repo, &["check"]);
}

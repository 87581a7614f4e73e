//! A directory's listing gives `..` the inode of the directory holding it,
//! from the metadata engine's parent pointer: after a move across
//! directories, and in a fresh mount that never looked the path up.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{ok, sh, Mount};

/// The inode number `ls -fai` lists for `..` in `dir`.
fn dotdot(dir: &Path) -> u64 {
    let out = sh(&format!("ls -fai '{}'", dir.display()));
    out.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let ino = w.next()?;
            (w.next()? == "..").then(|| ino.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no .. in {out}"))
}

#[test]
fn a_listing_names_the_directory_above_as_dotdot() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    fs::create_dir_all(m.path("a/b/c")).unwrap();
    fs::create_dir(m.path("x")).unwrap();
    let ino = |p: &str| fs::metadata(m.path(p)).unwrap().ino();
    assert_eq!(dotdot(&m.path("a/b")), ino("a"));
    assert_eq!(dotdot(&m.path("a")), ino(""), "the root");

    fs::rename(m.path("a/b"), m.path("x/b")).unwrap();
    assert_eq!(dotdot(&m.path("x/b")), ino("x"));
    let (x, b) = (ino("x"), ino("x/b"));
    let (repo, dir) = m.unmount();

    // A fresh mount: `..` without any lookup of the way down first.
    let m = Mount::start(repo, dir);
    assert_eq!(dotdot(&m.path("x/b/c")), b);
    assert_eq!(dotdot(&m.path("x/b")), x);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}

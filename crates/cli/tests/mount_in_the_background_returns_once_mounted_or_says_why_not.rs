//! `cairn mount --background DIR` returns once DIR is a live cairn mount
//! (a file written right after it lands in the repository), and when the
//! daemon cannot mount it fails with the daemon's own reason and leaves
//! nothing running.

mod common;

use std::fs;

use common::{cairn, is_cairn_mounted, ok};

#[test]
fn mount_in_the_background_returns_once_mounted_or_says_why_not() {
    common::require_fuse();
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);

    // Not empty: the daemon refuses, and the command says why.
    fs::write(dir.join("stray"), b"x").unwrap();
    let out = cairn(&repo, &["mount", "--background", dir.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("without mounting") && said.contains("not empty"),
        "{said}"
    );
    assert!(!is_cairn_mounted(&dir));
    fs::remove_file(dir.join("stray")).unwrap();

    ok(&repo, &["mount", "--background", dir.to_str().unwrap()]);
    assert!(is_cairn_mounted(&dir), "mounted when the command returns");
    fs::write(dir.join("note.txt"), b"written at once").unwrap();
    ok(&repo, &["umount", dir.to_str().unwrap()]);
    assert!(!is_cairn_mounted(&dir));

    // What was written is in the repository: it reads back after a remount.
    ok(&repo, &["mount", "--background", dir.to_str().unwrap()]);
    assert_eq!(fs::read(dir.join("note.txt")).unwrap(), b"written at once");
    ok(&repo, &["umount", dir.to_str().unwrap()]);
}

//! A tree 12,000 directories deep through a real mount: writing a version,
//! a snapshot, garbage collection, `cairn check`, the snapshot's view, a
//! remount and `cairn recover` all walk it, and the daemon stays up. (At
//! 3,000 levels a version write once overflowed the daemon's stack and
//! aborted it, taking the mount down for every user; the background
//! committer did it again after every mount.) The walks' own limits on a
//! small stack are held at the library level (`fs/tests/deep_tree.rs`).
//!
//! No path that deep fits in PATH_MAX, so the tree is built and read one
//! level at a time, each directory opened relative to the one above it.

mod common;

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use common::{is_mounted, ok, Mount};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

const DEPTH: usize = 12_000;
const LEVEL: &str = "d";
const BOTTOM: &str = "bottom";

fn c(name: &str) -> CString {
    CString::new(name).unwrap()
}

/// `name` under the directory `dir`, opened as a handle on the directory
/// itself (`O_PATH`: a lookup, no open of the directory's contents).
fn open_dir_at(dir: &OwnedFd, name: &str) -> OwnedFd {
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c(name).as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    assert!(
        fd >= 0,
        "openat {name}: {}",
        std::io::Error::last_os_error()
    );
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn open_dir(path: &Path) -> OwnedFd {
    let path = c(path.to_str().unwrap());
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn open_file_at(dir: &OwnedFd, name: &str, flags: i32) -> File {
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c(name).as_ptr(),
            flags | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    assert!(
        fd >= 0,
        "openat {name}: {}",
        std::io::Error::last_os_error()
    );
    File::from(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes `DEPTH` nested directories under `top` and the file `BOTTOM` with
/// `bytes` at the bottom, one level at a time.
fn build(top: &Path, bytes: &[u8]) {
    let mut dir = open_dir(top);
    let name = c(LEVEL);
    for level in 0..DEPTH {
        let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
        assert_eq!(
            made,
            0,
            "mkdir at level {level}: {}",
            std::io::Error::last_os_error()
        );
        // The level above is closed as the one below is opened.
        dir = open_dir_at(&dir, LEVEL);
    }
    let mut file = open_file_at(&dir, BOTTOM, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL);
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
}

/// The bytes of `BOTTOM`, `DEPTH` levels below `top`.
fn read_bottom(top: &Path) -> Vec<u8> {
    let mut dir = open_dir(top);
    for _ in 0..DEPTH {
        dir = open_dir_at(&dir, LEVEL);
    }
    let mut out = Vec::new();
    open_file_at(&dir, BOTTOM, libc::O_RDONLY)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The daemon answers and its mount is still there.
fn alive(m: &Mount) {
    assert!(is_mounted(&m.dir), "the mount is gone");
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&m.repo, &["stats", "--json"])).unwrap();
    assert_eq!(stats["fs_dirs"], DEPTH as u64 + 1, "{stats}");
    assert_eq!(stats["fs_files"], 1, "{stats}");
}

#[test]
fn a_12000_level_tree_survives_versions_snapshots_gc_remount_and_recover() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut bytes = vec![0; 1 << 20];
    StdRng::seed_from_u64(12).fill_bytes(&mut bytes);
    build(&m.dir, &bytes);
    alive(&m);

    let version = ok(&m.repo, &["version"]);
    assert!(
        version.contains(&format!("{} directories", DEPTH + 1)),
        "{version}"
    );
    alive(&m);
    let snapshot = ok(&m.repo, &["snapshot", "create", "deep"]);
    assert!(
        snapshot.contains(&format!("{} directories", DEPTH + 1)),
        "{snapshot}"
    );
    alive(&m);
    let gc = ok(&m.repo, &["gc"]);
    assert!(gc.starts_with("marked "), "{gc}");
    alive(&m);

    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    assert_eq!(read_bottom(&m.dir), bytes);
    assert_eq!(read_bottom(&m.path(".snapshots/deep")), bytes);
    let check = ok(&m.repo, &["check"]);
    assert!(check.contains("no damage found"), "{check}");
    alive(&m);

    // The metadata engine rebuilt from the version holds the whole tree.
    let (repo, dir) = m.unmount();
    let recovered = ok(&repo, &["recover"]);
    assert!(
        recovered.contains(&format!("{} directories", DEPTH + 1)),
        "{recovered}"
    );
    let m = Mount::start(repo, dir);
    assert_eq!(read_bottom(&m.dir), bytes);
    alive(&m);
    m.unmount();
}

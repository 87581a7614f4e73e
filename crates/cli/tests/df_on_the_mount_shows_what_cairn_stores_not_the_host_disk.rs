//! `df` on a mount shows cairn's figures: Used grows by what cairn stores
//! (incompressible data once, a duplicate not again) and not by anything
//! else written to the disk under the repository; Avail is that disk's
//! free space; Size is Used + Avail; the inode count follows the files.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{no_versions, random, write_synced, Mount};

/// (Used, Avail, Size) in bytes, and inodes in use.
#[derive(Debug, Clone, Copy)]
struct Df {
    used: u64,
    avail: u64,
    size: u64,
    inodes: u64,
}

fn df(path: &Path) -> Df {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid path and out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    let block = st.f_frsize;
    Df {
        used: (st.f_blocks - st.f_bfree) * block,
        avail: st.f_bavail * block,
        size: st.f_blocks * block,
        inodes: st.f_files - st.f_ffree,
    }
}

/// Polls `df` until `done` holds: a write's containers are counted once
/// indexed, which follows the fsync. The deadline only bounds a failure.
fn df_once(path: &Path, done: impl Fn(&Df) -> bool) -> Df {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = df(path);
        if done(&now) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const MB: u64 = 1_000_000;

#[test]
fn df_on_the_mount_shows_what_cairn_stores_not_the_host_disk() {
    let base = tempfile::tempdir().unwrap();
    let (_disk, repo, mnt) = common::repo_on_tmpfs(base.path(), 256);
    // No version timer: nothing but this test's writes adds to the store.
    no_versions(&repo);
    let m = Mount::start(repo.clone(), mnt.clone());

    let empty = df(&mnt);
    assert_eq!(empty.size, empty.used + empty.avail, "{empty:?}");
    assert!(empty.used < MB, "an empty repository stores {empty:?}");

    let data = random(20 * MB as usize, 1);
    write_synced(&m.path("a"), &data).unwrap();
    let one = df_once(&mnt, |d| d.used >= empty.used + 20 * MB);
    let grown = one.used - empty.used;
    assert!(
        (20 * MB..21 * MB).contains(&grown),
        "20 MB of random bytes made Used grow by {grown}: {one:?}"
    );
    assert_eq!(one.size, one.used + one.avail, "{one:?}");
    // Avail is the disk's free space, which the containers took.
    assert!(one.avail + 20 * MB <= empty.avail + MB, "{empty:?} {one:?}");

    // A duplicate is stored once: Used stays put (a file's recipe is
    // metadata, not a container).
    write_synced(&m.path("b"), &data).unwrap();
    let dup = df_once(&mnt, |d| d.inodes > one.inodes);
    assert!(
        dup.used < one.used + MB,
        "a duplicate grew Used: {one:?} {dup:?}"
    );
    assert_eq!(dup.inodes, one.inodes + 1, "{one:?} {dup:?}");

    // 50 MB written beside the repository, on the same disk, takes from
    // Avail and not a byte from Used.
    write_synced(
        &base.path().join("disk/unrelated"),
        &random(50 * MB as usize, 2),
    )
    .unwrap();
    let host = df(&mnt);
    assert_eq!(host.used, dup.used, "the host's bytes count as cairn's");
    assert!(host.avail + 50 * MB <= dup.avail + MB, "{dup:?} {host:?}");
    assert_eq!(host.size, host.used + host.avail, "{host:?}");

    assert_eq!(fs::read(m.path("b")).unwrap(), data);
    m.unmount();
}

//! `fallocate` through the mount: plain allocation makes a file long
//! enough (zeros read back, nothing shrinks), `KEEP_SIZE` alone changes
//! nothing, modes that move data (collapse, insert) are refused with
//! EOPNOTSUPP and a size past the largest offset with EFBIG.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::io::AsRawFd;

use common::{ok, Mount};

fn fallocate(f: &fs::File, mode: i32, offset: i64, len: i64) -> i32 {
    // SAFETY: a valid open descriptor and plain integers.
    if unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

#[test]
fn fallocate_extends_a_file_through_the_mount() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let path = m.path("f");
    fs::write(&path, b"head").unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    assert_eq!(fallocate(&f, 0, 1000, 123_456), 0);
    assert_eq!(f.metadata().unwrap().len(), 124_456);
    assert_eq!(fallocate(&f, 0, 0, 10), 0);
    assert_eq!(f.metadata().unwrap().len(), 124_456, "never shrinks");
    assert_eq!(fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20), 0);
    assert_eq!(f.metadata().unwrap().len(), 124_456, "KEEP_SIZE keeps it");
    for mode in [libc::FALLOC_FL_COLLAPSE_RANGE, libc::FALLOC_FL_INSERT_RANGE] {
        assert_eq!(fallocate(&f, mode, 0, 4096), libc::EOPNOTSUPP);
    }
    assert_eq!(fallocate(&f, 0, i64::MAX - 1, 2), libc::EFBIG);
    drop(f);
    let (repo, dir) = m.unmount();

    let m = Mount::start(repo, dir);
    let mut want = b"head".to_vec();
    want.resize(124_456, 0);
    assert_eq!(fs::read(m.path("f")).unwrap(), want);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}

//! Versions age out as the retention rule says, on a clock the test moves
//! (nothing sleeps): data deleted from the file system is held by the
//! versions written before the delete, freed by gc once those versions
//! are older than every retention window, while a snapshot holding data
//! keeps it; and nothing is dropped while the live namespace is empty.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chunking::ChunkerParams;
use fs::retention::Clock;
use fs::{Fs, FsSettings};
use meta::{Content, FileKind, InodeId, NewInode, Timestamp};
use rand::{RngCore, SeedableRng};

struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        Timestamp {
            secs: self.0.load(Ordering::SeqCst),
            nanos: 0,
        }
    }
}

const DAY: i64 = 86400;

fn write_file(fs: &Fs, name: &str, bytes: &[u8]) {
    let new = NewInode {
        kind: FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    };
    let inode = fs.create(InodeId::ROOT, name.as_bytes(), new).unwrap();
    fs.open(inode.id).unwrap();
    fs.write(inode.id, 0, bytes).unwrap();
    fs.flush(inode.id).unwrap();
    fs.release(inode.id).unwrap();
}

fn read_file(fs: &Fs, name: &str) -> Vec<u8> {
    let inode = fs.lookup(InodeId::ROOT, name.as_bytes()).unwrap();
    fs.read(inode.id, 0, inode.attr.size as u32).unwrap()
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn labels(fs: &Fs) -> Vec<u64> {
    fs.versions().unwrap().into_iter().map(|(n, _)| n).collect()
}

fn gc(fs: &Fs) -> gc::GcReport {
    common::collect_all(fs)
}

#[test]
fn deleted_data_is_freed_once_its_versions_age_out() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let settings = FsSettings {
        // Versions only when the test asks: no timer races the clock.
        version_interval: std::time::Duration::ZERO,
        ..FsSettings::default()
    };
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();
    let t0 = 100 * DAY;
    let clock = Arc::new(TestClock(AtomicI64::new(t0)));
    fs.set_clock(clock.clone());

    let doomed = random(600 << 10, 1);
    let kept = random(300 << 10, 2);
    write_file(&fs, "kept-by-snapshot", &kept);
    fs.snapshot_create("s").unwrap();
    write_file(&fs, "doomed", &doomed);
    assert!(fs.write_version().unwrap().written);

    // Both deleted; the file system still holds a file.
    clock.0.store(t0 + 600, Ordering::SeqCst);
    fs.unlink(InodeId::ROOT, b"doomed").unwrap();
    fs.unlink(InodeId::ROOT, b"kept-by-snapshot").unwrap();
    write_file(&fs, "small", b"still here");
    let v = fs.write_version().unwrap();
    assert!(v.dropped.is_empty(), "within the hour: {:?}", v.dropped);
    assert_eq!(labels(&fs), vec![1, 2]);

    // Ten minutes later, version 1 still holds the deleted data.
    let held = fs.space_report().unwrap().held;
    assert!(held.versions_only_bytes >= doomed.len() as u64, "{held:?}");
    assert!(
        held.snapshots_and_versions_bytes >= kept.len() as u64,
        "{held:?}"
    );
    let r = gc(&fs);
    assert!(r.dropped_versions.is_empty(), "{:?}", r.dropped_versions);
    let before = fs.space_report().unwrap();
    assert!(
        before.held.versions_only_bytes >= doomed.len() as u64,
        "gc freed data a kept version holds"
    );

    // Eight days on, past every window: gc drops version 1 (version 2 is
    // the newest, always kept).
    clock.0.store(t0 + 8 * DAY, Ordering::SeqCst);
    let r = gc(&fs);
    assert_eq!(r.dropped_versions, vec!["version/1".to_string()]);
    assert!(
        r.freed_bytes > 0 && r.dropped_chunks > 0,
        "nothing freed: {r:?}"
    );
    assert_eq!(labels(&fs), vec![2]);
    let after = fs.space_report().unwrap();
    // What is left to versions alone is a directory listing or two.
    assert!(
        after.held.versions_only_bytes < doomed.len() as u64 / 100,
        "{after:?}"
    );
    assert!(
        after.unique_bytes + doomed.len() as u64 <= before.unique_bytes,
        "the deleted file's chunks are still stored: {before:?} {after:?}"
    );
    // The snapshot alone holds its file now, and it reads back exact.
    assert!(
        after.held.snapshots_only_bytes >= kept.len() as u64,
        "{after:?}"
    );
    fs.restore("s", "/kept-by-snapshot", Some("/restored"), false)
        .unwrap();
    assert_eq!(read_file(&fs, "restored"), kept);
    assert_eq!(read_file(&fs, "small"), b"still here");
    fs.shutdown().unwrap();
}

#[test]
fn an_empty_file_system_drops_no_version() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let settings = FsSettings {
        version_interval: std::time::Duration::ZERO,
        retention: fs::retention::Retention {
            last: 1,
            minutes: 0,
            hourly: 0,
            daily: 0,
        },
        ..FsSettings::default()
    };
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(10 * DAY)));
    fs.set_clock(clock.clone());
    write_file(&fs, "a", &random(100 << 10, 3));
    fs.write_version().unwrap();
    write_file(&fs, "b", b"b");
    let v = fs.write_version().unwrap();
    // keep_last = 1: the older version goes at once.
    assert_eq!(v.dropped, vec!["version/1".to_string()]);

    fs.unlink(InodeId::ROOT, b"a").unwrap();
    fs.unlink(InodeId::ROOT, b"b").unwrap();
    clock.0.store(40 * DAY, Ordering::SeqCst);
    let v = fs.write_version().unwrap();
    assert!(v.written);
    assert!(v.dropped.is_empty(), "{:?}", v.dropped);
    assert!(fs.apply_retention(true).unwrap().is_empty());
    assert!(gc(&fs).dropped_versions.is_empty());
    assert_eq!(labels(&fs), vec![2, 3]);

    // Holding a file again, the rule applies as before.
    write_file(&fs, "c", b"c");
    let v = fs.write_version().unwrap();
    assert_eq!(v.dropped, vec!["version/2", "version/3"]);
    fs.shutdown().unwrap();
}

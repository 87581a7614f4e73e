//! A tree 8,000 directories deep through every walk of the history: a
//! version, snapshots, a diff, a clone, a restore, the "unique bytes"
//! count, a rename's loop check and garbage collection's marking. Each of
//! them once recursed a level per directory and overflowed the thread's
//! stack, which aborted the daemon; this runs them on a thread of
//! [`STACK`] bytes, which a walk spending even 100 bytes of stack per level
//! would overflow.

mod common;

use std::sync::Arc;
use std::time::Duration;

use chunking::ChunkerParams;
use fs::history::{Change, ChangeKind};
use fs::reach::{self, MarkSet};
use fs::{Fs, FsSettings, SNAPSHOTS_DIR};
use meta::{FileKind, InodeId, NewInode, RenameFlags};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

const DEPTH: usize = 8_000;
/// The walks' thread's stack: a quarter of a default thread's.
const STACK: usize = 512 << 10;
const LEVEL: &str = "d";
const BOTTOM: &str = "bottom";
/// Bytes of a stored listing of one entry without xattrs, besides the
/// entry's name (the format in `fs::tree`): header, then the name's length,
/// inode, kind, mode, owner, group, size, rdev, four times, content
/// (a listing or a recipe) and the xattr count.
const ONE_ENTRY_LISTING: u64 = 4 + 1 + 4 + 2 + 8 + 1 + 2 + 4 + 4 + 8 + 4 + 4 * 12 + 1 + 32 + 2;

/// Bytes no other call returns: every chunk of them is unique.
fn random(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

fn write_all(fs: &Fs, ino: InodeId, bytes: &[u8]) {
    fs.open(ino).unwrap();
    fs.setattr(ino, &Default::default(), Some(0)).unwrap();
    for (i, piece) in bytes.chunks(64 << 10).enumerate() {
        fs.write(ino, (i * (64 << 10)) as u64, piece).unwrap();
    }
    fs.flush(ino).unwrap();
    fs.release(ino).unwrap();
}

/// The directory `DEPTH` levels of `LEVEL` below `top`, looked up one
/// level at a time.
fn descend(fs: &Fs, top: InodeId) -> InodeId {
    let mut at = top;
    for _ in 0..DEPTH {
        at = fs.lookup(at, LEVEL.as_bytes()).unwrap().id;
    }
    at
}

/// The bottom file's bytes under `top` (`top` is the first `LEVEL`'s
/// parent).
fn read_bottom(fs: &Fs, top: InodeId) -> Vec<u8> {
    let file = fs.lookup(descend(fs, top), BOTTOM.as_bytes()).unwrap();
    assert_eq!(file.attr.kind, FileKind::File);
    fs.open(file.id).unwrap();
    let bytes = fs.read(file.id, 0, file.attr.size as u32 + 1).unwrap();
    fs.release(file.id).unwrap();
    bytes
}

fn read_path(fs: &Fs, path: &str) -> Vec<u8> {
    let file = fs.resolve(path).unwrap();
    fs.read(file.id, 0, file.attr.size as u32 + 1).unwrap()
}

fn snapshot_top(fs: &Fs, name: &str) -> InodeId {
    let snaps = fs.lookup(InodeId::ROOT, SNAPSHOTS_DIR).unwrap().id;
    fs.lookup(snaps, name.as_bytes()).unwrap().id
}

#[test]
fn every_history_walk_handles_a_deep_tree_on_a_small_stack() {
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(walk_a_deep_tree)
        .unwrap()
        .join()
        .unwrap();
}

fn walk_a_deep_tree() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let settings = FsSettings {
        // Versions only when the test asks for them.
        version_interval: Duration::ZERO,
        ..FsSettings::default()
    };
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();

    let mut at = InodeId::ROOT;
    for _ in 0..DEPTH {
        at = fs
            .create(at, LEVEL.as_bytes(), NewInode::empty(FileKind::Dir))
            .unwrap()
            .id;
    }
    let deepest = at;
    // Above the inline limit, so the file has a recipe and chunks to mark.
    let first = random(1, 200 << 10);
    let bottom = fs
        .create(deepest, BOTTOM.as_bytes(), NewInode::empty(FileKind::File))
        .unwrap()
        .id;
    write_all(&fs, bottom, &first);

    let version = fs.write_version().unwrap();
    assert!(version.written);
    assert_eq!((version.files, version.dirs), (1, DEPTH as u64 + 1));
    assert_eq!(version.dirs_written, DEPTH as u64 + 1);
    fs.snapshot_create("a").unwrap();

    let second = random(2, 300 << 10);
    write_all(&fs, bottom, &second);
    fs.snapshot_create("b").unwrap();

    let bottom_path = format!("{}/{BOTTOM}", format!("/{LEVEL}").repeat(DEPTH));
    assert_eq!(
        fs.snapshot_diff("a", "b").unwrap(),
        vec![Change {
            kind: ChangeKind::Changed,
            path: bottom_path.clone(),
        }]
    );
    assert!(fs.snapshot_diff("b", "b").unwrap().is_empty());

    // Against the live file system, snapshot a alone holds the first
    // content, found at the bottom of its tree, and every listing on the
    // way down (DEPTH of them name `LEVEL`, the last names `BOTTOM`).
    let a = fs.store().get_root("snapshot/a").unwrap();
    let mut live = MarkSet::default();
    fs.mark_live(&mut live).unwrap();
    let listings = DEPTH as u64 * (ONE_ENTRY_LISTING + LEVEL.len() as u64)
        + ONE_ENTRY_LISTING
        + BOTTOM.len() as u64;
    assert_eq!(
        reach::unique_bytes(fs.store(), &a, &live).unwrap(),
        first.len() as u64 + listings
    );

    let cloned = fs.clone_path(&format!("/{LEVEL}"), "/clone").unwrap();
    assert_eq!((cloned.files, cloned.dirs), (1, DEPTH as u64));
    let restored = fs
        .restore("a", &format!("/{LEVEL}"), Some("/restored"), false)
        .unwrap();
    assert_eq!((restored.files, restored.dirs), (1, DEPTH as u64));

    // Moving the top into its own bottom walks every parent, and is refused.
    let moved = fs.rename(
        InodeId::ROOT,
        LEVEL.as_bytes(),
        deepest,
        b"loop",
        RenameFlags::default(),
    );
    assert_eq!(moved.unwrap_err().errno(), libc::EINVAL);

    // Garbage in a container of its own (a large file), gone before gc.
    let junk = fs
        .create(InodeId::ROOT, b"junk", NewInode::empty(FileKind::File))
        .unwrap()
        .id;
    write_all(&fs, junk, &random(3, 3 << 20));
    fs.sync_all().unwrap();
    fs.unlink(InodeId::ROOT, b"junk").unwrap();
    fs.sync_all().unwrap();
    let report = common::collect_all(&fs);
    // Two chunks (a listing and its recipe node) per directory of the
    // version and snapshot a (one tree) and of snapshot b.
    assert!(report.marked_chunks > 4 * DEPTH as u64, "{report:?}");
    assert!(report.reclaimed_containers >= 1, "{report:?}");
    assert!(report.skipped.is_empty(), "{report:?}");

    assert_eq!(read_bottom(&fs, InodeId::ROOT), second);
    assert_eq!(read_bottom(&fs, snapshot_top(&fs, "a")), first);
    // The clone and the restored copy stand for the top `LEVEL` itself.
    let below_top = format!("{}/{BOTTOM}", format!("/{LEVEL}").repeat(DEPTH - 1));
    assert_eq!(read_path(&fs, &format!("/clone{below_top}")), second);
    assert_eq!(read_path(&fs, &format!("/restored{below_top}")), first);
    fs.shutdown().unwrap();
}

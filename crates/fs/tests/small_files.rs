//! Many small files through the file system API, on a real store and
//! metadata engine: they must neither leak into the dirty-byte budget nor
//! make a container each.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::{Content, FileKind, InodeId, NewInode};

struct Rig {
    _dir: tempfile::TempDir,
    fs: Fs,
}

fn rig(settings: FsSettings) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();
    Rig { _dir: dir, fs }
}

/// Creates, writes, closes (flush then release, as the kernel does).
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
    for (i, piece) in bytes.chunks(4096).enumerate() {
        fs.write(inode.id, (i * 4096) as u64, piece).unwrap();
    }
    fs.flush(inode.id).unwrap();
    fs.release(inode.id).unwrap();
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7919) % 251) as u8)
        .collect()
}

fn read_file(fs: &Fs, name: &str, len: u32) -> Vec<u8> {
    let ino = fs.lookup(InodeId::ROOT, name.as_bytes()).unwrap().id;
    fs.read(ino, 0, len).unwrap()
}

fn containers(fs: &Fs) -> u64 {
    fs.store().stats().unwrap().containers
}

#[test]
fn closed_inline_files_leave_the_dirty_budget() {
    // Far more inline bytes than the budget: had closed files stayed
    // counted, every later write would be stored at once, in containers.
    let rig = rig(FsSettings {
        total_dirty_max: 256 << 10,
        ..FsSettings::default()
    });
    for i in 0..200 {
        write_file(&rig.fs, &format!("small-{i}"), &pattern(i, 8000));
    }
    // Reopened and appended to: loaded with their inline bytes.
    for i in 0..200 {
        let ino = rig
            .fs
            .lookup(InodeId::ROOT, format!("small-{i}").as_bytes())
            .unwrap()
            .id;
        rig.fs.open(ino).unwrap();
        rig.fs.write(ino, 8000, &pattern(i + 1, 4000)).unwrap();
        rig.fs.flush(ino).unwrap();
        rig.fs.release(ino).unwrap();
    }
    rig.fs.sync_all().unwrap();
    assert_eq!(rig.fs.dirty_bytes(), 0, "closed files still count as dirty");
    assert_eq!(
        containers(&rig.fs),
        0,
        "inline files were written to containers"
    );
    for i in [0, 99, 199] {
        let mut want = pattern(i, 8000);
        want.extend(pattern(i + 1, 4000));
        assert_eq!(read_file(&rig.fs, &format!("small-{i}"), 12_000), want);
    }
    assert_eq!(rig.fs.dirty_bytes(), 0, "reading left bytes counted");
}

#[test]
fn closed_small_files_share_containers() {
    let rig = rig(FsSettings::default());
    let files = 300;
    for i in 0..files {
        // Above the inline limit (16 KiB), so each has a recipe.
        write_file(&rig.fs, &format!("f-{i}"), &pattern(i, 40_000));
    }
    rig.fs.sync_all().unwrap();
    assert_eq!(rig.fs.dirty_bytes(), 0);
    // 12 MB of data fills about three 4 MiB containers; a container per
    // file would be 300.
    let made = containers(&rig.fs);
    assert!(made <= 6, "{made} containers for {files} small files");
    for i in [0, 150, 299] {
        assert_eq!(
            read_file(&rig.fs, &format!("f-{i}"), 40_000),
            pattern(i, 40_000)
        );
    }
}

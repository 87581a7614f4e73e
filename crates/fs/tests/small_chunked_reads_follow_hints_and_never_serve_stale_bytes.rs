//! `Fs::read_small` reads a small file stored in chunks where its
//! path-index entry says the chunks are: a file with no hints gets them
//! from its first read, hints pointing at the wrong place (another file's
//! chunk, a container that does not exist) still give the file's exact
//! bytes and are replaced, and a file being written is
//! left to the usual read, never answered with its older bytes.

use std::path::Path;
use std::sync::Arc;

use branch::LocalDir;
use cas::{RepoKey, Store, StoreSettings};
use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::{Content, ContentHints, FileKind, InodeId, MetaStore, NewInode, RedbMeta};

/// The file system over `dir`, with no DRAM chunk cache (every read is
/// cold), and its metadata engine.
fn open(dir: &Path) -> (Fs, Arc<RedbMeta>) {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    std::fs::create_dir_all(dir.join("meta")).unwrap();
    let store = Store::open(
        Arc::new(branch),
        &dir.join("meta"),
        RepoKey::generate(),
        StoreSettings::default(),
    )
    .unwrap();
    let meta = Arc::new(RedbMeta::open(&dir.join("fs.redb"), 0, 0).unwrap());
    let settings = FsSettings {
        cache_bytes: 0,
        ..FsSettings::default()
    };
    let fs = Fs::new(meta.clone(), store, ChunkerParams::default(), settings).unwrap();
    (fs, meta)
}

fn new_file() -> NewInode {
    NewInode {
        kind: FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn write_file(fs: &Fs, name: &[u8], data: &[u8]) -> InodeId {
    let ino = fs.create(InodeId::ROOT, name, new_file()).unwrap().id;
    fs.open(ino).unwrap();
    fs.write(ino, 0, data).unwrap();
    fs.release(ino).unwrap();
    ino
}

/// The file's bytes by `read_small`, and the hints its lookup carried.
fn read(fs: &Fs, path: &[u8]) -> (Option<Vec<u8>>, Option<ContentHints>) {
    let found = fs.lookup_path(path).unwrap();
    let got = fs.read_small(&found.inode, found.hints.as_ref()).unwrap();
    (got, found.hints)
}

#[test]
fn small_chunked_reads_follow_hints_and_never_serve_stale_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, meta) = open(dir.path());
    let (a, b) = (bytes(20_000, 1), bytes(30_000, 2));
    let ia = write_file(&fs, b"a", &a);
    let ib = write_file(&fs, b"b", &b);
    fs.sync_all().unwrap();

    // No entry when the commit ran: the first read gives the hints.
    assert_eq!(read(&fs, b"a"), (Some(a.clone()), None));
    let (got, hints) = read(&fs, b"a");
    assert_eq!(got.as_ref(), Some(&a));
    let ha = hints.expect("the first read gave the entry hints");
    assert_eq!(
        ha.chunks.iter().map(|c| c.len as usize).sum::<usize>(),
        a.len()
    );
    let hb = read(&fs, b"b").1.or_else(|| read(&fs, b"b").1).unwrap();

    // Hints that point elsewhere: another file's chunk, a container that
    // does not exist. A read gives the file's bytes and replaces them.
    let mut wrong = ha.clone();
    wrong.chunks[0].location = hb.chunks[0].location;
    assert!(meta.set_path_hints(ia, &wrong).unwrap());
    let mut gone = hb.clone();
    gone.chunks[0].location[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(meta.set_path_hints(ib, &gone).unwrap());
    assert_eq!(read(&fs, b"a"), (Some(a.clone()), Some(wrong)));
    assert_eq!(read(&fs, b"a").1.as_ref(), Some(&ha));
    assert_eq!(read(&fs, b"b"), (Some(b.clone()), Some(gone)));
    assert_eq!(read(&fs, b"b").1.as_ref(), Some(&hb));

    // Being written: nothing of the record is the answer.
    fs.open(ia).unwrap();
    fs.write(ia, 0, b"newer").unwrap();
    assert_eq!(read(&fs, b"a").0, None);
    fs.release(ia).unwrap();
    fs.sync_all().unwrap();
    let mut newer = a.clone();
    newer[..5].copy_from_slice(b"newer");
    let (got, hints) = read(&fs, b"a");
    assert_eq!(got.as_ref(), Some(&newer));
    assert!(
        hints.is_some_and(|h| h != ha),
        "the old content's hints were kept"
    );
    assert!(meta.verify().unwrap().is_empty());
}

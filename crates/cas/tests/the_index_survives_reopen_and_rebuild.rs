//! The index and roots across a reopen, a second open, a rebuild, an
//! unflushed stream, a collection ending, and an index creation cut short.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use cas::{CasError, ChunkId, RepoKey, Store};

use common::*;

#[test]
fn state_survives_reopen_and_roots_work() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let c = text(50_000, 3);
    let id = {
        let (store, _) = open(dir.path(), &key);
        let mut w = store.stream();
        let id = w.write_chunk(c.clone()).unwrap();
        w.flush().unwrap();
        store.put_root("backup/1", &id).unwrap();
        let unknown = ChunkId::from_bytes([7; 32]);
        assert!(matches!(
            store.put_root("x", &unknown),
            Err(CasError::UnknownChunk(_))
        ));
        assert!(matches!(
            store.put_root("", &id),
            Err(CasError::BadLabel(_))
        ));
        id
    };
    let (store, _) = open(dir.path(), &key);
    assert_eq!(store.get_root("backup/1").unwrap(), id);
    assert_eq!(store.read_chunk(&id).unwrap(), c);
    assert_eq!(
        store.list_roots().unwrap(),
        vec![("backup/1".to_string(), id)]
    );
    store.delete_root("backup/1").unwrap();
    assert!(matches!(
        store.get_root("backup/1"),
        Err(CasError::NoSuchRoot(_))
    ));
    assert!(matches!(
        store.delete_root("backup/1"),
        Err(CasError::NoSuchRoot(_))
    ));
}

#[test]
fn second_open_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (_store, branch) = open(dir.path(), &key);
    let err = Store::open(branch, dir.path(), key, settings())
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("in use by another cairn process"),
        "{err}"
    );
}

#[test]
fn rebuilt_index_gives_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..60).map(|i| text(9_000 + i * 37, i as u32)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    store.put_root("r", &ids[0]).unwrap();
    drop(w);
    let locs: Vec<_> = ids.iter().map(|id| store.locate(id).unwrap()).collect();
    let stats = store.stats().unwrap();
    drop(store);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let (store, _) = open(dir.path(), &key);
    assert!(matches!(
        store.locate(&ids[0]),
        Err(CasError::UnknownChunk(_))
    ));
    let report = store.rebuild_index(&no_progress()).unwrap();
    assert!(report.problems.is_empty());
    assert_eq!(report.chunks_indexed, 60);
    for (id, loc) in ids.iter().zip(&locs) {
        assert_eq!(store.locate(id).unwrap(), *loc);
    }
    let rebuilt = store.stats().unwrap();
    assert_eq!(
        (
            rebuilt.chunks,
            rebuilt.containers,
            rebuilt.stored_bytes,
            rebuilt.unique_bytes
        ),
        (
            stats.chunks,
            stats.containers,
            stats.stored_bytes,
            stats.unique_bytes
        )
    );
    assert!(store.check(&no_progress()).unwrap().is_clean());
    // New containers after a lost index never reuse an existing id.
    let mut w = store.stream();
    let fresh = w.write_chunk(random(100_000)).unwrap();
    w.flush().unwrap();
    assert!(store.stats().unwrap().containers > stats.containers);
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    assert_eq!(store.read_chunk(&fresh).unwrap().len(), 100_000);
    assert_eq!(
        store.get_root("r").unwrap(),
        ids[0],
        "roots survive a lost index"
    );
}

#[test]
fn unflushed_stream_leaves_no_index_entries_and_a_clean_store() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let mut w = store.stream();
    let id = w.write_chunk(random(1000)).unwrap();
    drop(w);
    assert!(!store.contains(&id).unwrap());
    assert!(store.check(&no_progress()).unwrap().is_clean());
}

#[test]
fn chunks_indexed_while_a_collection_ends_stay_findable() {
    // Collections that begin and end while containers are being indexed
    // (a collection once rebuilt the compact index as it ended, and commits
    // racing that rebuild dropped out of it) must leave every chunk findable.
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let mut base = store.stream();
    base.write_batch(&(0..2000).map(|_| random(64)).collect::<Vec<_>>())
        .unwrap();
    base.flush().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let collector = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                drop(store.begin_collection().unwrap());
            }
        })
    };
    let mut written = Vec::new();
    for _ in 0..300 {
        let chunks: Vec<Bytes> = (0..4).map(|_| random(2000)).collect();
        let mut w = store.stream();
        let ids = w.write_batch(&chunks).unwrap();
        w.flush().unwrap();
        written.extend(ids.into_iter().zip(chunks));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    collector.join().unwrap();
    for (id, data) in &written {
        assert_eq!(&store.read_chunk(id).unwrap(), data, "chunk {id}");
    }
}

#[test]
fn an_index_creation_cut_short_leaves_no_damaged_index() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    // What a process killed, or a disk that filled up, while creating the
    // index leaves behind.
    std::fs::write(dir.path().join("index.redb.creating"), b"half a header").unwrap();
    let (store, _) = open(dir.path(), &key);
    let mut w = store.stream();
    let id = w.write_chunk(text(5000, 3)).unwrap();
    w.flush().unwrap();
    drop((w, store));
    assert!(!dir.path().join("index.redb.creating").exists());
    let (store, _) = open(dir.path(), &key);
    assert_eq!(store.read_chunk(&id).unwrap(), text(5000, 3));
}

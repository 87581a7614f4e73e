//! Chunks written read back as they were, compressible or not, sealed or
//! not; the same data is stored once, also across concurrent streams; chunks
//! read together share a buffer only when they use most of it.

mod common;

use bytes::Bytes;
use cas::{CasError, RepoKey};

use common::*;

#[test]
fn round_trip_compressible_and_incompressible() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..40)
        .map(|i| {
            if i % 2 == 0 {
                random(10_000 + i * 100)
            } else {
                text(20_000, i as u32)
            }
        })
        .collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    assert!(
        w.stats().stored_bytes < w.stats().bytes,
        "text must compress"
    );
    for (id, c) in ids.iter().zip(&chunks) {
        assert_eq!(*id, key.chunk_id(c));
        assert_eq!(&store.read_chunk(id).unwrap(), c);
    }
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    let stats = store.stats().unwrap();
    assert_eq!(stats.chunks, 40);
    assert!(
        stats.containers >= 2,
        "256 KiB containers must have filled: {stats:?}"
    );
}

#[test]
fn same_data_twice_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..20).map(|_| random(30_000)).collect();
    let mut w = store.stream();
    w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    let before = store.stats().unwrap();
    let mut w2 = store.stream();
    w2.write_batch(&chunks).unwrap();
    w2.write_batch(&chunks[..5]).unwrap();
    w2.flush().unwrap();
    assert_eq!(w2.stats().new_chunks, 0);
    let after = store.stats().unwrap();
    assert_eq!(after.stored_bytes, before.stored_bytes);
    assert_eq!(after.chunks, 20);
    // Within one stream too, even before a flush.
    let mut w3 = store.stream();
    let c = random(5000);
    w3.write_batch(&[c.clone(), c.clone()]).unwrap();
    w3.write_chunk(c).unwrap();
    assert_eq!(w3.stats().new_chunks, 1);
    w3.flush().unwrap();
}

#[test]
fn concurrent_streams_deduplicate_against_sealed_containers() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let shared: Vec<Bytes> = (0..30).map(|_| random(16_000)).collect();
    let mut first = store.stream();
    first.write_batch(&shared).unwrap();
    first.flush().unwrap();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut w = store.stream();
                let own: Vec<Bytes> = (0..10).map(|i| text(12_000, t * 100 + i)).collect();
                let ids = w
                    .write_batch(&[shared.clone(), own.clone()].concat())
                    .unwrap();
                w.flush().unwrap();
                assert_eq!(w.stats().new_chunks, 10);
                (ids, [shared, own].concat())
            })
        })
        .collect();
    for h in handles {
        let (ids, chunks) = h.join().unwrap();
        assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    }
    assert_eq!(store.stats().unwrap().chunks, 70);
}

#[test]
fn chunks_are_readable_before_their_container_is_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let mut w = store.stream();
    let data = text(30_000, 9);
    let id = w.write_chunk(data.clone()).unwrap();
    assert_eq!(store.read_chunk(&id).unwrap(), data);
    assert_eq!(
        store.read_chunks(&[id, id]).unwrap(),
        vec![data.clone(), data.clone()]
    );
    drop(w);
    assert!(
        matches!(store.read_chunk(&id), Err(CasError::UnknownChunk(_))),
        "an abandoned stream's chunks vanish"
    );
}

/// Invariant 6: chunks read together share a buffer only when they use most
/// of it, so a cache can keep them as they are.
#[test]
fn chunks_share_a_buffer_only_when_they_use_most_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    // Random bytes are stored raw: a raw region is a slice of the span read.
    let chunks: Vec<Bytes> = (0..16).map(|_| random(4000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    let adjacent = |a: &Bytes, b: &Bytes| a.as_ptr() as usize + a.len() == b.as_ptr() as usize;
    // All of them: one buffer, each chunk right after the one before within
    // a region (two regions of eight; a region header lies between them).
    let all = store.read_chunks(&ids).unwrap();
    assert_eq!(all, chunks);
    let joined = all.windows(2).filter(|w| adjacent(&w[0], &w[1])).count();
    assert!(joined >= 12, "{joined} adjacent");
    // Two neighbours out of sixteen use an eighth of the span: copied out.
    let two = store.read_chunks(&ids[3..5]).unwrap();
    assert_eq!(two, chunks[3..5]);
    assert!(!adjacent(&two[0], &two[1]));
    // Compressed regions decode into a buffer of their own: the same holds.
    let texts: Vec<Bytes> = (0..16).map(|i| text(4000, i)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&texts).unwrap();
    w.flush().unwrap();
    let all = store.read_chunks(&ids).unwrap();
    assert_eq!(all, texts);
    let joined = all.windows(2).filter(|w| adjacent(&w[0], &w[1])).count();
    assert!(joined >= 8, "{joined} adjacent");
    let two = store.read_chunks(&ids[3..5]).unwrap();
    assert_eq!(two, texts[3..5]);
    assert!(!adjacent(&two[0], &two[1]));
}

#[test]
fn storage_reads_count_each_request_to_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..4).map(|_| random(30_000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    drop(w);
    let before = store.storage_reads();
    assert_eq!(store.read_chunk(&ids[0]).unwrap(), chunks[0]);
    let one = store.storage_reads() - before;
    assert_eq!(one, 1, "one chunk of a sealed container is one read");
    let before = store.storage_reads();
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    assert_eq!(
        store.storage_reads() - before,
        1,
        "neighbouring regions of one container are read together"
    );
}

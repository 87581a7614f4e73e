//! Store-level behaviour over a real local-directory branch and redb index.

use std::path::Path;
use std::sync::Arc;

use branch::{Branch, LocalDir};
use bytes::Bytes;
use cas::{CasError, ChunkId, Compression, ContainerId, Problem, RepoKey, Store, StoreSettings};

fn settings() -> StoreSettings {
    StoreSettings {
        container_size: 256 << 10,
        region_size: 32 << 10,
        ..Default::default()
    }
}

fn open(dir: &Path, key: &RepoKey) -> (Store, Arc<LocalDir>) {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    let branch = Arc::new(branch);
    let store = Store::open(branch.clone(), dir, key.clone(), settings()).unwrap();
    (store, branch)
}

fn random(len: usize) -> Bytes {
    (0..len)
        .map(|_| rand::random::<u8>())
        .collect::<Vec<_>>()
        .into()
}

fn text(len: usize, seed: u32) -> Bytes {
    let words = ["cairn ", "stone ", "path ", "marker ", "summit "];
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        out.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
    }
    out.truncate(len);
    out.into()
}

fn no_progress() -> impl Fn(cas::CheckProgress) + Sync {
    |_| {}
}

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

fn container_path(dir: &Path, id: ContainerId) -> std::path::PathBuf {
    dir.join("branch").join(id.blob_key().as_str())
}

#[test]
fn flipped_byte_is_detected_by_read_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..4).map(|_| random(20_000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    assert!(store.check(&no_progress()).unwrap().is_clean());
    let loc = store.locate(&ids[2]).unwrap();
    let path = container_path(dir.path(), loc.container);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = loc.region_offset as usize + 5 + loc.offset_in_region as usize + 100;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    drop((w, store));
    let (store, _) = open(dir.path(), &key);
    let err = store.read_chunk(&ids[2]).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CasError::CorruptChunk { .. }), "{msg}");
    assert!(
        msg.contains(&ids[2].to_string()) && msg.contains(&loc.container.to_string()),
        "{msg}"
    );
    assert_eq!(store.read_chunk(&ids[0]).unwrap(), chunks[0]);
    let report = store.check(&no_progress()).unwrap();
    assert!(!report.is_clean());
    assert!(report.problems.iter().any(|p| matches!(p,
        Problem::CorruptChunk { chunk, .. } if *chunk == ids[2])));
}

#[test]
fn truncated_container_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let mut w = store.stream();
    let ids = w.write_batch(&[random(40_000), random(40_000)]).unwrap();
    w.flush().unwrap();
    let loc = store.locate(&ids[1]).unwrap();
    let path = container_path(dir.path(), loc.container);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let report = store.check(&no_progress()).unwrap();
    let text: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        text.iter()
            .any(|t| t.contains(&loc.container.to_string()) && t.contains("truncated")),
        "{text:?}"
    );
    assert!(report
        .problems
        .iter()
        .any(|p| matches!(p, Problem::DanglingIndexEntry { .. })));
    let err = store.read_chunk(&ids[1]).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
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

/// A branch whose puts fail with `errno` while it is set (0: they work).
struct Failing {
    inner: branch::LocalDir,
    errno: std::sync::atomic::AtomicI32,
}

impl Branch for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    fn put(&self, key: &branch::BlobKey, data: &[u8]) -> branch::Result<()> {
        match self.errno.load(std::sync::atomic::Ordering::SeqCst) {
            0 => self.inner.put(key, data),
            errno => Err(branch::BranchError::Io {
                op: "write",
                path: key.as_str().into(),
                source: std::io::Error::from_raw_os_error(errno),
            }),
        }
    }
    fn get(&self, key: &branch::BlobKey) -> branch::Result<Vec<u8>> {
        self.inner.get(key)
    }
    fn read_range(
        &self,
        key: &branch::BlobKey,
        offset: u64,
        len: usize,
    ) -> branch::Result<Vec<u8>> {
        self.inner.read_range(key, offset, len)
    }
    fn size(&self, key: &branch::BlobKey) -> branch::Result<u64> {
        self.inner.size(key)
    }
    fn list(&self, prefix: &str) -> branch::Result<Vec<branch::BlobKey>> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &branch::BlobKey) -> branch::Result<()> {
        self.inner.delete(key)
    }
}

fn failing_store(dir: &Path, errno: i32, key: RepoKey) -> (Store, Arc<Failing>) {
    let branch = Arc::new(Failing {
        inner: branch::LocalDir::open("failing", dir.join("branch"))
            .unwrap()
            .0,
        errno: std::sync::atomic::AtomicI32::new(errno),
    });
    let settings = StoreSettings {
        compression: Compression::Lz4,
        ..settings()
    };
    let store = Store::open(branch.clone(), dir, key, settings).unwrap();
    (store, branch)
}

#[test]
fn failing_branch_fails_the_flush() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = failing_store(dir.path(), libc::EIO, RepoKey::generate());
    let mut w = store.stream();
    let id = w.write_chunk(random(1000)).unwrap();
    let err = w.flush().unwrap_err().to_string();
    assert!(
        err.contains("failed to be written") && err.contains("Input/output error"),
        "{err}"
    );
    assert!(!store.contains(&id).unwrap());
}

#[test]
fn a_full_branch_parks_the_container_until_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, branch) = failing_store(dir.path(), libc::ENOSPC, key.clone());
    let data = random(1000);
    let mut w = store.stream();
    let id = w.write_chunk(data.clone()).unwrap();
    let err = w.flush().unwrap_err();
    assert!(err.is_no_space(), "{err}");
    assert!(store.waiting_for_space().is_some());
    // Kept in memory and readable meanwhile.
    assert_eq!(store.read_chunk(&id).unwrap(), data);
    // Space returns: the I/O thread stores it on its own.
    branch.errno.store(0, std::sync::atomic::Ordering::SeqCst);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.waiting_for_space().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the parked container was never stored"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(store.contains(&id).unwrap());
    drop(w);
    drop(store);
    let (store, _) = failing_store(dir.path(), 0, key);
    assert_eq!(store.read_chunk(&id).unwrap(), data);
}

/// A branch that takes its time, so writers outrun it.
struct Slow(LocalDir);

impl Branch for Slow {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn put(&self, key: &branch::BlobKey, data: &[u8]) -> branch::Result<()> {
        std::thread::sleep(std::time::Duration::from_millis(15));
        self.0.put(key, data)
    }
    fn get(&self, key: &branch::BlobKey) -> branch::Result<Vec<u8>> {
        self.0.get(key)
    }
    fn read_range(&self, key: &branch::BlobKey, o: u64, l: usize) -> branch::Result<Vec<u8>> {
        self.0.read_range(key, o, l)
    }
    fn size(&self, key: &branch::BlobKey) -> branch::Result<u64> {
        self.0.size(key)
    }
    fn list(&self, prefix: &str) -> branch::Result<Vec<branch::BlobKey>> {
        self.0.list(prefix)
    }
    fn delete(&self, key: &branch::BlobKey) -> branch::Result<()> {
        self.0.delete(key)
    }
}

#[test]
fn writers_that_outrun_the_branch_stay_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (local, _) = LocalDir::open("local", dir.path().join("b")).unwrap();
    let settings = StoreSettings {
        container_size: 256 << 10,
        region_size: 64 << 10,
        memory_budget: 1 << 20,
        compression: Compression::None,
    };
    let store = Store::open(
        Arc::new(Slow(local)),
        dir.path(),
        RepoKey::generate(),
        settings,
    )
    .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(store.budget().in_use());
                std::thread::yield_now();
            }
            peak
        })
    };
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut w = store.stream();
                let mut all = Vec::new();
                for _ in 0..12 {
                    let batch: Vec<Bytes> = (0..4).map(|_| random(64 << 10)).collect();
                    all.extend(w.write_batch(&batch).unwrap().into_iter().zip(batch));
                }
                w.flush().unwrap();
                all
            })
        })
        .collect();
    let written: Vec<_> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = monitor.join().unwrap();
    assert!(peak > 0, "writers must hold budget while data is in flight");
    assert!(peak <= 1 << 20, "in flight {peak} exceeds the 1 MiB budget");
    for (id, data) in written {
        assert_eq!(store.read_chunk(&id).unwrap(), data);
    }
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

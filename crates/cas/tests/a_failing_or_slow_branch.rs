//! A branch that fails, fills up or lags behind: the flush fails, the
//! container waits for space, and writers stay within the memory budget.

mod common;

use std::path::Path;
use std::sync::Arc;

use branch::{Branch, LocalDir};
use bytes::Bytes;
use cas::{Compression, RepoKey, Store, StoreSettings};

use common::*;

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
        ..Default::default()
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

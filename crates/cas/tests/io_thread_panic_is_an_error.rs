//! The thread that makes containers durable panics (a branch whose `put`
//! panics stands in for a bug): every writer that flushes and every later
//! seal gets `CasError::IoThreadDead` instead of a panic or a hang, and
//! reopening the store afterwards finds what was durable before.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use branch::{BlobKey, Branch, LocalDir};
use bytes::Bytes;
use cas::{CasError, RepoKey, Store, StoreSettings};

/// A local branch whose writes panic once armed.
struct Panicky {
    inner: LocalDir,
    armed: AtomicBool,
}

impl Branch for Panicky {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn put(&self, key: &BlobKey, data: &[u8]) -> branch::Result<()> {
        assert!(!self.armed.load(Ordering::SeqCst), "injected panic in put");
        self.inner.put(key, data)
    }
    fn get(&self, key: &BlobKey) -> branch::Result<Vec<u8>> {
        self.inner.get(key)
    }
    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> branch::Result<Vec<u8>> {
        self.inner.read_range(key, offset, len)
    }
    fn size(&self, key: &BlobKey) -> branch::Result<u64> {
        self.inner.size(key)
    }
    fn list(&self, prefix: &str) -> branch::Result<Vec<BlobKey>> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &BlobKey) -> branch::Result<()> {
        self.inner.delete(key)
    }
}

fn settings() -> StoreSettings {
    StoreSettings {
        container_size: 64 << 10,
        region_size: 16 << 10,
        ..Default::default()
    }
}

fn local(dir: &Path) -> LocalDir {
    LocalDir::open("local", dir.join("branch")).unwrap().0
}

fn random(len: usize) -> Bytes {
    (0..len)
        .map(|_| rand::random::<u8>())
        .collect::<Vec<_>>()
        .into()
}

#[test]
fn a_dead_io_thread_is_an_error_for_every_caller() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let branch = Arc::new(Panicky {
        inner: local(dir.path()),
        armed: AtomicBool::new(false),
    });
    let store = Store::open(branch.clone(), dir.path(), key.clone(), settings()).unwrap();

    let durable = random(40_000);
    let mut w = store.stream();
    let durable_ids = w.write_batch(std::slice::from_ref(&durable)).unwrap();
    w.flush().unwrap();
    drop(w);

    branch.armed.store(true, Ordering::SeqCst);
    let mut w = store.stream();
    w.write_batch(&[random(40_000)]).unwrap();
    assert!(matches!(w.flush(), Err(CasError::IoThreadDead)));
    // A second writer after the death: its seal cannot hand the container
    // over, or its flush learns the thread is gone.
    let mut w2 = store.stream();
    let outcome = w2
        .write_batch(&[random(40_000), random(40_000)])
        .and_then(|_| w2.flush());
    assert!(matches!(outcome, Err(CasError::IoThreadDead)));
    // What was durable before still reads.
    assert_eq!(store.read_chunk(&durable_ids[0]).unwrap(), durable);
    drop((w, w2, store));

    let store = Store::open(Arc::new(local(dir.path())), dir.path(), key, settings()).unwrap();
    assert_eq!(store.read_chunk(&durable_ids[0]).unwrap(), durable);
    assert!(store.check(&|_| {}).unwrap().is_clean());
}

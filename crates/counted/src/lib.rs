//! A redb storage backend that counts the reads it passes on
//! ([`Counted`]), so a benchmark can report storage reads per operation.
//!
//! **Owns:** the counting wrapper shared by every redb file cairn keeps
//! (the metadata engine's `meta.redb`, the chunk index's `index.redb`).
//!
//! **Never:** changes, reorders, caches or times what it passes on; knows
//! what the database holds.
//!
//! **Invariants:** the count is exact: one atomic add for each read asked of
//! the wrapped backend, none for any other call.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redb::{BackendError, StorageBackend};

/// Any redb backend, with its reads counted into a shared counter.
#[derive(Debug)]
pub struct Counted<B> {
    inner: B,
    reads: Arc<AtomicU64>,
}

impl<B> Counted<B> {
    pub fn new(inner: B, reads: Arc<AtomicU64>) -> Self {
        Counted { inner, reads }
    }
}

// Every method is passed on, so the wrapped backend's file locks (which
// refuse a second process) stay in force.
#[deny(clippy::missing_trait_methods)]
impl<B: StorageBackend> StorageBackend for Counted<B> {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

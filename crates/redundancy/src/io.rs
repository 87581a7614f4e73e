//! What every read and write of a branch did, for whoever watches the
//! layer (`/metrics`). Each member's branch, and the plain layout's one
//! branch, is wrapped in [`Measured`] when the layer takes it: every shard
//! read, write, scrub, rebuild and discovery passes through it, so nothing
//! reaches a branch unseen. Calls are timed on the layer's clock (a test's
//! [`branch::VirtualClock`] makes the figures exact) and handed to the
//! [`IoWatcher`] given to [`crate::Redundant::watch_io`]; with none, a call
//! costs one lock read more than before.

use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;

use branch::{BlobKey, Branch, Clock, Result, Space};

use crate::members::FaultKind;

/// The kind of a branch call a watcher hears of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// `get` or `read_range` of a blob.
    Read,
    /// `put` or `put_many` (one call, however many blobs).
    Write,
}

impl IoOp {
    pub fn as_str(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
        }
    }
}

/// One read or write call to a branch, as it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchIo<'a> {
    /// The branch's name.
    pub branch: &'a str,
    pub op: IoOp,
    /// From the call to its return, on the layer's clock.
    pub took: Duration,
    /// Bytes read, or given to be written, by the call's blobs that
    /// succeeded.
    pub bytes: u64,
    /// How each blob of the call that failed failed (the branch's word:
    /// missing, unavailable or full; a blob that reads but fails
    /// verification is the layer's finding, [`crate::BranchStatus`]).
    pub faults: Vec<FaultKind>,
}

/// Hears of every branch read and write of a layer.
pub trait IoWatcher: Send + Sync {
    fn io(&self, io: &BranchIo<'_>);
}

/// The clock and watcher shared by a layer and its [`Measured`] branches.
pub(crate) struct Watch {
    clock: RwLock<Arc<dyn Clock>>,
    watcher: RwLock<Option<Arc<dyn IoWatcher>>>,
}

impl Watch {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Arc<Watch> {
        Arc::new(Watch {
            clock: RwLock::new(clock),
            watcher: RwLock::new(None),
        })
    }

    pub(crate) fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.write() = clock;
    }

    pub(crate) fn set_watcher(&self, watcher: Arc<dyn IoWatcher>) {
        *self.watcher.write() = Some(watcher);
    }
}

/// A branch whose reads and writes are reported to the layer's watcher.
pub(crate) struct Measured {
    inner: Arc<dyn Branch>,
    watch: Arc<Watch>,
}

impl Measured {
    pub(crate) fn wrap(inner: Arc<dyn Branch>, watch: &Arc<Watch>) -> Arc<dyn Branch> {
        Arc::new(Measured {
            inner,
            watch: watch.clone(),
        })
    }

    /// Runs `call`, then tells the watcher, if any, what it did: `bytes`
    /// and `faults` judge its results.
    fn timed<T>(
        &self,
        op: IoOp,
        call: impl FnOnce() -> T,
        judge: impl FnOnce(&T) -> (u64, Vec<FaultKind>),
    ) -> T {
        let Some(watcher) = self.watch.watcher.read().clone() else {
            return call();
        };
        let clock = self.watch.clock.read().clone();
        let start = clock.now();
        let out = call();
        let took = clock.now().saturating_sub(start);
        let (bytes, faults) = judge(&out);
        watcher.io(&BranchIo {
            branch: self.inner.name(),
            op,
            took,
            bytes,
            faults,
        });
        out
    }
}

/// Bytes read and the fault, of one read's result.
fn read_figures(r: &Result<Vec<u8>>) -> (u64, Vec<FaultKind>) {
    match r {
        Ok(b) => (b.len() as u64, Vec::new()),
        Err(e) => (0, vec![FaultKind::of(e)]),
    }
}

impl Branch for Measured {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        self.timed(
            IoOp::Write,
            || self.inner.put(key, data),
            |r| match r {
                Ok(()) => (data.len() as u64, Vec::new()),
                Err(e) => (0, vec![FaultKind::of(e)]),
            },
        )
    }

    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        self.timed(
            IoOp::Write,
            || self.inner.put_many(blobs),
            |results| {
                let mut bytes = 0;
                let mut faults = Vec::new();
                for ((_, data), r) in blobs.iter().zip(results) {
                    match r {
                        Ok(()) => bytes += data.len() as u64,
                        Err(e) => faults.push(FaultKind::of(e)),
                    }
                }
                (bytes, faults)
            },
        )
    }

    fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        self.timed(IoOp::Read, || self.inner.get(key), read_figures)
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.timed(
            IoOp::Read,
            || self.inner.read_range(key, offset, len),
            read_figures,
        )
    }

    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        self.inner.prefetch(key, offset, len);
    }

    fn size(&self, key: &BlobKey) -> Result<u64> {
        self.inner.size(key)
    }

    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        self.inner.list(prefix)
    }

    fn delete(&self, key: &BlobKey) -> Result<()> {
        self.inner.delete(key)
    }

    fn space(&self) -> Result<Option<Space>> {
        self.inner.space()
    }
}

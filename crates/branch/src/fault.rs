use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{BlobKey, Branch, BranchError, Clock, Result, SystemClock};

/// What a [`FaultyBranch`] does to the operations in its scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Passes everything through.
    Healthy,
    /// Every operation fails with an injected I/O error.
    FailAll,
    /// Reads (`get`, `read_range`) fail; everything else works.
    FailReads,
    /// Sleeps this long before each operation, then passes it through.
    Slow(Duration),
    /// Sleeps this long before each read (`get`, `read_range`) only:
    /// listings, sizes and writes pass at once.
    SlowReads(Duration),
    /// Reads return the right number of bytes, every one of them inverted.
    Garbage,
    /// The storage is gone: blobs are not found, listings are empty, and
    /// puts fail.
    Vanished,
}

/// The shared switch and counters of a [`FaultyBranch`]: clone it, hand the
/// branch away, and flip faults or read the counters from the test.
#[derive(Clone)]
pub struct FaultControl(Arc<Control>);

struct Control {
    /// The fault and, if it is limited to some keys, their prefix.
    mode: Mutex<(Fault, Option<String>)>,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl FaultControl {
    /// Applies `fault` to every key.
    pub fn set(&self, fault: Fault) {
        *self.0.mode.lock() = (fault, None);
    }

    /// Applies `fault` only to keys starting with `prefix`; the others are
    /// healthy.
    pub fn set_for_prefix(&self, fault: Fault, prefix: impl Into<String>) {
        *self.0.mode.lock() = (fault, Some(prefix.into()));
    }

    pub fn heal(&self) {
        self.set(Fault::Healthy);
    }

    /// Reads (`get` and `read_range` calls) that reached the branch, faulted
    /// or not.
    pub fn reads(&self) -> u64 {
        self.0.reads.load(Ordering::Relaxed)
    }

    /// Blobs that `put` or `put_many` were asked to store, faulted or not.
    pub fn writes(&self) -> u64 {
        self.0.writes.load(Ordering::Relaxed)
    }

    pub fn reset_counters(&self) {
        self.0.reads.store(0, Ordering::Relaxed);
        self.0.writes.store(0, Ordering::Relaxed);
    }

    /// The fault that applies to `key`.
    fn fault_for(&self, key: &str) -> Fault {
        let mode = self.0.mode.lock();
        match &mode.1 {
            Some(prefix) if !key.starts_with(prefix.as_str()) => Fault::Healthy,
            _ => mode.0.clone(),
        }
    }

    /// The fault that applies to a listing of `prefix`: the scope's, when
    /// the two prefixes can share a key.
    fn fault_for_listing(&self, prefix: &str) -> (Fault, Option<String>) {
        let mode = self.0.mode.lock();
        match &mode.1 {
            Some(scope) if !(scope.starts_with(prefix) || prefix.starts_with(scope.as_str())) => {
                (Fault::Healthy, None)
            }
            _ => mode.clone(),
        }
    }
}

/// Wraps a branch and injects the faults its [`FaultControl`] selects, at
/// run time, so tests can break one branch while others keep using it.
pub struct FaultyBranch {
    inner: Arc<dyn Branch>,
    control: FaultControl,
    /// What [`Fault::Slow`] waits on.
    clock: Arc<dyn Clock>,
}

impl FaultyBranch {
    /// A healthy wrapper around `inner`.
    pub fn new(inner: Arc<dyn Branch>) -> Self {
        Self::with_clock(inner, Arc::new(SystemClock::default()))
    }

    /// [`FaultyBranch::new`], whose [`Fault::Slow`] waits on `clock` (a
    /// [`crate::VirtualClock`] makes a slow branch cost no real time).
    pub fn with_clock(inner: Arc<dyn Branch>, clock: Arc<dyn Clock>) -> Self {
        FaultyBranch {
            clock,
            inner,
            control: FaultControl(Arc::new(Control {
                mode: Mutex::new((Fault::Healthy, None)),
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            })),
        }
    }

    pub fn control(&self) -> FaultControl {
        self.control.clone()
    }

    fn injected(&self, op: &'static str, key: &str, kind: io::ErrorKind) -> BranchError {
        BranchError::Io {
            op,
            path: format!("{}:{key}", self.inner.name()).into(),
            source: io::Error::new(kind, "injected fault"),
        }
    }

    fn not_found(&self, key: &BlobKey) -> BranchError {
        BranchError::NotFound {
            branch: self.inner.name().to_string(),
            key: key.clone(),
        }
    }

    /// Waits on the clock for `Slow`, fails for `FailAll`, and otherwise hands the fault
    /// back for the operation to apply.
    fn enter(&self, op: &'static str, key: &str, fault: Fault) -> Result<Fault> {
        match fault {
            Fault::Slow(delay) => {
                self.clock.sleep(delay);
                Ok(Fault::Healthy)
            }
            Fault::FailAll => Err(self.injected(op, key, io::ErrorKind::Other)),
            other => Ok(other),
        }
    }

    fn read(
        &self,
        op: &'static str,
        key: &BlobKey,
        read: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        self.control.0.reads.fetch_add(1, Ordering::Relaxed);
        match self.enter(op, key.as_str(), self.control.fault_for(key.as_str()))? {
            Fault::FailReads => Err(self.injected(op, key.as_str(), io::ErrorKind::Other)),
            Fault::SlowReads(delay) => {
                self.clock.sleep(delay);
                read()
            }
            Fault::Vanished => Err(self.not_found(key)),
            Fault::Garbage => read().map(|mut data| {
                data.iter_mut().for_each(|b| *b = !*b);
                data
            }),
            _ => read(),
        }
    }

    fn write(&self, key: &BlobKey) -> Result<()> {
        self.control.0.writes.fetch_add(1, Ordering::Relaxed);
        match self.enter("put", key.as_str(), self.control.fault_for(key.as_str()))? {
            Fault::Vanished => Err(self.injected("put", key.as_str(), io::ErrorKind::NotFound)),
            _ => Ok(()),
        }
    }
}

impl Branch for FaultyBranch {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        self.write(key)?;
        self.inner.put(key, data)
    }

    /// Faulted blobs fail on their own; the rest go to the inner branch as
    /// one batch.
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        let mut results: Vec<Result<()>> = blobs.iter().map(|(key, _)| self.write(key)).collect();
        let passed: Vec<(BlobKey, &[u8])> = blobs
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .map(|((key, data), _)| (key.clone(), *data))
            .collect();
        let mut stored = self.inner.put_many(&passed).into_iter();
        for r in results.iter_mut().filter(|r| r.is_ok()) {
            *r = stored.next().expect("one result per blob");
        }
        results
    }

    fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        self.read("read", key, || self.inner.get(key))
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.read("read", key, || self.inner.read_range(key, offset, len))
    }

    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        if self.control.fault_for(key.as_str()) == Fault::Healthy {
            self.inner.prefetch(key, offset, len);
        }
    }

    fn size(&self, key: &BlobKey) -> Result<u64> {
        match self.enter("stat", key.as_str(), self.control.fault_for(key.as_str()))? {
            Fault::Vanished => Err(self.not_found(key)),
            _ => self.inner.size(key),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        let (fault, scope) = self.control.fault_for_listing(prefix);
        let fault = self.enter("list", prefix, fault)?;
        let mut keys = self.inner.list(prefix)?;
        if fault == Fault::Vanished {
            keys.retain(|k| match &scope {
                Some(scope) => !k.as_str().starts_with(scope.as_str()),
                None => false,
            });
        }
        Ok(keys)
    }

    fn space(&self) -> Result<Option<crate::Space>> {
        self.inner.space()
    }

    fn delete(&self, key: &BlobKey) -> Result<()> {
        match self.enter("delete", key.as_str(), self.control.fault_for(key.as_str()))? {
            // Nothing is there to remove, which is not an error.
            Fault::Vanished => Ok(()),
            _ => self.inner.delete(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalDir;

    fn key(s: &str) -> BlobKey {
        BlobKey::new(s).unwrap()
    }

    fn faulty() -> (tempfile::TempDir, FaultyBranch, FaultControl) {
        let dir = tempfile::tempdir().unwrap();
        let (local, _) = LocalDir::open("local", dir.path()).unwrap();
        let b = FaultyBranch::new(Arc::new(local));
        let c = b.control();
        (dir, b, c)
    }

    #[test]
    fn fail_all_is_an_injected_io_error() {
        let (_dir, b, c) = faulty();
        b.put(&key("a"), b"x").unwrap();
        c.set(Fault::FailAll);
        for err in [
            b.get(&key("a")).unwrap_err(),
            b.put(&key("b"), b"y").unwrap_err(),
            b.size(&key("a")).unwrap_err(),
            b.list("").unwrap_err(),
            b.delete(&key("a")).unwrap_err(),
        ] {
            match &err {
                BranchError::Io { source, .. } => assert_eq!(source.kind(), io::ErrorKind::Other),
                other => panic!("{other}"),
            }
            assert!(err.to_string().contains("injected fault"), "{err}");
        }
        c.heal();
        assert_eq!(b.get(&key("a")).unwrap(), b"x");
        assert!(matches!(
            b.get(&key("b")),
            Err(BranchError::NotFound { .. })
        ));
    }

    #[test]
    fn fail_reads_lets_puts_through() {
        let (_dir, b, c) = faulty();
        c.set(Fault::FailReads);
        b.put(&key("a"), b"x").unwrap();
        assert!(b.get(&key("a")).is_err());
        assert!(b.read_range(&key("a"), 0, 1).is_err());
        assert_eq!(b.size(&key("a")).unwrap(), 1);
        assert_eq!(b.list("").unwrap(), vec![key("a")]);
    }

    #[test]
    fn garbage_keeps_the_length_and_changes_every_byte() {
        let (_dir, b, c) = faulty();
        b.put(&key("a"), b"hello").unwrap();
        c.set(Fault::Garbage);
        let got = b.get(&key("a")).unwrap();
        assert_eq!(got.len(), 5);
        assert!(got.iter().zip(b"hello").all(|(g, h)| g != h));
        let got = b.read_range(&key("a"), 1, 3).unwrap();
        assert_eq!(got.len(), 3);
        assert_ne!(got, b"ell");
    }

    #[test]
    fn vanished_storage_holds_nothing() {
        let (_dir, b, c) = faulty();
        b.put(&key("a"), b"x").unwrap();
        c.set(Fault::Vanished);
        assert!(matches!(
            b.get(&key("a")),
            Err(BranchError::NotFound { .. })
        ));
        assert!(matches!(
            b.size(&key("a")),
            Err(BranchError::NotFound { .. })
        ));
        assert!(b.list("").unwrap().is_empty());
        assert!(b.put(&key("b"), b"y").is_err());
        b.delete(&key("a")).unwrap();
        c.heal();
        assert_eq!(b.get(&key("a")).unwrap(), b"x", "vanishing deletes nothing");
    }

    #[test]
    fn slow_delays_each_operation() {
        let (_dir, b, c) = faulty();
        b.put(&key("a"), b"x").unwrap();
        c.set(Fault::Slow(Duration::from_millis(50)));
        let start = std::time::Instant::now();
        assert_eq!(b.get(&key("a")).unwrap(), b"x");
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn a_prefix_limits_the_fault() {
        let (_dir, b, c) = faulty();
        b.put(&key("bad/1"), b"x").unwrap();
        b.put(&key("good/1"), b"y").unwrap();
        c.set_for_prefix(Fault::Vanished, "bad/");
        assert!(b.get(&key("bad/1")).is_err());
        assert_eq!(b.get(&key("good/1")).unwrap(), b"y");
        assert_eq!(b.list("").unwrap(), vec![key("good/1")]);
        assert_eq!(b.list("good/").unwrap(), vec![key("good/1")]);
        c.set_for_prefix(Fault::FailAll, "bad/");
        let results = b.put_many(&[(key("bad/2"), b"1"), (key("good/2"), b"2")]);
        assert!(results[0].is_err());
        assert!(results[1].is_ok());
        assert_eq!(b.get(&key("good/2")).unwrap(), b"2");
    }

    #[test]
    fn counters_see_where_load_went() {
        let (_dir, b, c) = faulty();
        b.put_many(&[(key("a"), b"1"), (key("b"), b"2")]);
        b.get(&key("a")).unwrap();
        c.set(Fault::FailReads);
        let _ = b.read_range(&key("b"), 0, 1);
        assert_eq!((c.reads(), c.writes()), (2, 2));
        c.reset_counters();
        assert_eq!((c.reads(), c.writes()), (0, 0));
    }
}

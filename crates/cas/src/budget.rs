//! The in-flight memory budget shared by every writer of a store.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// A byte semaphore. Writers take permits for the buffers they fill and hold
/// them until the data is durable, so a writer that outruns the disk blocks
/// instead of growing memory. A request larger than the whole budget is let
/// through when nothing else is in flight, so it cannot wait forever.
#[derive(Clone)]
pub struct Budget {
    inner: Arc<(Mutex<usize>, Condvar)>,
    limit: usize,
}

/// Bytes held against a [`Budget`]; returned on drop.
pub struct Permit {
    budget: Budget,
    bytes: usize,
}

impl Budget {
    pub fn new(limit: usize) -> Self {
        Budget {
            inner: Arc::new((Mutex::new(0), Condvar::new())),
            limit,
        }
    }

    pub fn in_use(&self) -> usize {
        *self.inner.0.lock()
    }

    /// Blocks until `bytes` fit in the budget.
    pub fn acquire(&self, bytes: usize) -> Permit {
        let (lock, cv) = &*self.inner;
        let mut used = lock.lock();
        while *used > 0 && *used + bytes > self.limit {
            cv.wait(&mut used);
        }
        *used += bytes;
        Permit {
            budget: self.clone(),
            bytes,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let (lock, cv) = &*self.budget.inner;
        *lock.lock() -= self.bytes;
        cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn blocks_until_released() {
        let b = Budget::new(100);
        let p1 = b.acquire(60);
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            let _p = b2.acquire(60);
            b2.in_use()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(b.in_use(), 60, "second acquire must wait");
        drop(p1);
        assert_eq!(t.join().unwrap(), 60);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn oversize_request_passes_when_idle() {
        let b = Budget::new(10);
        let p = b.acquire(1000);
        assert_eq!(b.in_use(), 1000);
        drop(p);
    }
}

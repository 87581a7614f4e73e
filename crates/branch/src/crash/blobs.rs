//! [`CrashBranch`]: a branch wrapper that loses what was not yet durable
//! when the power goes off.

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

use super::{fates, Kept, Power, Step};
use crate::{BlobKey, Branch, BranchError, Result};

/// Wraps a branch (the "disk", which holds every blob as it is now) and
/// remembers the changes a power cut could still undo: the blobs of a put
/// cut short, and deletes not yet followed by a completed put. After the
/// cut, [`CrashBranch::recover`] applies to the inner branch what the disk
/// kept of them; open a new wrapper (over a reopened inner branch) to go on.
///
/// A put cut short survives whole or not at all, as every [`Branch`]
/// promises; [`CrashBranch::tearing`] lets a prefix of it survive instead,
/// to test what readers make of a branch that breaks that promise.
pub struct CrashBranch {
    inner: Arc<dyn Branch>,
    power: Power,
    tear: bool,
    unsynced: Mutex<Vec<Unsynced>>,
}

enum Unsynced {
    Put {
        key: BlobKey,
        data: Vec<u8>,
    },
    Delete {
        key: BlobKey,
        /// The blob as it was, to put back if the delete is lost.
        before: Vec<u8>,
        /// Whether the inner branch has deleted it (not when cut short).
        done: bool,
    },
}

/// A change that was not durable when the power went off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put { key: BlobKey, len: usize },
    Delete { key: BlobKey },
}

/// What the disk kept of one change: for a delete, `Whole` means the blob
/// is gone and `Nothing` that it is back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub change: Change,
    pub kept: Kept,
}

impl CrashBranch {
    pub fn new(inner: Arc<dyn Branch>, power: &Power) -> CrashBranch {
        CrashBranch {
            inner,
            power: power.clone(),
            tear: false,
            unsynced: Mutex::new(Vec::new()),
        }
    }

    /// Lets a put cut short leave a prefix of its blob (possibly empty).
    pub fn tearing(mut self) -> CrashBranch {
        self.tear = true;
        self
    }

    fn unsynced(&self) -> MutexGuard<'_, Vec<Unsynced>> {
        self.unsynced.lock()
    }

    fn off(&self, op: &'static str, key: &str) -> BranchError {
        BranchError::Io {
            op,
            path: format!("{}:{key}", self.inner.name()).into(),
            source: super::power_off(),
        }
    }

    /// After the power cut: decides what the disk kept of every change that
    /// was not durable, makes the inner branch hold exactly that, and says
    /// what happened to each. Panics while the power is on.
    pub fn recover(&self) -> Result<Vec<Outcome>> {
        let (loss, mut rng) = self.power.dice(self.inner.name());
        let unsynced = std::mem::take(&mut *self.unsynced());
        let lens: Vec<usize> = unsynced
            .iter()
            .map(|u| match u {
                Unsynced::Put { data, .. } => data.len(),
                Unsynced::Delete { .. } => 0,
            })
            .collect();
        let kept = fates(loss, &mut rng, &lens, self.tear);
        let mut outcomes = Vec::new();
        for (u, kept) in unsynced.into_iter().zip(kept) {
            let change = match u {
                Unsynced::Put { key, data } => {
                    let landed = match kept {
                        Kept::Whole => Some(&data[..]),
                        Kept::Prefix(n) => Some(&data[..n]),
                        Kept::Nothing => None,
                    };
                    if let Some(bytes) = landed {
                        match self.inner.put(&key, bytes) {
                            Ok(()) | Err(BranchError::Exists { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Change::Put {
                        key,
                        len: data.len(),
                    }
                }
                Unsynced::Delete { key, before, done } => {
                    match (kept == Kept::Whole, done) {
                        (true, false) => self.inner.delete(&key)?,
                        (false, true) => match self.inner.put(&key, &before) {
                            Ok(()) | Err(BranchError::Exists { .. }) => {}
                            Err(e) => return Err(e),
                        },
                        _ => {}
                    }
                    Change::Delete { key }
                }
            };
            outcomes.push(Outcome { change, kept });
        }
        Ok(outcomes)
    }
}

impl Branch for CrashBranch {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        self.put_many(&[(key.clone(), data)])
            .pop()
            .expect("one result per blob")
    }

    /// Each blob is one operation of the power switch. None is durable
    /// before the batch returns: a cut during the batch leaves every blob
    /// of it so far unsynced.
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        let all_off = |op| {
            blobs
                .iter()
                .map(|(key, _)| Err(self.off(op, key.as_str())))
                .collect()
        };
        let Ok(mut held) = self.power.hold() else {
            return all_off("put");
        };
        for (i, _) in blobs.iter().enumerate() {
            if held.step() == Step::CutShort {
                self.unsynced()
                    .extend(blobs[..=i].iter().map(|(key, data)| Unsynced::Put {
                        key: key.clone(),
                        data: data.to_vec(),
                    }));
                return all_off("put");
            }
        }
        let results = self.inner.put_many(blobs);
        if results.iter().any(Result::is_ok) {
            // The batch's syncs made earlier deletes durable too.
            self.unsynced()
                .retain(|u| !matches!(u, Unsynced::Delete { .. }));
        }
        drop(held);
        results
    }

    fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        self.power
            .check()
            .map_err(|_| self.off("read", key.as_str()))?;
        self.inner.get(key)
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.power
            .check()
            .map_err(|_| self.off("read", key.as_str()))?;
        self.inner.read_range(key, offset, len)
    }

    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        if !self.power.is_off() {
            self.inner.prefetch(key, offset, len);
        }
    }

    fn size(&self, key: &BlobKey) -> Result<u64> {
        self.power
            .check()
            .map_err(|_| self.off("stat", key.as_str()))?;
        self.inner.size(key)
    }

    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        self.power.check().map_err(|_| self.off("list", prefix))?;
        self.inner.list(prefix)
    }

    fn delete(&self, key: &BlobKey) -> Result<()> {
        let mut held = self
            .power
            .hold()
            .map_err(|_| self.off("delete", key.as_str()))?;
        let before = match self.inner.get(key) {
            Ok(bytes) => Some(bytes),
            Err(BranchError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let cut = held.step() == Step::CutShort;
        if !cut {
            self.inner.delete(key)?;
        }
        if let Some(before) = before {
            self.unsynced().push(Unsynced::Delete {
                key: key.clone(),
                before,
                done: !cut,
            });
        }
        if cut {
            return Err(self.off("delete", key.as_str()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::Loss;
    use crate::LocalDir;

    fn key(s: &str) -> BlobKey {
        BlobKey::new(s).unwrap()
    }

    fn rig() -> (tempfile::TempDir, Arc<dyn Branch>, Power) {
        let dir = tempfile::tempdir().unwrap();
        let (local, _) = LocalDir::open("local", dir.path()).unwrap();
        (dir, Arc::new(local), Power::on())
    }

    #[test]
    fn completed_puts_survive_and_a_cut_put_is_whole_or_absent() {
        for seed in 0..16 {
            let (_dir, disk, power) = rig();
            let b = CrashBranch::new(disk.clone(), &power);
            b.put(&key("a"), b"kept").unwrap();
            power.crash_after(1, Loss::Tail, seed);
            assert!(b.put(&key("b"), b"in flight").is_err());
            assert!(
                b.get(&key("a")).is_err(),
                "reads fail once the power is off"
            );
            let outcomes = b.recover().unwrap();
            assert_eq!(outcomes.len(), 1);
            assert_eq!(disk.get(&key("a")).unwrap(), b"kept");
            match outcomes[0].kept {
                Kept::Whole => assert_eq!(disk.get(&key("b")).unwrap(), b"in flight"),
                Kept::Nothing => assert!(disk.get(&key("b")).is_err()),
                Kept::Prefix(_) => panic!("a put is torn only when tearing"),
            }
        }
    }

    #[test]
    fn a_tearing_branch_can_leave_a_prefix() {
        let torn = (0..32).any(|seed| {
            let (_dir, disk, power) = rig();
            let b = CrashBranch::new(disk.clone(), &power).tearing();
            power.crash_after(1, Loss::Tail, seed);
            assert!(b.put(&key("b"), b"0123456789").is_err());
            match b.recover().unwrap()[0].kept {
                Kept::Prefix(n) => {
                    assert_eq!(disk.get(&key("b")).unwrap(), &b"0123456789"[..n]);
                    true
                }
                _ => false,
            }
        });
        assert!(torn, "no seed tore the put");
    }

    #[test]
    fn an_unsynced_delete_may_come_back_until_a_put_completes() {
        let back = |seed, put_after: bool| {
            let (_dir, disk, power) = rig();
            let b = CrashBranch::new(disk.clone(), &power);
            b.put(&key("old"), b"x").unwrap();
            b.delete(&key("old")).unwrap();
            assert!(disk.get(&key("old")).is_err());
            if put_after {
                b.put(&key("new"), b"y").unwrap();
            }
            power.cut(Loss::Scatter, seed);
            b.recover().unwrap();
            disk.get(&key("old")).is_ok()
        };
        assert!(
            (0..16).any(|s| back(s, false)),
            "an unsynced delete never came back"
        );
        assert!((0..16).all(|s| !back(s, true)), "a synced delete came back");
    }

    #[test]
    fn a_cut_in_a_batch_leaves_its_blobs_unsynced() {
        let (_dir, disk, power) = rig();
        let b = CrashBranch::new(disk.clone(), &power);
        power.crash_after(2, Loss::Scatter, 5);
        let results = b.put_many(&[
            (key("1"), b"one".as_slice()),
            (key("2"), b"two".as_slice()),
            (key("3"), b"three".as_slice()),
        ]);
        assert!(results.iter().all(Result::is_err));
        let outcomes = b.recover().unwrap();
        let keys: Vec<_> = outcomes
            .iter()
            .map(|o| match &o.change {
                Change::Put { key, .. } => key.as_str().to_string(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(keys, ["1", "2"]);
        assert!(disk.get(&key("3")).is_err(), "blob 3 was never written");
    }
}

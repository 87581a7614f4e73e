//! The branches a [`crate::Redundant`] stores over, and what it has learnt
//! about each: read latency and health.

use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use branch::{Branch, BranchError};

use crate::latency::Estimator;

/// A branch's position in the list given to [`crate::Redundant::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BranchId(pub u16);

impl fmt::Display for BranchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What went wrong with one shard on one branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The branch does not have the blob.
    Missing,
    /// The branch failed to read or write it.
    Unavailable,
    /// The blob is there but fails verification (or is truncated).
    Corrupt,
    /// The branch has no room for the blob (writing may work once space is
    /// freed).
    Full,
}

impl FaultKind {
    pub(crate) fn of(err: &BranchError) -> FaultKind {
        match err {
            BranchError::NotFound { .. } => FaultKind::Missing,
            BranchError::Truncated { .. } => FaultKind::Corrupt,
            e if e.is_no_space() => FaultKind::Full,
            _ => FaultKind::Unavailable,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::Missing => "missing",
            FaultKind::Unavailable => "unavailable",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Full => "full",
        })
    }
}

/// A branch's record for `cairn status`.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchStatus {
    pub id: BranchId,
    pub name: String,
    /// A shard read from this branch failed since the last
    /// [`crate::Redundant::reset_health`].
    pub degraded: bool,
    /// Verified shard reads served.
    pub reads: u64,
    pub missing: u64,
    pub unavailable: u64,
    pub corrupt: u64,
    pub last_error: Option<String>,
    /// The read latency score balancing uses; `None` before the first read.
    pub read_latency: Option<Duration>,
    /// Taking no new shards (see [`crate::Redundant::retire`]); what it
    /// holds stays readable until it is moved off.
    pub retired: bool,
    /// The same counts since the layer took the branch, never reset
    /// (`/metrics` counters, which must not fall).
    pub totals: BranchTotals,
}

/// A branch's shard reads served and failed, by kind of fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BranchTotals {
    pub reads: u64,
    pub missing: u64,
    pub unavailable: u64,
    pub corrupt: u64,
}

#[derive(Default)]
struct Stats {
    latency: Estimator,
    reads: u64,
    missing: u64,
    unavailable: u64,
    corrupt: u64,
    last_error: Option<String>,
    totals: BranchTotals,
}

pub(crate) struct Member {
    pub name: String,
    pub branch: Arc<dyn Branch>,
    stats: Mutex<Stats>,
    /// `Some` once retired: no new shards go here, but to the successor
    /// it names (or to any branch, for `Some(None)`).
    retired: Mutex<Option<Option<BranchId>>>,
}

impl Member {
    pub fn new(branch: Arc<dyn Branch>) -> Member {
        Member {
            name: branch.name().to_string(),
            branch,
            stats: Mutex::new(Stats::default()),
            retired: Mutex::new(None),
        }
    }

    pub fn retired(&self) -> bool {
        self.retired.lock().is_some()
    }

    pub fn successor(&self) -> Option<BranchId> {
        self.retired.lock().flatten()
    }

    pub fn retire(&self, successor: Option<BranchId>) {
        *self.retired.lock() = Some(successor);
    }

    pub fn reinstate(&self) {
        *self.retired.lock() = None;
    }

    pub fn read_ok(&self, took: Duration) {
        let mut s = self.stats.lock();
        s.latency.observe(took);
        s.reads += 1;
        s.totals.reads += 1;
    }

    pub fn fault(&self, kind: FaultKind, detail: &str) {
        let mut s = self.stats.lock();
        match kind {
            FaultKind::Missing => {
                s.missing += 1;
                s.totals.missing += 1;
            }
            FaultKind::Unavailable | FaultKind::Full => {
                s.unavailable += 1;
                s.totals.unavailable += 1;
            }
            FaultKind::Corrupt => {
                s.corrupt += 1;
                s.totals.corrupt += 1;
            }
        }
        s.last_error = Some(detail.to_string());
    }

    pub fn degraded(&self) -> bool {
        self.stats.lock().last_error.is_some()
    }

    pub fn score(&self) -> Option<f64> {
        self.stats.lock().latency.score()
    }

    pub fn reset(&self) {
        let mut s = self.stats.lock();
        let latency = std::mem::take(&mut s.latency);
        *s = Stats {
            latency,
            totals: s.totals,
            ..Stats::default()
        };
    }

    pub fn status(&self, id: BranchId) -> BranchStatus {
        let s = self.stats.lock();
        BranchStatus {
            id,
            name: self.name.clone(),
            degraded: s.last_error.is_some(),
            reads: s.reads,
            missing: s.missing,
            unavailable: s.unavailable,
            corrupt: s.corrupt,
            last_error: s.last_error.clone(),
            read_latency: s.latency.score().map(Duration::from_secs_f64),
            retired: self.retired(),
            totals: s.totals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_health_reset_keeps_the_totals() {
        let dir = tempfile::tempdir().unwrap();
        let (local, _) = branch::LocalDir::open("a", dir.path().join("a")).unwrap();
        let m = Member::new(Arc::new(local));
        m.read_ok(Duration::from_millis(1));
        m.read_ok(Duration::from_millis(1));
        m.fault(FaultKind::Corrupt, "bad block");
        m.fault(FaultKind::Full, "no room");
        m.reset();
        let s = m.status(BranchId(0));
        assert!(!s.degraded);
        assert_eq!((s.reads, s.corrupt, s.unavailable), (0, 0, 0));
        let want = BranchTotals {
            reads: 2,
            missing: 0,
            unavailable: 1,
            corrupt: 1,
        };
        assert_eq!(s.totals, want);
        m.read_ok(Duration::from_millis(1));
        assert_eq!(m.status(BranchId(0)).totals.reads, 3);
    }
}

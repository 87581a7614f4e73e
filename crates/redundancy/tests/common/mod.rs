//! A rig of local branches, each behind a fault-injecting wrapper.

#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::sync::Arc;

use branch::{
    BlobKey, Branch, Clock, FaultControl, FaultyBranch, LocalDir, SystemClock, VirtualClock,
};
use redundancy::{BranchId, Discovery, Policy, Redundant};

pub use branch::testing::pattern;

pub struct Rig {
    pub dir: Arc<tempfile::TempDir>,
    pub store: Arc<Redundant>,
    pub controls: Vec<FaultControl>,
    /// What opening the store discovered on the branches.
    pub found: Discovery,
}

pub fn key(s: &str) -> BlobKey {
    BlobKey::new(s).unwrap()
}

pub fn policy(s: &str) -> Policy {
    s.parse().unwrap()
}

/// Branch `i` is named `b<i>` and lives in `<dir>/b<i>`.
pub fn branch_root(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("b{i}"))
}

/// Opens `n` branches under `dir` as a fresh `Redundant` (discovering what
/// they hold), each wrapped so faults can be injected. With `timing`, the
/// branches' slowness and the store's latency measurements are on a
/// [`VirtualClock`] and balancing draws from that seed.
fn open(dir: Arc<tempfile::TempDir>, n: usize, timing: Option<u64>) -> Rig {
    let clock: Arc<dyn Clock> = match timing {
        Some(_) => Arc::new(VirtualClock),
        None => Arc::new(SystemClock::default()),
    };
    let mut branches: Vec<Arc<dyn Branch>> = Vec::new();
    let mut controls = Vec::new();
    for i in 0..n {
        let (local, _) = LocalDir::open(format!("b{i}"), branch_root(dir.path(), i)).unwrap();
        let faulty = FaultyBranch::with_clock(Arc::new(local), clock.clone());
        controls.push(faulty.control());
        branches.push(Arc::new(faulty));
    }
    let (store, found) = Redundant::open(branches).unwrap();
    let store = match timing {
        Some(seed) => store.with_timing(clock, seed),
        None => store,
    };
    Rig {
        dir,
        store: Arc::new(store),
        controls,
        found,
    }
}

/// A fresh directory on tmpfs where there is one: these tests sync a lot
/// and are about redundancy, not disks.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

impl Rig {
    /// `n` branches in a fresh directory, on tmpfs where there is one:
    /// these tests sync a lot and are about redundancy, not disks.
    pub fn new(n: usize) -> Rig {
        open(Arc::new(scratch()), n, None)
    }

    /// [`Rig::new`] on virtual time with seeded balancing: a slow branch
    /// costs no real time and reads go the same way on every machine.
    pub fn timed(n: usize, seed: u64) -> Rig {
        open(Arc::new(scratch()), n, Some(seed))
    }

    /// A new `Redundant` over the same directories, as after a restart.
    pub fn reopen(&self) -> Rig {
        open(self.dir.clone(), self.controls.len(), None)
    }

    pub fn all(&self) -> Vec<BranchId> {
        self.store.branch_ids()
    }

    pub fn heal(&self) {
        self.controls.iter().for_each(|c| c.heal());
    }

    /// The file holding shard `index` of `key` on branch `id`.
    pub fn shard_file(&self, key: &BlobKey, index: u16, id: BranchId) -> PathBuf {
        let name = redundancy::shard_key(key, index);
        branch_root(self.dir.path(), usize::from(id.0)).join(name.as_str())
    }

    /// The branch holding shard `index` of `key`.
    pub fn holder(&self, key: &BlobKey, index: u16) -> BranchId {
        self.store.locate(key).unwrap().shards[usize::from(index)].branches[0]
    }

    /// Flips a byte inside block `block` of shard `index` of `key`, on disk.
    pub fn corrupt_block(&self, key: &BlobKey, index: u16, block: u64) {
        let placed = self.store.locate(key).unwrap();
        let layout =
            redundancy::shard::Layout::new(placed.policy, key.as_str(), placed.container_len);
        let (offset, _) = layout.blob_span(&(block..block + 1));
        let path = self.shard_file(key, index, self.holder(key, index));
        let mut bytes = std::fs::read(&path).unwrap();
        // Past the block's 16-byte digest, into its data.
        bytes[offset as usize + 16 + 100] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
    }

    /// Flips bytes in the middle of a shard file on disk.
    pub fn corrupt_file(&self, key: &BlobKey, index: u16) {
        let path = self.shard_file(key, index, self.holder(key, index));
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x5a;
        // Rewrite in place: the branch's cached handles see the same inode.
        std::fs::write(&path, &bytes).unwrap();
    }
}

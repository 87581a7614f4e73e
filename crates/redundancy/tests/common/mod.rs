//! A rig of local branches, each behind a fault-injecting wrapper.

#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::sync::Arc;

use branch::{BlobKey, Branch, FaultControl, FaultyBranch, LocalDir};
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
/// they hold), each wrapped so faults can be injected.
fn open(dir: Arc<tempfile::TempDir>, n: usize) -> Rig {
    let mut branches: Vec<Arc<dyn Branch>> = Vec::new();
    let mut controls = Vec::new();
    for i in 0..n {
        let (local, _) = LocalDir::open(format!("b{i}"), branch_root(dir.path(), i)).unwrap();
        let faulty = FaultyBranch::new(Arc::new(local));
        controls.push(faulty.control());
        branches.push(Arc::new(faulty));
    }
    let (store, found) = Redundant::open(branches).unwrap();
    Rig {
        dir,
        store: Arc::new(store),
        controls,
        found,
    }
}

impl Rig {
    /// `n` branches in a fresh directory, on tmpfs where there is one:
    /// these tests sync a lot and are about redundancy, not disks.
    pub fn new(n: usize) -> Rig {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        open(Arc::new(dir), n)
    }

    /// A new `Redundant` over the same directories, as after a restart.
    pub fn reopen(&self) -> Rig {
        open(self.dir.clone(), self.controls.len())
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

//! The redundancy layer: one container stored over several branches.
//!
//! **Owns:** turning a container (an immutable blob `cas` wrote) into shard
//! blobs per a [`Policy`] — full copies, a stripe, XOR parity or
//! Reed-Solomon shards — placing them on distinct branches, reading the
//! container back (whole or a range, from the fastest copies, rebuilding
//! lost shards on the fly), and healing: [`Redundant::scrub`] rewrites bad
//! shards, [`Redundant::rebuild_onto`] refills a replacement branch.
//! Where every shard lives is kept in memory and can be rebuilt from the
//! branches alone ([`Redundant::discover`]).
//!
//! **Never:** knows what a chunk, a file or a path is, nor which policy a
//! file should get (callers choose; this crate provides the mechanism).
//! It never replaces a blob in place: a bad shard is deleted, then written
//! anew.
//!
//! **Invariants:**
//! - A container stored under a policy that tolerates f losses reads back
//!   exactly after any f of its branches are lost or return garbage.
//! - A shard is never handed up unverified: every block carries a digest
//!   bound to its container and position, checked on every read.
//! - A read that needs more than the lost shards allow fails with an error
//!   naming the container, its policy, and each lost shard with why.
//! - The shards of one container are on distinct branches.
//!
//! See [`shard`] for the blob format and [`shard_key`] for how shard blobs
//! are named.

mod codec;
mod discover;
mod error;
mod latency;
mod map;
mod members;
mod parallel;
mod placement;
mod policy;
mod read;
mod repair;
pub mod shard;
mod view;
mod write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use branch::{BlobKey, Branch};

pub use discover::Discovery;
pub use error::{Error, Result, ShardFault};
pub use map::{parse_shard_key, shard_key, Placement, ShardPlace};
pub use members::{BranchId, BranchStatus, FaultKind};
pub use policy::{Policy, PolicyError, Strength, MAX_BRANCH_NAME};
pub use repair::{Progress, RebuildReport, Repair, ScrubReport, ScrubSummary};
pub use view::PolicyView;

use map::Map;
use members::Member;

/// Containers stored over a fixed set of branches, each under its own
/// policy. Share it as an `Arc`; every method takes `&self`.
pub struct Redundant {
    members: Vec<Member>,
    map: Map,
    balancing: AtomicBool,
}

impl Redundant {
    /// A layer over `branches`, known by their names (which must differ)
    /// and by [`BranchId`]s in list order. The map starts empty: call
    /// [`Redundant::discover`] to learn what the branches already hold.
    pub fn new(branches: Vec<Arc<dyn Branch>>) -> Result<Redundant> {
        let members: Vec<Member> = branches.into_iter().map(Member::new).collect();
        for (i, m) in members.iter().enumerate() {
            if members[..i].iter().any(|o| o.name == m.name) {
                return Err(Error::DuplicateBranch(m.name.clone()));
            }
        }
        assert!(members.len() <= usize::from(u16::MAX), "too many branches");
        Ok(Redundant {
            members,
            map: Map::default(),
            balancing: AtomicBool::new(true),
        })
    }

    /// [`Redundant::new`], then [`Redundant::discover`].
    pub fn open(branches: Vec<Arc<dyn Branch>>) -> Result<(Redundant, Discovery)> {
        let store = Redundant::new(branches)?;
        let found = store.discover();
        Ok((store, found))
    }

    /// Every branch's id, in order.
    pub fn branch_ids(&self) -> Vec<BranchId> {
        (0..self.members.len() as u16).map(BranchId).collect()
    }

    pub fn branch_id(&self, name: &str) -> Option<BranchId> {
        self.members
            .iter()
            .position(|m| m.name == name)
            .map(|i| BranchId(i as u16))
    }

    pub fn branch_name(&self, id: BranchId) -> Option<&str> {
        self.members.get(usize::from(id.0)).map(|m| m.name.as_str())
    }

    /// Checks that a policy can be stored over `allowed`, as
    /// [`Redundant::put`] would.
    pub fn validate(&self, policy: &Policy, allowed: &[BranchId]) -> Result<()> {
        placement::validate(policy, allowed, |id| self.branch_name(id))
    }

    /// Turns latency-based read balancing on (the default) or off. Off,
    /// a read always tries copies and shards in index order, so the first
    /// copy is the primary.
    pub fn set_balancing(&self, on: bool) {
        self.balancing.store(on, Ordering::Relaxed);
    }

    pub fn balancing(&self) -> bool {
        self.balancing.load(Ordering::Relaxed)
    }

    /// Health and latency of every branch, for `cairn status`.
    pub fn status(&self) -> Vec<BranchStatus> {
        self.members
            .iter()
            .zip(self.branch_ids())
            .map(|(m, id)| m.status(id))
            .collect()
    }

    /// Forgets a branch's faults (after it was repaired or replaced); its
    /// latency estimate is kept.
    pub fn reset_health(&self, id: BranchId) {
        if let Some(m) = self.members.get(usize::from(id.0)) {
            m.reset();
        }
    }

    /// Where the shards of `key` are.
    pub fn locate(&self, key: &BlobKey) -> Result<Placement> {
        let entry = self.entry(key)?;
        Ok(entry.placement(key))
    }

    /// Container keys starting with `prefix`, in order, from memory.
    pub fn list(&self, prefix: &str) -> Vec<BlobKey> {
        self.map.keys(prefix)
    }

    /// The container's length in bytes.
    pub fn size(&self, key: &BlobKey) -> Result<u64> {
        Ok(self.entry(key)?.layout.container_len)
    }

    fn entry(&self, key: &BlobKey) -> Result<Arc<map::Entry>> {
        self.map
            .get(key)
            .ok_or_else(|| Error::NotFound(key.clone()))
    }

    fn member(&self, id: BranchId) -> &Member {
        &self.members[usize::from(id.0)]
    }
}

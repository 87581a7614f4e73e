//! The redundancy layer: one container stored over several branches.
//!
//! **Owns:** turning a container (an immutable blob `cas` wrote) into shard
//! blobs per a [`Policy`] — full copies, a stripe, XOR parity or
//! Reed-Solomon shards — placing them on distinct branches, reading the
//! container back (whole or a range, from the fastest copies, rebuilding
//! lost blocks on the fly), and healing: [`Redundant::scrub`] rewrites bad
//! shards, [`Redundant::rebuild_onto`] refills a replacement branch.
//! Where every shard lives is kept in memory and can be rebuilt from the
//! branches alone ([`Redundant::discover`]), or extended with the blobs
//! another writer sharing the branches put there since
//! ([`Redundant::discover_new`], which never replaces an entry). It is the only way `cas`
//! reaches storage: a repository on one plain branch gets a layer in the
//! *plain layout* ([`Redundant::plain`], the `plain` module), `single` on
//! that branch with each container its raw blob under its own key (no
//! shard header), which is how such repositories have always stored
//! containers, so their bytes do not change.
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
//! - Damage is judged per 64 KiB block row, not per shard: a block is
//!   taken from any copy, or decoded from any K shards, whose block in its
//!   row verifies. Reads, scrub and rebuild judge alike, so scrub calls
//!   lost exactly the bytes a read cannot give back.
//! - A read that needs more than the damage allows fails with an error
//!   naming the container, its policy, the rows short of good blocks, and
//!   each fault met with why.
//! - Scrub and rebuild go on past a lost container and report it; they
//!   never write a shard they could not rebuild whole.
//! - The shards of one container are on distinct branches.
//! - A layer in the plain layout stores only `single` on its one branch,
//!   writes the bytes it is given as they are, and keeps no map: it reads
//!   and lists the branch itself.
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).
//! - Every read and write of a branch passes through its `io::Measured`
//!   wrapper, so the [`IoWatcher`] given to [`Redundant::watch_io`] hears
//!   of each one (time on the layer's clock, bytes, faults).
//!
//! See [`shard`] for the blob format and [`shard_key`] for how shard blobs
//! are named.

mod codec;
mod discover;
mod error;
mod io;
mod latency;
mod map;
mod members;
mod parallel;
mod placement;
mod plain;
mod policy;
mod read;
mod repair;
mod rows;
pub mod shard;
mod space;
mod write;

use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use branch::{BlobKey, Branch};

pub use discover::Discovery;
pub use error::{Error, Result, ShardFault};
pub use io::{BranchIo, IoOp, IoWatcher};
pub use map::{parse_shard_key, shard_key, Placement, ShardPlace};
pub use members::{BranchId, BranchStatus, BranchTotals, FaultKind};
pub use policy::{Count, Policy, PolicyError, PolicyProblem, Strength, MAX_BRANCH_NAME};
pub use repair::{Progress, RebuildReport, Repair, ScrubReport, ScrubSummary};
pub use write::PutRequest;

use io::{Measured, Watch};
use map::Map;
use members::Member;
use plain::{plain_list, plain_locate, plain_size, plain_validate};

/// Containers stored over a set of branches, each under its own policy.
/// Share it as an `Arc`; every method takes `&self`.
///
/// The set can change while in use: [`Redundant::add_branch`] appends a
/// branch, [`Redundant::retire`] stops new shards from going to one (its
/// shards stay readable until moved off). Members are never removed, so a
/// [`BranchId`] means the same branch for the life of the layer.
pub struct Redundant {
    members: RwLock<Vec<Arc<Member>>>,
    /// Held shared by every [`Redundant::put`] for its whole run and
    /// exclusively by [`Redundant::retire`], so once `retire` returns no
    /// shard is being written to the retired branch.
    placing: RwLock<()>,
    map: Map,
    balancing: AtomicBool,
    /// What read latencies are measured on.
    clock: Arc<dyn branch::Clock>,
    /// The same clock, and who hears of every branch call ([`io`]).
    watch: Arc<Watch>,
    /// What balancing draws its choices from.
    rng: parking_lot::Mutex<rand::rngs::StdRng>,
    /// The one branch of a layer in the plain layout ([`Redundant::plain`]),
    /// kept apart so its reads take no lock.
    plain: Option<Arc<dyn Branch>>,
}

impl Redundant {
    /// A layer over `branches`, known by their names (which must differ)
    /// and by [`BranchId`]s in list order. The map starts empty: call
    /// [`Redundant::discover`] to learn what the branches already hold.
    pub fn new(branches: Vec<Arc<dyn Branch>>) -> Result<Redundant> {
        let clock: Arc<dyn branch::Clock> = Arc::new(branch::SystemClock::default());
        let watch = Watch::new(clock.clone());
        let members: Vec<Arc<Member>> = branches
            .into_iter()
            .map(|b| Arc::new(Member::new(Measured::wrap(b, &watch))))
            .collect();
        for (i, m) in members.iter().enumerate() {
            if members[..i].iter().any(|o| o.name == m.name) {
                return Err(Error::DuplicateBranch(m.name.clone()));
            }
        }
        assert!(members.len() <= usize::from(u16::MAX), "too many branches");
        Ok(Redundant {
            members: RwLock::new(members),
            placing: RwLock::new(()),
            map: Map::default(),
            balancing: AtomicBool::new(true),
            clock,
            watch,
            rng: parking_lot::Mutex::new(rand::SeedableRng::from_entropy()),
            plain: None,
        })
    }

    /// This layer, measuring read latencies on `clock` and balancing reads
    /// with choices drawn from `seed`: a test that gives a
    /// [`branch::VirtualClock`] (also to its slow branches) and a seed gets
    /// the same reads on every machine.
    pub fn with_timing(mut self, clock: Arc<dyn branch::Clock>, seed: u64) -> Self {
        self.watch.set_clock(clock.clone());
        self.clock = clock;
        self.rng = parking_lot::Mutex::new(rand::SeedableRng::seed_from_u64(seed));
        self
    }

    /// A layer over one branch in the plain layout: containers stored
    /// `single` as raw blobs under their own keys, as a repository without
    /// `[[branch]]` entries keeps them (see the `plain` module). It takes
    /// no other policy and no other branch; it needs no discovery.
    pub fn plain(branch: Arc<dyn Branch>) -> Redundant {
        let clock: Arc<dyn branch::Clock> = Arc::new(branch::SystemClock::default());
        let watch = Watch::new(clock.clone());
        let branch = Measured::wrap(branch, &watch);
        Redundant {
            members: RwLock::new(vec![Arc::new(Member::new(branch.clone()))]),
            placing: RwLock::new(()),
            map: Map::default(),
            balancing: AtomicBool::new(false),
            clock,
            watch,
            rng: parking_lot::Mutex::new(rand::SeedableRng::from_entropy()),
            plain: Some(branch),
        }
    }

    /// Tells `watcher` of every read and write of a branch from now on
    /// (replacing any watcher before): the figures of `/metrics`.
    pub fn watch_io(&self, watcher: Arc<dyn IoWatcher>) {
        self.watch.set_watcher(watcher);
    }

    /// Whether this layer keeps the plain layout ([`Redundant::plain`]).
    pub fn is_plain(&self) -> bool {
        self.plain.is_some()
    }

    /// [`Redundant::new`], then [`Redundant::discover`].
    pub fn open(branches: Vec<Arc<dyn Branch>>) -> Result<(Redundant, Discovery)> {
        let store = Redundant::new(branches)?;
        let found = store.discover();
        Ok((store, found))
    }

    /// The id of every branch not retired, in order.
    pub fn branch_ids(&self) -> Vec<BranchId> {
        self.ids(|m| !m.retired())
    }

    /// The id of every branch, retired ones included.
    pub(crate) fn all_ids(&self) -> Vec<BranchId> {
        self.ids(|_| true)
    }

    fn ids(&self, keep: impl Fn(&Member) -> bool) -> Vec<BranchId> {
        let members = self.members.read();
        (0..members.len() as u16)
            .map(BranchId)
            .filter(|id| keep(&members[usize::from(id.0)]))
            .collect()
    }

    /// The branch named `name`, retired or not.
    pub fn branch_id(&self, name: &str) -> Option<BranchId> {
        self.members
            .read()
            .iter()
            .position(|m| m.name == name)
            .map(|i| BranchId(i as u16))
    }

    pub fn branch_name(&self, id: BranchId) -> Option<String> {
        self.members
            .read()
            .get(usize::from(id.0))
            .map(|m| m.name.clone())
    }

    /// Whether new shards may go to `id`.
    pub fn is_retired(&self, id: BranchId) -> bool {
        self.member(id).retired()
    }

    /// Adds a branch while the layer is in use. A name that belongs to a
    /// retired branch takes its id back (with `branch` as its store);
    /// otherwise the branch gets the next id. Shards the branch already
    /// holds are not looked for: [`Redundant::rebuild_onto`] finds them in
    /// place, and the next [`Redundant::discover`] maps them.
    pub fn add_branch(&self, branch: Arc<dyn Branch>) -> Result<BranchId> {
        if self.plain.is_some() {
            return Err(Error::Plain("take a second branch"));
        }
        let mut members = self.members.write();
        let name = branch.name().to_string();
        match members.iter().position(|m| m.name == name) {
            Some(i) if members[i].retired() => {
                members[i] = Arc::new(Member::new(Measured::wrap(branch, &self.watch)));
                Ok(BranchId(i as u16))
            }
            Some(_) => Err(Error::DuplicateBranch(name)),
            None => {
                assert!(members.len() < usize::from(u16::MAX), "too many branches");
                members.push(Arc::new(Member::new(Measured::wrap(branch, &self.watch))));
                Ok(BranchId(members.len() as u16 - 1))
            }
        }
    }

    /// Stops new shards from going to `id`: a put that names it stores on
    /// `successor` instead (or on another branch when none is given). Waits
    /// for puts in flight, so when this returns every container stored on
    /// `id` is in the map, ready to be moved off with
    /// [`Redundant::rebuild_onto`].
    pub fn retire(&self, id: BranchId, successor: Option<BranchId>) -> Result<()> {
        if self.plain.is_some() {
            return Err(Error::Plain("retire its one branch"));
        }
        if successor == Some(id) {
            return Err(Error::DuplicateBranch(self.member(id).name.clone()));
        }
        for b in std::iter::once(id).chain(successor) {
            self.branch_name(b).ok_or(Error::UnknownBranch(b))?;
        }
        let _no_puts = self.placing.write();
        self.member(id).retire(successor);
        Ok(())
    }

    /// Undoes [`Redundant::retire`].
    pub fn reinstate(&self, id: BranchId) {
        if let Some(m) = self.members.read().get(usize::from(id.0)) {
            m.reinstate();
        }
    }

    /// Checks that a policy can be stored over `allowed`, as
    /// [`Redundant::put`] would.
    pub fn validate(&self, policy: &Policy, allowed: &[BranchId]) -> Result<()> {
        if self.plain.is_some() {
            return plain_validate(policy, allowed);
        }
        placement::validate(policy, allowed, |id| self.branch_name(id))
    }

    /// `allowed` with each retired branch swapped for its successor (or
    /// dropped), topped up with other branches in id order when that leaves
    /// too few for `policy`: a stream opened before a branch was retired
    /// keeps storing at full strength.
    fn placeable(&self, policy: &Policy, allowed: &[BranchId]) -> Vec<BranchId> {
        let members = self.members.read();
        let member = |id: BranchId| members.get(usize::from(id.0));
        if !allowed
            .iter()
            .any(|id| member(*id).is_some_and(|m| m.retired()))
        {
            return allowed.to_vec();
        }
        let mut out: Vec<BranchId> = Vec::with_capacity(allowed.len());
        for id in allowed {
            let to = match member(*id) {
                Some(m) if m.retired() => m.successor(),
                _ => Some(*id),
            };
            if let Some(to) = to.filter(|to| !out.contains(to)) {
                out.push(to);
            }
        }
        let spare: Vec<BranchId> = (0..members.len() as u16)
            .map(BranchId)
            .filter(|id| !members[usize::from(id.0)].retired() && !out.contains(id))
            .collect();
        let short = policy.width().saturating_sub(out.len());
        out.extend(spare.into_iter().take(short));
        out
    }

    /// The data `policy` can still store over `allowed` (retired branches
    /// replaced as a write would), and what it could hold in all; `None`
    /// when a branch cannot tell (an object store).
    pub fn space(&self, policy: &Policy, allowed: &[BranchId]) -> Result<Option<branch::Space>> {
        let mut spaces = Vec::new();
        for id in self.placeable(policy, allowed) {
            let member = self.member(id);
            let space = member.branch.space().map_err(|source| Error::Branch {
                branch: member.name.clone(),
                source: Box::new(source),
            })?;
            spaces.push(space);
        }
        Ok(space::of_policy(policy, &spaces))
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

    /// Health and latency of every branch, retired ones included (and
    /// flagged), for `cairn status`.
    pub fn status(&self) -> Vec<BranchStatus> {
        self.all_ids()
            .into_iter()
            .map(|id| self.member(id).status(id))
            .collect()
    }

    /// Forgets a branch's faults (after it was repaired or replaced); its
    /// latency estimate, and its counts since the layer took it
    /// ([`BranchStatus::totals`]), are kept.
    pub fn reset_health(&self, id: BranchId) {
        if let Some(m) = self.members.read().get(usize::from(id.0)) {
            m.reset();
        }
    }

    /// Where the shards of `key` are.
    pub fn locate(&self, key: &BlobKey) -> Result<Placement> {
        if let Some(plain) = &self.plain {
            return plain_locate(plain, key);
        }
        let entry = self.entry(key)?;
        Ok(entry.placement(key))
    }

    /// Container keys starting with `prefix`, in order, from memory (from
    /// the branch in the plain layout).
    pub fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        if let Some(plain) = &self.plain {
            return plain_list(plain, prefix);
        }
        Ok(self.map.keys(prefix))
    }

    /// The container's length in bytes.
    pub fn size(&self, key: &BlobKey) -> Result<u64> {
        if let Some(plain) = &self.plain {
            return plain_size(plain, key);
        }
        Ok(self.entry(key)?.layout.container_len)
    }

    fn entry(&self, key: &BlobKey) -> Result<Arc<map::Entry>> {
        self.map
            .get(key)
            .ok_or_else(|| Error::NotFound(key.clone()))
    }

    fn member(&self, id: BranchId) -> Arc<Member> {
        Arc::clone(&self.members.read()[usize::from(id.0)])
    }
}

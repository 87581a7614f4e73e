//! Chunks other clients of the file system stored: several client
//! repositories write containers to one set of branches, each with its own
//! index (see `docs/cluster.md`). A chunk id this client's index does not
//! know may be another client's; the store then asks a [`SharedIndex`]
//! and keeps what it answers in its own index.
//!
//! Two places ask: a read of a chunk the index cannot place
//! ([`Store::locate`], [`Store::locate_many`]: every read path), and a
//! writer about to store chunks, for the ones it would store anew (one
//! batch at a time), so a file another client stored already costs no new
//! container bytes. The store tells the shared index of each container it
//! made durable and indexed, never before ([`SharedIndex::publish`]): a
//! chunk is reported present only once its container is durable.
//!
//! [`CatchUp`] is the implementation over the branches themselves: they
//! are the publication (a container is on them only once it is durable),
//! and a miss indexes every container another client made that this index
//! does not know yet. An index service (`repo::ChunkdIndex`, over chunkd)
//! answers per chunk instead; a container it names that this store does
//! not know is then found by its own key on the branches and indexed
//! whole from its footer, so a later catch-up (which skips containers
//! the index knows) misses none of its chunks. A lost or unreachable
//! shared index costs missed deduplication, never data: writers then
//! store the chunk again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::container::ChunkLocation;
use crate::id::{ChunkId, ContainerId};
use crate::index::ContainerInfo;
use crate::protection::Policy;
use crate::store::{Io, Shared, Store};
use crate::Result;

/// Catch-up passes before one gives up for now (each voided only by
/// another client's collection ending during it).
const CATCH_UP_PASSES: usize = 3;

/// An index of the chunks every client of a file system made durable.
/// Locations are [`ChunkLocation`]s (28 bytes, [`ChunkLocation::encode`]),
/// so a service may keep them opaque.
pub trait SharedIndex: Send + Sync {
    /// Where each of `ids` is, in order: `None` for a chunk no client made
    /// durable (as far as this index knows). A location must be in a
    /// container that is durable on the branches.
    fn locate(&self, ids: &[ChunkId]) -> Result<Vec<Option<ChunkLocation>>>;

    /// [`SharedIndex::locate`] for a stream's later batches (its first
    /// asks [`SharedIndex::locate`]): a miss only costs storing the chunks
    /// again, so an index for which asking is expensive may answer from
    /// what it knows.
    fn locate_for_write(&self, ids: &[ChunkId]) -> Result<Vec<Option<ChunkLocation>>> {
        self.locate(ids)
    }

    /// Container `container`, stored under `policy` and holding `entries`,
    /// is durable and indexed by this client: called by the store after
    /// its own index recorded it, never before.
    fn publish(
        &self,
        container: ContainerId,
        policy: &Policy,
        entries: &[(ChunkId, ChunkLocation)],
    ) -> Result<()>;

    /// `containers` are about to be deleted (garbage collection): the
    /// index must stop naming them first. An error keeps them: the
    /// collection then deletes nothing (it leaks rather than lets the
    /// index name a container that is gone).
    fn forget(&self, containers: &[ContainerId]) -> Result<()> {
        let _ = containers;
        Ok(())
    }
}

/// The shared index read from the branches: on a miss, every container
/// another client made that this store's index does not know is read
/// (its footer, not its data) and indexed. Each catch-up lists the
/// branches' containers: cheap for thousands of containers, not for
/// millions (a fingerprint-index service is the way there).
pub struct CatchUp {
    shared: Weak<Shared>,
    io: Weak<Io>,
    /// When the last catch-up a stream's later batch asked for started:
    /// those, whose every new chunk is a miss, list the branches at most
    /// once per [`WRITER_CATCH_UP_EVERY`]. Reads, and each stream's first
    /// batch, always catch up.
    last_for_write: parking_lot::Mutex<Option<Instant>>,
}

/// How often writers' misses may list the branches.
const WRITER_CATCH_UP_EVERY: Duration = Duration::from_secs(1);

impl CatchUp {
    /// The catch-up over `store`'s branches. It holds the store weakly:
    /// set as the store's own shared index, it must not keep it open.
    pub fn new(store: &Store) -> Arc<CatchUp> {
        Arc::new(CatchUp {
            shared: Arc::downgrade(&store.shared),
            io: Arc::downgrade(&store.io),
            last_for_write: parking_lot::Mutex::new(None),
        })
    }

    fn store(&self) -> Option<Store> {
        Some(Store {
            shared: self.shared.upgrade()?,
            io: self.io.upgrade()?,
        })
    }
}

impl SharedIndex for CatchUp {
    fn locate(&self, ids: &[ChunkId]) -> Result<Vec<Option<ChunkLocation>>> {
        let Some(store) = self.store() else {
            return Ok(vec![None; ids.len()]);
        };
        store.catch_up()?;
        store.shared.index.lookup_many(ids)
    }

    fn locate_for_write(&self, ids: &[ChunkId]) -> Result<Vec<Option<ChunkLocation>>> {
        let Some(store) = self.store() else {
            return Ok(vec![None; ids.len()]);
        };
        let due = {
            let mut last = self.last_for_write.lock();
            let due = last.is_none_or(|t| t.elapsed() >= WRITER_CATCH_UP_EVERY);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due {
            store.catch_up()?;
        }
        store.shared.index.lookup_many(ids)
    }

    /// Nothing to tell: the container on the branches is the news.
    fn publish(&self, _: ContainerId, _: &Policy, _: &[(ChunkId, ChunkLocation)]) -> Result<()> {
        Ok(())
    }
}

/// What indexing one container read from its footer gives: its row in
/// the index's container table, its policy, and its chunks' entries.
pub(crate) type ContainerRow = (ContainerInfo, Policy, Vec<(ChunkId, ChunkLocation)>);

/// Told of each reservation of container ids once it is durable
/// ([`Store::set_id_ledger`]): where several repositories may carry one
/// client number (a copy of a client repository), a ledger outside them
/// refuses ids another one reserved already.
pub trait IdLedger: Send + Sync {
    /// This store reserved the ids from `from` to below `below`: an error
    /// keeps it from writing with them.
    fn reserved(&self, from: u64, below: u64) -> std::result::Result<(), LedgerError>;
}

/// Why an [`IdLedger`] did not record a reservation.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Another repository reserved these ids: this store writes nothing
    /// more.
    #[error(transparent)]
    Refused(Box<dyn std::error::Error + Send + Sync>),
    /// The ledger could not be asked now: this container waits (its write
    /// fails), the next one asks again.
    #[error(transparent)]
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
}

/// Who asks the shared index (see [`Store::learn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asker {
    /// A read of a chunk a file names.
    Reader,
    /// A write stream about to store chunks; `later_batch`: it asked
    /// before ([`SharedIndex::locate_for_write`]).
    Writer { later_batch: bool },
}

impl Store {
    /// Container `c` read from the branches (its footer, not its data),
    /// ready to index.
    pub(crate) fn container_row(&self, c: ContainerId) -> Result<ContainerRow> {
        let (size, entries) = self.container_entries(c)?;
        let info = ContainerInfo {
            stored_bytes: size,
            raw_bytes: entries.iter().map(|(_, l)| u64::from(l.len)).sum(),
            chunks: entries.len() as u32,
        };
        Ok((info, self.stored_policy(c)?, entries))
    }

    /// Consults `index` from now on for chunks this store's index does not
    /// know, and tells it of every container made durable.
    pub fn set_shared_index(&self, index: Arc<dyn SharedIndex>) {
        *self.shared.shared_index.write() = Some(index);
    }

    /// The container-id mark: every container this store ever handed out
    /// has a lower id (`None` before its first).
    pub fn container_id_mark(&self) -> Result<Option<u64>> {
        self.shared.index.container_mark()
    }

    /// Tells `ledger` of every reservation of container ids from now on
    /// (see [`IdLedger`]).
    pub fn set_id_ledger(&self, ledger: Arc<dyn IdLedger>) {
        *self.shared.id_ledger.write() = Some(ledger);
    }

    /// Whether a shared index is set.
    pub fn has_shared_index(&self) -> bool {
        self.shared.shared_index.read().is_some()
    }

    /// Indexes every container on the branches that another client made and
    /// this index does not know yet (its footer gives its chunks; a chunk
    /// indexed already keeps its location). Returns how many containers
    /// it indexed. A container that cannot be read now (another client
    /// is still writing it, or it is damaged) is left for the next time.
    /// One catch-up at a time: a second caller waits and then finds little
    /// left to do.
    pub fn catch_up(&self) -> Result<usize> {
        let _one = self.shared.catching_up.lock();
        // Another client's collection ending meanwhile voids a pass (see
        // `index_foreign`); the next one lists what is left.
        for _ in 0..CATCH_UP_PASSES - 1 {
            if let Some(n) = self.catch_up_pass()? {
                return Ok(n);
            }
        }
        Ok(self.catch_up_pass()?.unwrap_or(0))
    }

    /// One listing and indexing; `None` when a collection ended during it
    /// and nothing was indexed.
    fn catch_up_pass(&self) -> Result<Option<usize>> {
        let since = self.collections_ended();
        tracing::debug!("listing the branches for other clients' containers");
        let client = self.client();
        let known: std::collections::HashSet<ContainerId> = self
            .shared
            .index
            .containers()?
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        // The layer knows the blobs it wrote and found at open: the other
        // clients' new containers are found by listing the branches.
        let theirs =
            |k: &branch::BlobKey| ContainerId::from_blob_key(k).is_some_and(|c| !client.owns(c));
        self.shared
            .layer
            .discover_new(ContainerId::list_prefix(), &theirs);
        let new: Vec<ContainerId> = self
            .container_ids()?
            .into_iter()
            .filter(|c| !client.owns(*c) && !known.contains(c) && !self.is_doomed(*c))
            .collect();
        let mut rows = Vec::new();
        let mut entries = Vec::new();
        for c in new {
            match self.container_row(c) {
                Ok((info, policy, e)) => {
                    rows.push((c, info, policy));
                    entries.extend(e);
                }
                Err(e) => {
                    tracing::debug!(container = %c, error = %e, "another client's container cannot be indexed yet")
                }
            }
        }
        if !rows.is_empty() {
            let chunks = entries.len();
            if !self.index_foreign(&rows, entries, since)? {
                return Ok(None);
            }
            tracing::debug!(
                containers = rows.len(),
                chunks,
                "indexed other clients' containers"
            );
        }
        Ok(Some(rows.len()))
    }

    /// Asks the shared index, if one is set, for those of `ids` this
    /// store's index does not know, and records what it places (with the
    /// containers' policies, read from the branches). Errors of the shared
    /// index are logged and cost only the answer: the chunks stay unknown.
    /// For a reader, a chunk still unknown after the answer is looked for
    /// on the branches ([`Store::catch_up`]): a file names it, so some
    /// client made it durable, and an index service may not know it (its
    /// range just moved to an owner that starts empty, the add is still
    /// queued) or name a copy that is gone. A writer's miss only costs
    /// storing the chunk again.
    pub(crate) fn learn(&self, ids: &[ChunkId], asker: Asker) -> Result<()> {
        let Some(index) = self.shared.shared_index.read().clone() else {
            return Ok(());
        };
        self.learn_from(index.as_ref(), ids, asker)?;
        if asker == Asker::Reader {
            let known = self.shared.index.lookup_many(ids)?;
            if known.iter().any(Option::is_none) {
                self.catch_up()?;
            }
        }
        Ok(())
    }

    fn learn_from(&self, index: &dyn SharedIndex, ids: &[ChunkId], asker: Asker) -> Result<()> {
        let known = self.shared.index.lookup_many(ids)?;
        let mut missing: Vec<ChunkId> = ids
            .iter()
            .zip(known)
            .filter(|(_, k)| k.is_none())
            .map(|(id, _)| *id)
            .collect();
        missing.sort();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let since = self.collections_ended();
        let asked = match asker {
            Asker::Writer { later_batch: true } => index.locate_for_write(&missing),
            _ => index.locate(&missing),
        };
        let found = match asked {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(chunks = missing.len(), error = %e, "the shared chunk index did not answer");
                return Ok(());
            }
        };
        let entries: Vec<(ChunkId, ChunkLocation)> = missing
            .iter()
            .zip(found)
            .filter_map(|(id, loc)| Some((*id, loc?)))
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let mut containers: Vec<ContainerId> = entries.iter().map(|(_, l)| l.container).collect();
        containers.sort();
        containers.dedup();
        let mut rows = Vec::new();
        let mut new = Vec::new();
        let mut whole = Vec::new();
        for c in containers {
            if self.shared.index.has_container(c)? {
                continue;
            }
            new.push(c);
            // A container the layer has not mapped yet (another client's,
            // placed by an index service) is probed by its own key, never
            // by listing every container; then indexed whole, from its
            // footer, as a catch-up would (a container the index knows
            // is one a catch-up skips).
            let key = c.blob_key();
            let own = |k: &branch::BlobKey| *k == key;
            self.shared.layer.discover_new(&format!("{key}."), &own);
            match self.container_row(c) {
                Ok((info, policy, e)) => {
                    rows.push((c, info, policy));
                    whole.extend(e);
                }
                Err(e) => {
                    // Not on the branches (deleted, or a stale answer):
                    // its chunks stay unknown, so a writer stores them.
                    tracing::debug!(container = %c, error = %e, "a container the shared index named cannot be read; ignored");
                }
            }
        }
        let mut entries: Vec<(ChunkId, ChunkLocation)> = entries
            .into_iter()
            .filter(|(_, l)| !new.contains(&l.container))
            .collect();
        entries.extend(whole);
        if entries.is_empty() {
            return Ok(());
        }
        self.index_foreign(&rows, entries, since).map(|_| ())
    }

    fn collections_ended(&self) -> u64 {
        self.shared.peer_collections_ended.load(Ordering::SeqCst)
    }

    /// Indexes other clients' containers and chunks, but none in a
    /// container another client's collection is deleting (see
    /// `peers`): the read lock orders this against [`Store::doom`], so
    /// a doomed container's entries are never put back after it dropped
    /// them from deduplication. Nothing at all when a collection ended
    /// since `since` (read before the containers were): a container read
    /// before it may be deleted now, and its doomed mark is gone with
    /// the collection; the next catch-up finds what is left (false then).
    fn index_foreign(
        &self,
        rows: &[(ContainerId, ContainerInfo, Policy)],
        mut entries: Vec<(ChunkId, ChunkLocation)>,
        since: u64,
    ) -> Result<bool> {
        let doomed = self.shared.doomed.read();
        if self.collections_ended() != since {
            tracing::debug!(
                containers = rows.len(),
                "another client's collection ended while these containers were read; not indexed now"
            );
            return Ok(false);
        }
        if doomed.is_empty() {
            self.shared.index.add_foreign(rows, &entries)?;
            return Ok(true);
        }
        let rows: Vec<_> = rows
            .iter()
            .filter(|(c, _, _)| !doomed.contains(c))
            .cloned()
            .collect();
        entries.retain(|(_, l)| !doomed.contains(&l.container));
        self.shared.index.add_foreign(&rows, &entries)?;
        Ok(true)
    }

    /// Tells the shared index, if one is set, that `containers` are about
    /// to be deleted; its error stops the deletion.
    pub(crate) fn forget_shared(shared: &Shared, containers: &[ContainerId]) -> Result<()> {
        let Some(index) = shared.shared_index.read().clone() else {
            return Ok(());
        };
        index.forget(containers)
    }

    /// Tells the shared index, if one is set, of a container made durable
    /// and indexed; a failure is logged (others miss the deduplication).
    pub(crate) fn publish(shared: &Shared, sealed: &crate::container::Sealed) {
        let Some(index) = shared.shared_index.read().clone() else {
            return;
        };
        if let Err(e) = index.publish(sealed.id, &sealed.protection.policy, &sealed.entries) {
            tracing::warn!(container = %sealed.id, error = %e, "the shared chunk index was not told of a container");
        }
    }
}

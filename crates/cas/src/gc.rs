//! The store's half of garbage collection: which containers are worth
//! reclaiming, copying their live chunks forward, and deleting them.
//!
//! Marking (which chunks are reachable) is the caller's business: the store
//! does not know what a recipe or a directory is. The caller hands in a
//! predicate; the store adds to it every chunk that a writer deduplicated
//! against while the collection ran.
//!
//! ## Why a concurrent write never loses a chunk (the protocol)
//!
//! 1. [`Store::begin_collection`] turns on the *retained set* before the
//!    caller starts marking. From then on every dedup hit (a writer finding a
//!    chunk in the index and referencing it instead of storing it) is added
//!    to the set, under a read lock on it.
//! 2. The candidates are the containers indexed at that moment. Containers
//!    written later (and open or in-flight ones) are never touched, so a new
//!    chunk is always safe.
//! 3. The caller marks from everything that can reference a chunk, holding
//!    off any publisher that could carry an older reference past its scan
//!    (the file system's version writer, for one).
//! 4. [`Collection::prepare`] copies forward the chunks of a container that
//!    are marked or retained. [`Collection::commit`] then makes the copies
//!    durable and — under the write lock on the retained set — copies any
//!    retained chunk still indexed in a prepared container, and only when
//!    none is left removes the index entries that point into the prepared
//!    containers, in one durable transaction. A writer's lookup is either
//!    before that (and is recorded, so the chunk is copied) or after (and
//!    misses, so the writer stores the chunk again). Only then are the
//!    containers' blobs deleted.
//!
//! A crash at any point leaves a consistent store: copies are durable and
//! indexed before the old entries go, and a blob whose entries are gone is
//! an orphan that the next collection deletes ([`Collection::remove_orphans`]);
//! across clients, where another client may have found it since, the next
//! collection indexes it again and copies what is live in it first
//! ([`Collection::adopt_orphans`]).
//!
//! Cost: a container with nothing live is never read whole — its footer
//! names its chunks — and all prepared containers leave the index in one
//! ordered pass over it, so reclaiming dead data costs a footer read and a
//! blob delete per container plus one rewrite of the index.
//! Memory: the caller's mark set plus, per candidate container, a few words;
//! one footer at a time.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::container::ChunkLocation;
use crate::id::{ChunkId, ContainerId};
use crate::index::ContainerInfo;
use crate::protection::Protection;
use crate::store::Store;
use crate::writer::StreamWriter;
use crate::{region, CasError, Result};

/// Container blobs deleted at once after the index transaction.
const DELETERS: usize = 8;

/// A running collection; dropping it ends the retained-set recording.
pub struct Collection {
    store: Store,
    candidates: HashMap<ContainerId, ContainerInfo>,
    /// Where live chunks are copied to, one stream per protection so that a
    /// copy keeps its container's policy; flushed by [`Collection::commit`].
    relocation: Mutex<HashMap<Protection, StreamWriter>>,
    /// Containers whose live chunks were copied, with their blob sizes.
    prepared: Mutex<HashMap<ContainerId, u64>>,
}

/// How much of a candidate container is still reachable.
#[derive(Debug, Clone, Copy)]
pub struct Assessment {
    pub container: ContainerId,
    pub info: ContainerInfo,
    pub live_chunks: u32,
    pub live_raw_bytes: u64,
    /// The container holds a damaged chunk copy or has a damaged footer:
    /// worth rewriting whatever its live fraction.
    pub damaged: bool,
}

impl Assessment {
    /// Live raw bytes over the container's raw bytes (1.0 when empty).
    pub fn live_fraction(&self) -> f64 {
        if self.info.raw_bytes == 0 {
            return 1.0;
        }
        self.live_raw_bytes as f64 / self.info.raw_bytes as f64
    }
}

/// What reclaiming did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reclaimed {
    pub containers: u64,
    /// Container bytes deleted from the branch.
    pub freed_bytes: u64,
    pub copied_chunks: u64,
    pub copied_bytes: u64,
    /// Index entries dropped (chunks nothing reaches any more).
    pub dropped_chunks: u64,
}

/// What [`Collection::prepare`] made of one container.
#[derive(Debug)]
pub enum Prepared {
    /// Its live chunks are copied; it is deleted at commit.
    Copied(Reclaimed),
    /// It could not be read (the innermost cause); it is left as it is.
    Unreadable(String),
}

/// Whether an error reading a container is about that container (it is
/// gone, lost beyond its policy, or corrupt) rather than the store as a
/// whole (its index, a full disk).
fn is_unreadable(e: &CasError) -> bool {
    match e {
        CasError::CorruptContainer { .. }
        | CasError::CorruptChunk { .. }
        | CasError::ContainerLost { .. } => true,
        CasError::Redundancy(r) => !r.is_no_space(),
        _ => false,
    }
}

impl Store {
    /// How to store chunks copied out of `container` so they keep its
    /// protection: its policy, over the branches holding its shards, widened
    /// to every branch when those are fewer than the policy needs (a stripe
    /// sits on one branch of its width; a replaced branch left the set).
    fn protection_of(&self, container: ContainerId) -> Result<Protection> {
        let layer = self.layer();
        let policy = self.container_policy(container)?;
        let placed = layer.locate(&container.blob_key())?;
        let mut branches: Vec<_> = placed
            .shards
            .iter()
            .flat_map(|s| s.branches.iter().copied())
            .collect();
        branches.sort();
        branches.dedup();
        if layer.validate(&policy, &branches).is_err() {
            branches = layer.branch_ids();
        }
        Ok(Protection { policy, branches })
    }

    /// Starts a collection: dedup hits are retained from now on, and the
    /// candidates are the containers indexed now. One at a time per store.
    pub fn begin_collection(&self) -> Result<Collection> {
        // A collection marks only this client's namespace view and sweeps
        // what its index knows: another client's chunks written since
        // its last look are unmarked, and would be lost.
        let clients = self.clients()?;
        if clients.len() > 1 || self.client() != crate::ClientNo::default() {
            return Err(CasError::SharedBranches {
                clients: clients.len().max(2),
            });
        }
        self.begin(false)
    }

    /// [`Store::begin_collection`] on branches several clients share, for
    /// a caller that runs the protocol across clients (`gc`'s `peers`):
    /// the candidates are this client's own containers only, its orphans
    /// among them ([`Collection::adopt_orphans`]).
    pub fn begin_collection_among_clients(&self) -> Result<Collection> {
        self.begin(true)
    }

    fn begin(&self, adopt_orphans: bool) -> Result<Collection> {
        {
            let mut retained = self.shared.retained.write();
            if retained.is_some() {
                return Err(CasError::CollectionRunning);
            }
            *retained = Some(Default::default());
        }
        // Built first so that an error below ends the recording on drop.
        let mut collection = Collection {
            store: self.clone(),
            candidates: HashMap::new(),
            relocation: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
        };
        let client = self.client();
        collection.candidates = self
            .shared
            .index
            .containers()?
            .into_iter()
            .filter(|(c, _)| client.owns(*c))
            .collect();
        if adopt_orphans {
            collection.adopt_orphans()?;
        }
        Ok(collection)
    }
}

impl Collection {
    pub fn candidates(&self) -> usize {
        self.candidates.len()
    }

    fn is_retained(&self, id: &ChunkId) -> bool {
        let retained = self.store.shared.retained.read();
        let set = retained.as_ref().expect("recording while collecting");
        let hit = set.lock().contains(id);
        hit
    }

    /// Live chunks and bytes of every candidate, by one pass over the index.
    pub fn assess(&self, marked: &(dyn Fn(&ChunkId) -> bool + Sync)) -> Result<Vec<Assessment>> {
        let mut live: HashMap<ContainerId, (u32, u64)> = HashMap::new();
        self.store.shared.index.for_each_chunk(|id, loc| {
            if self.candidates.contains_key(&loc.container) && marked(&id) {
                let e = live.entry(loc.container).or_default();
                e.0 += 1;
                e.1 += loc.len as u64;
            }
        })?;
        let damaged: HashSet<ContainerId> = self.store.damaged_containers()?.into_iter().collect();
        let mut out: Vec<Assessment> = self
            .candidates
            .iter()
            .map(|(c, info)| {
                let (live_chunks, live_raw_bytes) = live.get(c).copied().unwrap_or_default();
                Assessment {
                    container: *c,
                    info: *info,
                    live_chunks,
                    live_raw_bytes,
                    damaged: damaged.contains(c),
                }
            })
            .collect();
        out.sort_by_key(|a| a.container);
        Ok(out)
    }

    /// Copies the container's live chunks (marked or retained, and indexed
    /// at this container) forward, and queues the container for
    /// [`Collection::commit`]. A container with none live is not read. A
    /// container that cannot be read (gone, shards lost beyond its policy,
    /// corrupt) is left as it is and not queued: it is
    /// [`Prepared::Unreadable`], for the caller to report.
    pub fn prepare(
        &self,
        container: ContainerId,
        marked: &(dyn Fn(&ChunkId) -> bool + Sync),
    ) -> Result<Prepared> {
        let read = self
            .store
            .container_entries(container)
            .and_then(|(size, entries)| {
                let mut live = Vec::new();
                for (id, loc) in &entries {
                    if (marked(id) || self.is_retained(id))
                        && self.indexed_in(id, |c| c == container)?
                    {
                        live.push((*id, *loc));
                    }
                }
                Ok((size, self.read_live(container, &live)?))
            });
        let (size, (data, ids)) = match read {
            Ok(r) => r,
            // On no branch and needed by no index entry (its chunks were
            // written again elsewhere): only its index row is left, and
            // that is all there is to reclaim.
            Err(e)
                if e.is_not_found()
                    && self
                        .store
                        .chunks_in(&HashSet::from([container]))?
                        .is_empty() =>
            {
                (0, (Vec::new(), Vec::new()))
            }
            Err(e) if is_unreadable(&e) => {
                return Ok(Prepared::Unreadable(crate::check::root_cause(&e)))
            }
            Err(e) => return Err(e),
        };
        let mut report = Reclaimed::default();
        if !ids.is_empty() {
            let protection = self.store.protection_of(container)?;
            self.relocate(&protection, &data, &ids, &mut report)?;
        }
        self.prepared.lock().insert(container, size);
        Ok(Prepared::Copied(report))
    }

    /// Queues a damaged container for [`Collection::commit`] whatever it
    /// holds: the chunks the index places in it that still verify are
    /// copied forward, the others are given up. Returns how many were
    /// copied.
    pub fn evacuate(&self, container: ContainerId) -> Result<u64> {
        let mut entries = Vec::new();
        self.store.shared.index.for_each_chunk(|id, loc| {
            if loc.container == container {
                entries.push((id, loc));
            }
        })?;
        let mut regions: HashMap<u64, Option<Bytes>> = HashMap::new();
        let (mut data, mut ids) = (Vec::new(), Vec::new());
        for (id, loc) in &entries {
            let region = regions
                .entry(loc.region_offset)
                .or_insert_with(|| self.store.read_region(loc, id).ok());
            if let Some(chunk) = region
                .as_ref()
                .and_then(|r| self.store.verify(id, loc, r).ok())
            {
                data.push(chunk);
                ids.push(*id);
            }
        }
        let mut report = Reclaimed::default();
        if !ids.is_empty() {
            let protection = self.store.protection_of(container)?;
            self.relocate(&protection, &data, &ids, &mut report)?;
        }
        let size = self.store.shared.container_size(container).unwrap_or(0);
        self.prepared.lock().insert(container, size);
        Ok(report.copied_chunks)
    }

    /// Whether the chunk's index entry points into a container `in` accepts.
    fn indexed_in(&self, id: &ChunkId, within: impl Fn(ContainerId) -> bool) -> Result<bool> {
        let here = self.store.shared.index.lookup(id)?;
        Ok(here.is_some_and(|l| within(l.container)))
    }

    /// Makes the copies durable, copies what writers retained since, then
    /// drops the prepared containers' index entries in one transaction and
    /// deletes their blobs (see the module doc for why this is safe while
    /// writers run).
    pub fn commit(&self) -> Result<Reclaimed> {
        let prepared = std::mem::take(&mut *self.prepared.lock());
        let mut report = Reclaimed::default();
        if prepared.is_empty() {
            return Ok(report);
        }
        let shared = &self.store.shared;
        let doomed: HashSet<ContainerId> = prepared.keys().copied().collect();
        self.flush_copies()?;
        // The shared index first: if it cannot forget, nothing is deleted
        // and this index keeps the containers too, for a later collection.
        // (Forgotten here but left on the branches, they would be orphans
        // another client may find and deduplicate against.)
        let ids: Vec<ContainerId> = prepared.keys().copied().collect();
        Store::forget_shared(shared, &ids)?;
        // An id once found outside the doomed containers stays outside:
        // entries only ever move out of them. So the pass under the write
        // lock checks only what was retained since the last pass.
        let mut checked: HashSet<ChunkId> = HashSet::new();
        let mut locked = false;
        loop {
            let retained = if locked {
                Some(shared.retained.write())
            } else {
                None
            };
            let fresh: Vec<ChunkId> = {
                let guard;
                let set = match &retained {
                    Some(w) => w.as_ref(),
                    None => {
                        guard = shared.retained.read();
                        guard.as_ref()
                    }
                };
                let set = set.expect("recording while collecting").lock();
                set.iter()
                    .filter(|id| !checked.contains(*id))
                    .copied()
                    .collect()
            };
            let mut late = Vec::new();
            for id in fresh {
                match self.store.shared.index.lookup(&id)? {
                    Some(loc) if doomed.contains(&loc.container) => late.push((id, loc.container)),
                    _ => {
                        checked.insert(id);
                    }
                }
            }
            if late.is_empty() && locked {
                report.dropped_chunks = shared.index.forget_containers(&doomed)?;
                break;
            }
            drop(retained);
            for (id, container) in &late {
                let data = self.store.read_chunk(id)?;
                let protection = self.store.protection_of(*container)?;
                self.relocate(&protection, &[data], &[*id], &mut report)?;
            }
            if !late.is_empty() {
                self.flush_copies()?;
            }
            locked = true;
        }
        // A delete is a slow metadata operation on most file systems and a
        // round trip on a bucket, so several run at once.
        let doomed: Vec<(ContainerId, u64)> = prepared.into_iter().collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed: Option<CasError> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..DELETERS.min(doomed.len()))
                .map(|_| {
                    scope.spawn(|| loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let (c, _) = doomed.get(i)?;
                        // Already gone (see `prepare`) is not an error.
                        if let Err(e) = shared.delete_container(*c) {
                            return Some(e);
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .filter_map(|w| w.join().expect("a delete worker panicked"))
                .next()
        });
        if let Some(e) = failed {
            return Err(e);
        }
        report.containers = doomed.len() as u64;
        report.freed_bytes = doomed.iter().map(|(_, size)| size).sum();
        Ok(report)
    }

    /// The containers [`Collection::commit`] will delete.
    pub fn prepared_containers(&self) -> Vec<ContainerId> {
        let mut out: Vec<ContainerId> = self.prepared.lock().keys().copied().collect();
        out.sort();
        out
    }

    /// Adds chunks other clients deduplicated against to the retained
    /// set: [`Collection::commit`] copies those still in a prepared
    /// container.
    pub fn retain(&self, ids: impl IntoIterator<Item = ChunkId>) {
        let retained = self.store.shared.retained.read();
        let set = retained.as_ref().expect("recording while collecting");
        set.lock().extend(ids);
    }

    /// Makes the copies made so far durable and indexed (other clients
    /// find them before the originals go).
    pub fn flush_copies(&self) -> Result<()> {
        for stream in self.relocation.lock().values_mut() {
            stream.flush()?;
        }
        Ok(())
    }

    /// Stores verified chunks again in new containers under `protection`;
    /// durable and indexed at their new place after the next
    /// [`Collection::flush_copies`].
    fn relocate(
        &self,
        protection: &Protection,
        data: &[Bytes],
        ids: &[ChunkId],
        report: &mut Reclaimed,
    ) -> Result<()> {
        let mut relocation = self.relocation.lock();
        let stream = relocation
            .entry(protection.clone())
            .or_insert_with(|| self.store.relocation_stream(protection.clone()));
        stream.write_hashed(data, ids)?;
        report.copied_chunks += ids.len() as u64;
        report.copied_bytes += data.iter().map(|d| d.len() as u64).sum::<u64>();
        Ok(())
    }

    /// Reads `chunks` of `container` (the container once, each chunk
    /// verified), with their ids.
    fn read_live(
        &self,
        container: ContainerId,
        chunks: &[(ChunkId, ChunkLocation)],
    ) -> Result<(Vec<Bytes>, Vec<ChunkId>)> {
        let mut data = Vec::with_capacity(chunks.len());
        let mut ids = Vec::with_capacity(chunks.len());
        if chunks.is_empty() {
            return Ok((data, ids));
        }
        let bytes = Bytes::from(self.store.shared.read_container(container)?);
        let mut regions: HashMap<u64, Bytes> = HashMap::new();
        for (id, loc) in chunks {
            let start = loc.region_offset as usize;
            let region = match regions.get(&loc.region_offset) {
                Some(r) => r.clone(),
                None => {
                    let stored = bytes
                        .get(start..start + loc.region_len as usize)
                        .ok_or_else(|| CasError::CorruptChunk {
                            id: *id,
                            container,
                            reason: format!("region at offset {start} lies past the end"),
                        })?;
                    let raw = region::decode(bytes.slice_ref(stored)).map_err(|e| {
                        CasError::CorruptChunk {
                            id: *id,
                            container,
                            reason: format!("region at offset {start}: {e}"),
                        }
                    })?;
                    regions.insert(loc.region_offset, raw.clone());
                    raw
                }
            };
            data.push(self.store.verify(id, loc, &region)?);
            ids.push(*id);
        }
        Ok((data, ids))
    }

    /// Deletes container blobs that no index row knows and no writer is
    /// writing: left by a crash between writing a container and indexing it,
    /// or between a reclaim's index transaction and its delete. Returns how
    /// many and their bytes.
    pub fn remove_orphans(&self) -> Result<(u64, u64)> {
        let orphans = self.orphans()?;
        self.delete_orphans(orphans)
    }

    /// [`Collection::remove_orphans`] of those of `among` still orphans:
    /// across clients, only orphans every client was told of go.
    pub fn remove_orphans_among(&self, among: &HashSet<ContainerId>) -> Result<(u64, u64)> {
        let mut orphans = self.orphans()?;
        orphans.retain(|c| among.contains(c));
        self.delete_orphans(orphans)
    }

    /// Indexes this client's orphans again (its containers on the branches
    /// that its index forgot: a delete that failed, a shared index that
    /// could not forget) and makes them candidates. Across clients another
    /// client may have found one since and deduplicated against it (its
    /// catch-up indexes what it finds), so an orphan's live chunks must be
    /// copied like any container's, not deleted unread. One that cannot
    /// be read is left an orphan. Returns how many were adopted.
    pub fn adopt_orphans(&mut self) -> Result<usize> {
        let mut rows = Vec::new();
        let mut entries = Vec::new();
        for c in self.orphans()? {
            match self.store.container_row(c) {
                Ok((info, policy, e)) => {
                    rows.push((c, info, policy));
                    entries.extend(e);
                }
                Err(e) => {
                    tracing::warn!(container = %c, error = %e, "an orphan cannot be read; it is left to the orphan removal")
                }
            }
        }
        if rows.is_empty() {
            return Ok(0);
        }
        self.store.shared.index.add_found(&rows, &entries, None)?;
        for (c, info, _) in &rows {
            self.candidates.insert(*c, *info);
        }
        tracing::info!(
            containers = rows.len(),
            "indexed this client's orphans again"
        );
        Ok(rows.len())
    }

    /// The orphans [`Collection::remove_orphans`] would delete now.
    pub fn orphans(&self) -> Result<Vec<ContainerId>> {
        let shared = &self.store.shared;
        let listed = self.store.container_ids()?;
        let before: HashSet<ContainerId> = shared
            .index
            .containers()?
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        let maybe: Vec<ContainerId> = {
            let inflight = shared.inflight.lock();
            listed
                .into_iter()
                // Never another client's: it is not this index's to judge.
                .filter(|c| self.store.client().owns(*c))
                .filter(|c| !before.contains(c) && !inflight.containers.contains_key(c))
                .collect()
        };
        if maybe.is_empty() {
            return Ok(Vec::new());
        }
        // Indexed between the first look and the in-flight check: not orphans.
        let after: HashSet<ContainerId> = shared
            .index
            .containers()?
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        Ok(maybe.into_iter().filter(|c| !after.contains(c)).collect())
    }

    fn delete_orphans(&self, orphans: Vec<ContainerId>) -> Result<(u64, u64)> {
        let shared = &self.store.shared;
        if orphans.is_empty() {
            return Ok((0, 0));
        }
        Store::forget_shared(shared, &orphans)?;
        let (mut count, mut bytes) = (0, 0);
        for c in orphans {
            bytes += shared.container_size(c).unwrap_or(0);
            shared.delete_container(c)?;
            count += 1;
        }
        Ok((count, bytes))
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        *self.store.shared.retained.write() = None;
    }
}

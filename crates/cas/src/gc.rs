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
//! 4. [`Collection::reclaim`] copies forward the chunks that are marked or
//!    retained, then — under the write lock on the retained set — copies any
//!    chunk retained since, and only when none is left removes the index
//!    entries that still point into the container, in one durable
//!    transaction. A writer's lookup is either before that (and is recorded,
//!    so the chunk is copied) or after (and misses, so the writer stores the
//!    chunk again). Only then is the container's blob deleted.
//!
//! A crash at any point leaves a consistent store: copies are durable and
//! indexed before the old entries go, and a blob whose entries are gone is
//! an orphan that the next collection deletes ([`Collection::remove_orphans`]).
//! Memory: the caller's mark set plus, per candidate container, a few words.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::container::{self, ChunkLocation};
use crate::id::{ChunkId, ContainerId};
use crate::index::ContainerInfo;
use crate::protection::Protection;
use crate::store::Store;
use crate::{region, CasError, Result};

/// A running collection; dropping it ends the retained-set recording.
pub struct Collection {
    store: Store,
    candidates: HashMap<ContainerId, ContainerInfo>,
}

/// How much of a candidate container is still reachable.
#[derive(Debug, Clone, Copy)]
pub struct Assessment {
    pub container: ContainerId,
    pub info: ContainerInfo,
    pub live_chunks: u32,
    pub live_raw_bytes: u64,
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

/// What reclaiming one container did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reclaimed {
    /// Container bytes deleted from the branch.
    pub freed_bytes: u64,
    pub copied_chunks: u64,
    pub copied_bytes: u64,
    pub dropped_chunks: u64,
}

impl Store {
    /// How to store chunks copied out of `container` so they keep its
    /// protection: its policy, over the branches holding its shards, widened
    /// to every branch when those are fewer than the policy needs (a stripe
    /// sits on one branch of its width; a replaced branch left the set).
    fn protection_of(&self, container: ContainerId) -> Result<Protection> {
        let Some(layer) = self.layer() else {
            return Ok(Protection::plain());
        };
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
        {
            let mut retained = self.shared.retained.write().unwrap();
            if retained.is_some() {
                return Err(CasError::CollectionRunning);
            }
            *retained = Some(Default::default());
        }
        // Built first so that an error below ends the recording on drop.
        let mut collection = Collection {
            store: self.clone(),
            candidates: HashMap::new(),
        };
        collection.candidates = self.shared.index.containers()?.into_iter().collect();
        Ok(collection)
    }
}

impl Collection {
    pub fn candidates(&self) -> usize {
        self.candidates.len()
    }

    fn is_retained(&self, id: &ChunkId) -> bool {
        let retained = self.store.shared.retained.read().unwrap();
        let set = retained.as_ref().expect("recording while collecting");
        let hit = set.lock().unwrap().contains(id);
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
                }
            })
            .collect();
        out.sort_by_key(|a| a.container);
        Ok(out)
    }

    /// Copies the container's live chunks (marked or retained) forward and
    /// deletes it (see the module doc for why this is safe while writers run).
    pub fn reclaim(
        &self,
        container: ContainerId,
        marked: &(dyn Fn(&ChunkId) -> bool + Sync),
    ) -> Result<Reclaimed> {
        let shared = &self.store.shared;
        let key = container.blob_key();
        let bytes = Bytes::from(shared.branch.get(&key)?);
        let entries = container::parse(container, &bytes)
            .map_err(|source| CasError::CorruptContainer { container, source })?;
        let mut here = Vec::new();
        for (id, loc) in &entries {
            if shared
                .index
                .lookup(id)?
                .is_some_and(|l| l.container == container)
            {
                here.push((*id, *loc));
            }
        }
        let protection = self.store.protection_of(container)?;
        let mut report = Reclaimed::default();
        let mut copied: HashSet<ChunkId> = HashSet::new();
        let first: Vec<(ChunkId, ChunkLocation)> = here
            .iter()
            .filter(|(id, _)| marked(id) || self.is_retained(id))
            .copied()
            .collect();
        self.copy_forward(&bytes, &first, &protection, &mut copied, &mut report)?;
        loop {
            let retained = shared.retained.write().unwrap();
            let set = retained.as_ref().expect("recording while collecting");
            let late: Vec<(ChunkId, ChunkLocation)> = {
                let set = set.lock().unwrap();
                here.iter()
                    .filter(|(id, _)| !copied.contains(id) && set.contains(id))
                    .copied()
                    .collect()
            };
            if late.is_empty() {
                let ids: Vec<ChunkId> = here.iter().map(|(id, _)| *id).collect();
                shared.index.forget_container(container, &ids)?;
                break;
            }
            drop(retained);
            self.copy_forward(&bytes, &late, &protection, &mut copied, &mut report)?;
        }
        report.dropped_chunks = (here.len() - copied.len()) as u64;
        shared.branch.delete(&key)?;
        report.freed_bytes = bytes.len() as u64;
        Ok(report)
    }

    /// Stores `chunks` (cut from the container's `bytes`, verified) again in
    /// new containers under `protection`, durable and indexed at their new
    /// place on return.
    fn copy_forward(
        &self,
        bytes: &Bytes,
        chunks: &[(ChunkId, ChunkLocation)],
        protection: &Protection,
        copied: &mut HashSet<ChunkId>,
        report: &mut Reclaimed,
    ) -> Result<()> {
        if chunks.is_empty() {
            return Ok(());
        }
        let mut regions: HashMap<u64, Bytes> = HashMap::new();
        let mut data = Vec::with_capacity(chunks.len());
        let mut ids = Vec::with_capacity(chunks.len());
        for (id, loc) in chunks {
            let start = loc.region_offset as usize;
            let region = match regions.get(&loc.region_offset) {
                Some(r) => r.clone(),
                None => {
                    let stored = bytes.slice(start..start + loc.region_len as usize);
                    let raw = region::decode(stored).map_err(|e| CasError::CorruptChunk {
                        id: *id,
                        container: loc.container,
                        reason: format!("region at offset {start}: {e}"),
                    })?;
                    regions.insert(loc.region_offset, raw.clone());
                    raw
                }
            };
            data.push(self.store.verify(id, loc, &region)?);
            ids.push(*id);
        }
        let mut stream = self.store.relocation_stream(protection.clone());
        stream.write_hashed(&data, &ids)?;
        stream.flush()?;
        report.copied_chunks += ids.len() as u64;
        report.copied_bytes += data.iter().map(|d| d.len() as u64).sum::<u64>();
        copied.extend(ids);
        Ok(())
    }

    /// Deletes container blobs that no index row knows and no writer is
    /// writing: left by a crash between writing a container and indexing it,
    /// or between a reclaim's index transaction and its delete. Returns how
    /// many and their bytes.
    pub fn remove_orphans(&self) -> Result<(u64, u64)> {
        let shared = &self.store.shared;
        let listed = self.store.container_ids()?;
        let before: HashSet<ContainerId> = shared
            .index
            .containers()?
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        let maybe: Vec<ContainerId> = {
            let inflight = shared.inflight.lock().unwrap();
            listed
                .into_iter()
                .filter(|c| !before.contains(c) && !inflight.containers.contains_key(c))
                .collect()
        };
        if maybe.is_empty() {
            return Ok((0, 0));
        }
        // Indexed between the first look and the in-flight check: not orphans.
        let after: HashSet<ContainerId> = shared
            .index
            .containers()?
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        let (mut count, mut bytes) = (0, 0);
        for c in maybe.into_iter().filter(|c| !after.contains(c)) {
            let key = c.blob_key();
            bytes += shared.branch.size(&key).unwrap_or(0);
            shared.branch.delete(&key)?;
            count += 1;
        }
        Ok((count, bytes))
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        *self.store.shared.retained.write().unwrap() = None;
        // Entries of reclaimed containers are gone; their short fingerprints
        // would only cost needless lookups, so the compact set is rebuilt.
        let _ = self.store.shared.index.reload_compact();
    }
}

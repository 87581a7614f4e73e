use std::collections::HashSet;

use bytes::Bytes;
use rayon::prelude::*;

use crate::container::ContainerBuilder;
use crate::id::{ChunkId, ContainerId};
use crate::protection::{needs_restore, Protection};
use crate::region::{self, Compression};
use crate::store::{IoJob, Store};
use crate::{CasError, Result};

/// What a stream has written so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteStats {
    pub chunks: u64,
    pub bytes: u64,
    pub new_chunks: u64,
    pub new_bytes: u64,
    /// Bytes of regions appended to containers (after compression).
    pub stored_bytes: u64,
}

/// One write stream: chunks go into this stream's own open container, so a
/// file's chunks stay together. Not shareable between threads; open one
/// stream per writer.
pub struct StreamWriter {
    store: Store,
    open: Option<ContainerBuilder>,
    /// Chunks decided new by this stream and not yet in a sealed container
    /// (readable meanwhile through the store's unsealed map).
    open_ids: HashSet<ChunkId>,
    /// Sealed containers this stream wrote or deduplicated against that must
    /// be durable before a flush returns.
    depends: HashSet<ContainerId>,
    stats: WriteStats,
    /// Garbage collection's copy-forward stream: stores every chunk it is
    /// given, and its containers take over the chunks' index entries.
    relocating: bool,
    protection: Protection,
    /// Whether this stream asked the shared index already: its first
    /// batch asks in full, later ones as a writer may be answered
    /// ([`crate::SharedIndex::locate_for_write`]).
    asked_shared: bool,
}

impl StreamWriter {
    pub(crate) fn new(store: Store, protection: Protection, relocating: bool) -> Self {
        StreamWriter {
            store,
            open: None,
            open_ids: HashSet::new(),
            depends: HashSet::new(),
            stats: WriteStats::default(),
            relocating,
            protection,
            asked_shared: false,
        }
    }

    /// How this stream's containers are stored.
    pub fn protection(&self) -> &Protection {
        &self.protection
    }

    pub fn stats(&self) -> WriteStats {
        self.stats
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn write_chunk(&mut self, data: Bytes) -> Result<ChunkId> {
        Ok(self.write_batch(std::slice::from_ref(&data))?[0])
    }

    /// [`StreamWriter::write_chunk`], stored as it is, never compressed:
    /// for chunks that are mostly hashes (recipe nodes), where compression
    /// costs CPU at every write for a few percent of their size.
    pub fn write_chunk_uncompressed(&mut self, data: Bytes) -> Result<ChunkId> {
        let chunks = std::slice::from_ref(&data);
        let ids = self.store.chunk_ids(chunks);
        let target = self.store.shared.settings.region_size;
        self.write_regions(chunks, &ids, target, Compression::None)?;
        Ok(ids[0])
    }

    /// Stores consecutive chunks and returns their ids, in order. Hashing and
    /// compression run on every core; chunks already stored are skipped.
    pub fn write_batch(&mut self, chunks: &[Bytes]) -> Result<Vec<ChunkId>> {
        let ids = self.store.chunk_ids(chunks);
        self.write_hashed(chunks, &ids)?;
        Ok(ids)
    }

    /// [`StreamWriter::write_batch`] with the new chunks compressed in
    /// regions of about `region_size` raw bytes instead of the store's
    /// setting (at most that): a file read at random (an image cut in
    /// fixed blocks) asks for small regions, so that a read decodes little
    /// more than the block it needs. Readers need nothing to know it: each
    /// index entry names its region's length.
    pub fn write_batch_in(&mut self, chunks: &[Bytes], region_size: usize) -> Result<Vec<ChunkId>> {
        let ids = self.store.chunk_ids(chunks);
        let target = region_size.min(self.store.shared.settings.region_size);
        self.write_regions(chunks, &ids, target, self.store.shared.settings.compression)?;
        Ok(ids)
    }

    /// [`StreamWriter::write_batch`] for chunks whose ids the caller already
    /// computed with [`Store::chunk_ids`] (a pipeline hashes the next batch
    /// while this one compresses).
    pub fn write_hashed(&mut self, chunks: &[Bytes], ids: &[ChunkId]) -> Result<()> {
        let target = self.store.shared.settings.region_size;
        self.write_regions(chunks, ids, target, self.store.shared.settings.compression)
    }

    fn write_regions(
        &mut self,
        chunks: &[Bytes],
        ids: &[ChunkId],
        target: usize,
        compression: Compression,
    ) -> Result<()> {
        assert_eq!(chunks.len(), ids.len(), "one id per chunk");
        if !self.relocating && self.store.has_shared_index() {
            // Chunks another client stored are referenced, not stored again.
            let asked: Vec<ChunkId> = ids
                .iter()
                .filter(|id| !self.open_ids.contains(*id))
                .copied()
                .collect();
            // A miss costs only a second copy: never fail the write.
            let asker = crate::shared::Asker::Writer {
                later_batch: self.asked_shared,
            };
            if let Err(e) = self.store.learn(&asked, asker) {
                tracing::warn!(error = %e, "chunks other clients stored could not be looked up; storing them again");
            }
            self.asked_shared = true;
        }
        let mut fresh = Vec::new();
        let mut unsealed = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            self.stats.chunks += 1;
            self.stats.bytes += chunks[i].len() as u64;
            if self.is_stored(id)? {
                continue;
            }
            self.open_ids.insert(*id);
            unsealed.push((*id, chunks[i].clone()));
            self.stats.new_chunks += 1;
            self.stats.new_bytes += chunks[i].len() as u64;
            fresh.push(i);
        }
        self.store.shared.unsealed.lock().extend(unsealed);
        let regions = group_regions(chunks, &fresh, target);
        let encoded: Vec<region::Encoded> = regions
            .par_iter()
            .map(|members| {
                let parts: Vec<&[u8]> = members.iter().map(|&i| &chunks[i][..]).collect();
                region::compress(&parts, compression)
            })
            .collect();
        for (members, enc) in regions.iter().zip(encoded) {
            let mut offset = 0u32;
            let meta: Vec<(ChunkId, u32, u32)> = members
                .iter()
                .map(|&i| {
                    let len = chunks[i].len() as u32;
                    offset += len;
                    (ids[i], offset - len, len)
                })
                .collect();
            let parts: Vec<&[u8]> = members.iter().map(|&i| &chunks[i][..]).collect();
            self.append_region(&enc, &parts, &meta)?;
        }
        Ok(())
    }

    /// Whether a chunk is already stored or on its way, recording which
    /// in-flight container the stream now depends on.
    fn is_stored(&mut self, id: &ChunkId) -> Result<bool> {
        if self.open_ids.contains(id) {
            return Ok(true);
        }
        if self.relocating {
            return Ok(false);
        }
        let want = &self.protection.policy;
        // Pending before the index: the I/O thread indexes a chunk before it
        // leaves `pending`, so this order never misses one in between.
        {
            let inflight = self.store.shared.inflight.lock();
            if let Some(c) = inflight.pending.get(id) {
                let strong = inflight
                    .containers
                    .get(c)
                    .is_none_or(|have| !needs_restore(have, want));
                if strong {
                    self.depends.insert(*c);
                    return Ok(true);
                }
            }
        }
        self.store.shared.dedup_lookup(id, want)
    }

    fn append_region(
        &mut self,
        enc: &region::Encoded,
        parts: &[&[u8]],
        meta: &[(ChunkId, u32, u32)],
    ) -> Result<()> {
        let limit = self.store.shared.settings.container_size;
        let stored_len = enc.stored_len() + ContainerBuilder::record_len(meta.len());
        if let Some(b) = &self.open {
            if !b.is_empty() && b.len() + stored_len > limit {
                self.seal()?;
            }
        }
        if self.open.is_none() {
            let id = self.store.allocate_container()?;
            let buf = self.store.shared.buffers.take(limit + (64 << 10));
            self.open = Some(ContainerBuilder::new(id, buf));
        }
        let builder = self.open.as_mut().expect("opened above");
        builder.append_region(|out| enc.write_to(parts, out), meta);
        self.stats.stored_bytes += stored_len as u64;
        Ok(())
    }

    /// Seals the open container and hands it to the I/O thread without
    /// waiting for it to be durable. Sealed containers waiting for the disk
    /// hold permits from the store's memory budget: when the budget is full,
    /// this blocks until the I/O thread has written enough (the I/O thread
    /// never waits for a writer, so this always ends).
    pub fn seal(&mut self) -> Result<()> {
        let Some(builder) = self.open.take() else {
            return Ok(());
        };
        if builder.is_empty() {
            self.store.shared.unindexed.lock().remove(&builder.id());
            return Ok(());
        }
        let mut sealed = builder.seal();
        sealed.relocated = self.relocating;
        sealed.protection = self.protection.clone();
        {
            let mut inflight = self.store.shared.inflight.lock();
            for (id, _) in &sealed.entries {
                inflight.pending.insert(*id, sealed.id);
                self.open_ids.remove(id);
            }
            inflight
                .containers
                .insert(sealed.id, self.protection.policy.clone());
        }
        // Only now that the chunks are pending may they leave the unsealed
        // map: a reader always finds them in one or the other.
        let mut unsealed = self.store.shared.unsealed.lock();
        for (id, _) in &sealed.entries {
            unsealed.remove(id);
        }
        drop(unsealed);
        self.depends.insert(sealed.id);
        let permit = self.store.shared.budget.acquire(sealed.bytes.len());
        self.store.io.send(IoJob {
            sealed,
            _permit: permit,
        })
    }

    /// Returns when every chunk this stream has written, or deduplicated
    /// against, is durable on the branch and in the index.
    pub fn flush(&mut self) -> Result<()> {
        self.start_flush()?.wait()
    }

    /// The first half of [`StreamWriter::flush`]: seals the open container
    /// and takes what the flush must wait for, so that the wait can run
    /// without the lock that guards the stream, which meanwhile takes new
    /// chunks (the file system's committer must not stall a writer for as
    /// long as the disk takes to drain).
    pub fn start_flush(&mut self) -> Result<Durable> {
        self.seal()?;
        Ok(Durable {
            store: self.store.clone(),
            containers: std::mem::take(&mut self.depends),
        })
    }
}

/// Groups consecutive new chunks into regions of about `target` raw
/// bytes; a chunk never spans regions.
fn group_regions(chunks: &[Bytes], fresh: &[usize], target: usize) -> Vec<Vec<usize>> {
    let mut regions: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for &i in fresh {
        match regions.last_mut() {
            Some(r) if size + chunks[i].len() <= target => r.push(i),
            _ => {
                regions.push(vec![i]);
                size = 0;
            }
        }
        size += chunks[i].len();
    }
    regions
}

/// Containers a flush waits for, from [`StreamWriter::start_flush`].
#[must_use = "a flush is complete only once waited for"]
pub struct Durable {
    store: Store,
    containers: HashSet<ContainerId>,
}

impl Durable {
    /// Returns when every container is durable on the branch and in the
    /// index, or names the first that failed.
    pub fn wait(self) -> Result<()> {
        let shared = &self.store.shared;
        let mut inflight = shared.inflight.lock();
        // A parked container is not waited for: it waits for space, which
        // only the caller's user can free.
        while self
            .containers
            .iter()
            .any(|c| inflight.containers.contains_key(c) && !inflight.parked.contains_key(c))
        {
            if inflight.io_dead {
                return Err(CasError::IoThreadDead);
            }
            shared.inflight_cv.wait(&mut inflight);
        }
        let failure = self
            .containers
            .iter()
            .find_map(|c| inflight.failed.get(c).map(|r| (*c, r.clone())));
        if let Some((container, source)) = failure {
            return Err(CasError::WriteFailed { container, source });
        }
        match self
            .containers
            .iter()
            .find_map(|c| inflight.parked.get(c).map(|r| (*c, r.clone())))
        {
            Some((container, reason)) => Err(crate::stall::no_space(container, &reason)),
            None => Ok(()),
        }
    }
}

impl Drop for StreamWriter {
    /// A stream dropped without a flush abandons its open container; its
    /// chunks stop being readable.
    fn drop(&mut self) {
        if let Some(builder) = &self.open {
            self.store.shared.unindexed.lock().remove(&builder.id());
        }
        if !self.open_ids.is_empty() {
            let mut unsealed = self.store.shared.unsealed.lock();
            for id in &self.open_ids {
                unsealed.remove(id);
            }
        }
    }
}

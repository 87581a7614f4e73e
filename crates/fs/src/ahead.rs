//! Chunk fetching for reads: the DRAM cache, read-ahead on a few threads,
//! and one fetch per chunk at a time.
//!
//! A sequential reader's next window is hinted to the branch (which starts
//! reading it in the background, as `cairn get` does) and cut into steps
//! that fetcher threads read concurrently (each step's regions coalesced
//! into few large reads by the store, then decompressed and verified on
//! every core), so the disk has the whole window in flight while the
//! reader consumes. A chunk being
//! fetched, by read-ahead or by a reader, is *pending*: a reader that needs
//! it waits for that fetch instead of reading it a second time.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ::cache::ChunkTier;
use bytes::Bytes;
use cas::{ChunkId, Store};
use crossbeam_channel::Sender;

use crate::cache::ChunkCache;
use crate::Result;

/// Threads reading ahead: enough that the disk always has a request queued
/// while another step is being decoded.
const FETCHERS: usize = 4;
/// Chunks per read-ahead step at least (4 MiB at the default 64 KiB
/// average); a step ends where a stored region does, so that no two steps
/// read the same region.
const STEP: usize = 64;
/// Bytes of a file around a random read whose chunks a miss admits to the
/// cache when the store decodes them anyway (DDFS admits the surrounding
/// 128 KiB: a random reader often comes back near where it was).
pub(crate) const AROUND: u64 = 128 << 10;
/// Steps queued for the fetchers at most: read-ahead is a hint, so with the
/// queue full a step is dropped, not waited for, however many files are
/// being read. The queue holds chunk ids; a step's bytes are reserved in
/// the cache when a fetcher takes it ([`ChunkCache::try_reserve`]).
const QUEUED: usize = 4 * FETCHERS;

/// What the chunk caches did, counted since the file system opened.
pub(crate) struct CacheFigures {
    /// Chunks read from the store (no cache had them).
    pub store_reads: u64,
    /// Chunk lookups the DRAM cache answered.
    pub dram_hits: u64,
    /// Chunks a reader waited for while another fetch read them.
    pub joined: u64,
    pub tier: Option<::cache::TierStats>,
}

struct Shared {
    store: Store,
    cache: Arc<ChunkCache>,
    /// The persistent tier below the DRAM cache, when configured.
    tier: Option<Arc<ChunkTier>>,
    /// Chunks read from the store (misses of every cache).
    store_reads: AtomicU64,
    /// Chunks a reader missed in DRAM but found being fetched (by
    /// read-ahead or another reader) and waited for, reading nothing.
    joined: AtomicU64,
    pending: Mutex<HashSet<ChunkId>>,
    /// Signalled whenever a fetch ends and its chunks stop being pending.
    fetched: Condvar,
}

/// Reads chunks for the file system; its threads end when it is dropped.
pub(crate) struct Fetcher {
    shared: Arc<Shared>,
    /// Steps: chunk ids and the bytes reading them holds at most.
    steps: Sender<(Vec<ChunkId>, u64)>,
}

impl Fetcher {
    pub(crate) fn start(
        store: Store,
        cache: Arc<ChunkCache>,
        tier: Option<Arc<ChunkTier>>,
    ) -> Fetcher {
        let shared = Arc::new(Shared {
            store,
            cache,
            tier,
            store_reads: AtomicU64::new(0),
            joined: AtomicU64::new(0),
            pending: Mutex::new(HashSet::new()),
            fetched: Condvar::new(),
        });
        let (steps, rx) = crossbeam_channel::bounded::<(Vec<ChunkId>, u64)>(QUEUED);
        for i in 0..FETCHERS {
            let rx = rx.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("fs-ahead-{i}"))
                .spawn(move || {
                    for (step, bytes) in rx {
                        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
                        // Past its share of the cache a step is dropped like
                        // one the full queue refused.
                        let Some(_held) = shared.cache.try_reserve(bytes) else {
                            shared.release(&step);
                            continue;
                        };
                        // A failed step is retried by the reader that needs
                        // it, which then sees the error.
                        let _ = shared.fetch_claimed(&step, &[]);
                    }
                })
                .expect("spawn a read-ahead thread");
        }
        Fetcher { shared, steps }
    }

    /// What the caches did so far, for `/metrics`.
    pub(crate) fn figures(&self) -> CacheFigures {
        let s = &self.shared;
        CacheFigures {
            store_reads: s.store_reads.load(Ordering::Relaxed),
            dram_hits: s.cache.hits(),
            joined: s.joined.load(Ordering::Relaxed),
            tier: s.tier.as_ref().map(|t| t.stats()),
        }
    }

    /// Lets the tier's writer finish what is queued (at unmount).
    pub(crate) fn close(&self) {
        if let Some(t) = &self.shared.tier {
            t.close();
        }
    }

    /// Starts fetching the chunks of `ids` that are neither cached nor
    /// pending, in steps on the fetcher threads.
    pub(crate) fn ahead(&self, ids: &[ChunkId]) {
        let claimed = self.shared.claim(ids);
        for (run, bytes) in self.shared.store.read_ahead_runs(&claimed, STEP) {
            // The receivers live as long as `self`, so only a full queue
            // refuses a step: its chunks stop being pending, and a reader
            // that needs them reads them itself.
            if let Err(e) = self.steps.try_send((claimed[run].to_vec(), bytes)) {
                self.shared.release(&e.into_inner().0);
            }
        }
    }

    /// A chunk if the DRAM cache holds it: no storage read, no wait.
    pub(crate) fn cached(&self, id: &ChunkId) -> Option<Bytes> {
        self.shared.cache.get(id)
    }

    /// Chunks by id, in order: from the cache, else from the fetch already
    /// reading them, else from the store (the missing ones together).
    pub(crate) fn get_many(&self, ids: &[ChunkId]) -> Result<Vec<Bytes>> {
        self.get_around(ids, &[])
    }

    /// [`Fetcher::get_many`] for a random reader: the chunks of `near` (at
    /// most [`AROUND`] bytes of the file around the read) that the store
    /// decodes anyway to read the missing ones enter the cache too. Its
    /// storage reads are of the random kind, which streams and background
    /// work make room for (`cas::qos`).
    pub(crate) fn get_around(&self, ids: &[ChunkId], near: &[ChunkId]) -> Result<Vec<Bytes>> {
        if near.is_empty() {
            return self.fetch_around(ids, near);
        }
        cas::qos::with_class(cas::qos::IoClass::Random, || self.fetch_around(ids, near))
    }

    fn fetch_around(&self, ids: &[ChunkId], near: &[ChunkId]) -> Result<Vec<Bytes>> {
        let shared = &self.shared;
        let mut out: Vec<Option<Bytes>> = ids.iter().map(|id| shared.cache.get(id)).collect();
        // A random reader's chunks belong in the tier also when DRAM held
        // them (brought in by a sequential pass, or as neighbours).
        if let (Some(tier), false) = (&shared.tier, near.is_empty()) {
            for (id, b) in ids.iter().zip(&out) {
                if let Some(b) = b {
                    tier.admit(*id, b.clone());
                }
            }
        }
        let missing: Vec<ChunkId> = ids
            .iter()
            .zip(&out)
            .filter(|(_, b)| b.is_none())
            .map(|(id, _)| *id)
            .collect();
        if missing.is_empty() {
            return Ok(out.into_iter().map(|b| b.expect("cached")).collect());
        }
        let mine = shared.claim(&missing);
        let mut got: HashMap<ChunkId, Bytes> = HashMap::new();
        if !mine.is_empty() {
            let near: Vec<ChunkId> = near
                .iter()
                .filter(|id| !shared.cache.contains(id))
                .copied()
                .collect();
            got.extend(
                mine.iter()
                    .copied()
                    .zip(shared.fetch_claimed(&mine, &near)?),
            );
        }
        let others: Vec<ChunkId> = missing
            .into_iter()
            .filter(|id| !got.contains_key(id))
            .collect();
        if !others.is_empty() {
            shared
                .joined
                .fetch_add(others.len() as u64, Ordering::Relaxed);
            let mut pending = shared.pending.lock();
            shared
                .fetched
                .wait_while(&mut pending, |p| others.iter().any(|id| p.contains(id)));
            drop(pending);
            // Fetched by someone else: in the cache, unless that fetch failed
            // or the chunk was evicted already; then it is read here.
            let mut again = Vec::new();
            for id in others {
                match shared.cache.get(&id) {
                    Some(b) => {
                        got.insert(id, b);
                    }
                    None => again.push(id),
                }
            }
            again.sort();
            again.dedup();
            if !again.is_empty() {
                shared
                    .store_reads
                    .fetch_add(again.len() as u64, Ordering::Relaxed);
                let chunks = shared.store.read_chunks(&again)?;
                for (id, b) in again.into_iter().zip(chunks) {
                    shared.cache.put(id, b.clone());
                    got.insert(id, b);
                }
            }
        }
        for (slot, id) in out.iter_mut().zip(ids) {
            if slot.is_none() {
                *slot = Some(got[id].clone());
            }
        }
        Ok(out.into_iter().map(|b| b.expect("filled above")).collect())
    }
}

/// What the cache keeps of a chunk read for a random reader (`near` not
/// empty): a copy. A random read's chunks share one small buffer, and a
/// chunk read again outlives its neighbours in the cache, so kept as is it
/// would pin the whole buffer while the cache counts only itself (a cache
/// of 256 MiB held 344 MB under random reads). A sequential step's chunks
/// enter and leave together and are kept without a copy.
fn cached(b: &Bytes, near: &[ChunkId]) -> Bytes {
    if near.is_empty() {
        b.clone()
    } else {
        Bytes::copy_from_slice(b)
    }
}

impl Shared {
    /// Marks the distinct ids that are neither cached nor pending as
    /// pending and returns them: the caller must fetch them.
    fn claim(&self, ids: &[ChunkId]) -> Vec<ChunkId> {
        let mut pending = self.pending.lock();
        ids.iter()
            .filter(|id| !self.cache.contains(id) && pending.insert(**id))
            .copied()
            .collect()
    }

    /// Claimed chunks stop being pending; their waiters wake.
    fn release(&self, ids: &[ChunkId]) {
        let mut pending = self.pending.lock();
        for id in ids {
            pending.remove(id);
        }
        drop(pending);
        self.fetched.notify_all();
    }

    /// Reads claimed chunks into the cache and releases them, also when the
    /// read fails. Each comes from the persistent tier if it holds it, else
    /// from the store. A random reader (`near` not empty) also gets the
    /// chunks of `near` the store decodes anyway, and everything it read
    /// from the store is admitted to the tier; a sequential reader's chunks
    /// are not (its read-ahead serves it, and would flood the tier).
    fn fetch_claimed(&self, ids: &[ChunkId], near: &[ChunkId]) -> Result<Vec<Bytes>> {
        let result = self.fetch_tiered(ids, near);
        self.release(ids);
        result
    }

    fn fetch_tiered(&self, ids: &[ChunkId], near: &[ChunkId]) -> Result<Vec<Bytes>> {
        let mut out: Vec<Option<Bytes>> = match &self.tier {
            Some(tier) => ids.iter().map(|id| tier.get(id)).collect(),
            None => vec![None; ids.len()],
        };
        let rest: Vec<ChunkId> = ids
            .iter()
            .zip(&out)
            .filter(|(_, b)| b.is_none())
            .map(|(id, _)| *id)
            .collect();
        if !rest.is_empty() {
            self.store_reads
                .fetch_add(rest.len() as u64, Ordering::Relaxed);
            let (chunks, extra) = if near.is_empty() {
                (self.store.read_chunks(&rest)?, Vec::new())
            } else {
                self.store.read_around(&rest, near)?
            };
            let admit = |id: ChunkId, b: &Bytes| {
                if let (Some(tier), false) = (&self.tier, near.is_empty()) {
                    tier.admit(id, b.clone());
                }
            };
            let mut read = rest.iter().zip(chunks);
            for slot in out.iter_mut().filter(|b| b.is_none()) {
                let (id, b) = read.next().expect("one chunk per id read");
                admit(*id, &b);
                *slot = Some(b);
            }
            for (id, b) in extra {
                admit(id, &b);
                self.cache.put(id, cached(&b, near));
            }
        }
        let out: Vec<Bytes> = out.into_iter().map(|b| b.expect("filled above")).collect();
        for (id, b) in ids.iter().zip(&out) {
            self.cache.put(*id, cached(b, near));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_readers_chunk_is_cached_apart_from_its_buffer() {
        let buffer = Bytes::from(vec![7u8; 128 << 10]);
        let chunk = buffer.slice(4096..8192);
        let near = [ChunkId::from_bytes([1; 32])];
        let random = cached(&chunk, &near);
        assert_eq!(random, chunk);
        assert_ne!(random.as_ptr(), chunk.as_ptr(), "a copy, not the buffer");
        let sequential = cached(&chunk, &[]);
        assert_eq!(sequential.as_ptr(), chunk.as_ptr(), "kept without a copy");
    }
}

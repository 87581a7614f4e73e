//! The DRAM chunk cache: verified chunk bytes by id, least recently used
//! out first, bounded in bytes.
//!
//! A random reader's chunks are kept as copies (see `ahead::cached`): they
//! share a small buffer with neighbours that leave the cache before them.
//! Other chunks are kept as the store returned them, without a copy: the store
//! guarantees that a chunk shares its buffer only with chunks of the same
//! read that use most of it (cas invariant 6), so what the cache holds is
//! about what it counts. Such chunks enter together and, read once, leave
//! together; a few kept long after their neighbours left hold their whole
//! buffer (a span of at most 8 MiB). Copying every chunk instead cost a
//! tenth of a cold read's CPU, half of it faulting in fresh pages.
//!
//! Read-ahead in flight counts toward the same capacity: a fetcher
//! reserves the bytes of its step (chunks decoded plus regions as stored)
//! before it reads them, the cache evicts to make room, and reservations
//! together are refused past half the capacity (the step is dropped, as
//! read-ahead is only a hint).
//!
//! Under memory pressure (the daemon's RSS near the sum of its budgets,
//! see [`ChunkCache::set_tight`]) the cache holds a quarter of its
//! capacity: it is the one budget that can give memory back at once, and
//! the load that fills the others (writes) gains little from it.
//!
//! Recipe nodes do not pass through here: an open file keeps its whole
//! extent list (its fast range map), so streaming data cannot evict the
//! metadata a read needs (HydraFS's concern behind its weighted LRU).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use cas::ChunkId;
use lru::LruCache;

pub struct ChunkCache {
    inner: Mutex<Inner>,
    capacity: usize,
    /// Memory is tight: hold a quarter of `capacity`.
    tight: AtomicBool,
    /// Lookups that found their chunk (`/metrics`).
    hits: AtomicU64,
}

struct Inner {
    lru: LruCache<ChunkId, Bytes>,
    /// Bytes counted: the entries' charges plus `reserved`.
    bytes: usize,
    /// Bytes of the reservations held now.
    reserved: usize,
}

impl Inner {
    /// Drops least recently used entries until the count fits `capacity`
    /// (or nothing is left to drop but reservations).
    fn evict(&mut self, capacity: usize) {
        while self.bytes > capacity {
            match self.lru.pop_lru() {
                Some((_, old)) => self.bytes -= charge(&old),
                None => break,
            }
        }
    }
}

/// Bytes held against a [`ChunkCache`] for chunks on their way in;
/// returned on drop.
pub(crate) struct Reservation<'a> {
    cache: &'a ChunkCache,
    bytes: usize,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.cache.inner.lock();
        inner.bytes -= self.bytes;
        inner.reserved -= self.bytes;
    }
}

/// What an entry costs besides its bytes (id, handle, list links, table
/// slot), so that small chunks are not undercounted.
const ENTRY_OVERHEAD: usize = 128;

fn charge(data: &Bytes) -> usize {
    data.len() + ENTRY_OVERHEAD
}

impl ChunkCache {
    pub fn new(capacity: usize) -> Self {
        ChunkCache {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
                reserved: 0,
            }),
            capacity,
            tight: AtomicBool::new(false),
            hits: AtomicU64::new(0),
        }
    }

    /// What the cache may hold now: its capacity, or a quarter of it while
    /// memory is tight.
    fn limit(&self) -> usize {
        if self.tight.load(Ordering::Relaxed) {
            self.capacity / 4
        } else {
            self.capacity
        }
    }

    /// Memory is tight (or no longer): while it is, the cache holds a
    /// quarter of its capacity, and evicts down to that at once.
    pub fn set_tight(&self, tight: bool) {
        self.tight.store(tight, Ordering::Relaxed);
        let limit = self.limit();
        self.inner.lock().evict(limit);
    }

    pub fn get(&self, id: &ChunkId) -> Option<Bytes> {
        let found = self.inner.lock().lru.get(id).cloned();
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Lookups ([`ChunkCache::get`]) that found their chunk so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn contains(&self, id: &ChunkId) -> bool {
        self.inner.lock().lru.contains(id)
    }

    pub fn put(&self, id: ChunkId, data: Bytes) {
        let limit = self.limit();
        if data.len() > limit {
            return;
        }
        let mut inner = self.inner.lock();
        inner.bytes += charge(&data);
        if let Some(old) = inner.lru.put(id, data) {
            inner.bytes -= charge(&old);
        }
        inner.evict(limit);
    }

    /// Counts `bytes` about to be read (a read-ahead step) toward the
    /// capacity until the reservation is dropped, evicting entries to make
    /// room; `None` if reservations would then hold more than half the
    /// capacity.
    pub(crate) fn try_reserve(&self, bytes: usize) -> Option<Reservation<'_>> {
        let limit = self.limit();
        let mut inner = self.inner.lock();
        if inner.reserved + bytes > limit / 2 {
            return None;
        }
        inner.reserved += bytes;
        inner.bytes += bytes;
        inner.evict(limit);
        Some(Reservation { cache: self, bytes })
    }

    /// Bytes counted: the entries and the reservations held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ChunkId {
        ChunkId::from_bytes([n; 32])
    }

    #[test]
    fn evicts_least_recently_used_within_capacity() {
        let c = ChunkCache::new(2 * (100 + ENTRY_OVERHEAD) + 50);
        c.put(id(1), Bytes::from(vec![1; 100]));
        c.put(id(2), Bytes::from(vec![2; 100]));
        assert!(c.get(&id(1)).is_some());
        c.put(id(3), Bytes::from(vec![3; 100]));
        assert!(c.contains(&id(1)) && c.contains(&id(3)));
        assert!(!c.contains(&id(2)), "2 was least recently used");
        assert_eq!(c.hits(), 1, "contains() is no lookup");
        assert!(c.get(&id(2)).is_none());
        assert_eq!(c.hits(), 1);
        assert!(c.bytes() <= 2 * (100 + ENTRY_OVERHEAD) + 50);
    }

    #[test]
    fn a_tight_cache_holds_a_quarter_until_relaxed() {
        let entry = 100 + ENTRY_OVERHEAD;
        let c = ChunkCache::new(8 * entry);
        for n in 1..=8 {
            c.put(id(n), Bytes::from(vec![n; 100]));
        }
        assert_eq!(c.bytes(), 8 * entry);
        c.set_tight(true);
        assert_eq!(c.bytes(), 2 * entry, "evicted to a quarter at once");
        assert!(c.contains(&id(7)) && c.contains(&id(8)), "the newest stay");
        c.put(id(9), Bytes::from(vec![9; 100]));
        assert_eq!(c.bytes(), 2 * entry, "puts stay within the quarter");
        assert!(c.try_reserve(entry + 1).is_none(), "half of the quarter");
        c.set_tight(false);
        for n in 10..=15 {
            c.put(id(n), Bytes::from(vec![n; 100]));
        }
        assert_eq!(c.bytes(), 8 * entry, "the whole capacity again");
    }

    #[test]
    fn a_reservation_evicts_counts_and_returns_its_bytes() {
        let entry = 100 + ENTRY_OVERHEAD;
        let c = ChunkCache::new(4 * entry);
        for n in 1..=4 {
            c.put(id(n), Bytes::from(vec![n; 100]));
        }
        let held = c.try_reserve(2 * entry).expect("half the capacity fits");
        assert_eq!(c.bytes(), 4 * entry, "two entries made room");
        assert!(!c.contains(&id(1)) && !c.contains(&id(2)));
        assert!(c.contains(&id(3)) && c.contains(&id(4)));
        assert!(c.try_reserve(1).is_none(), "past half the capacity");
        drop(held);
        assert_eq!(c.bytes(), 2 * entry, "only the entries are left");
        let again = c.try_reserve(2 * entry).expect("room again");
        drop(again);
        c.put(id(3), Bytes::new());
        c.put(id(4), Bytes::new());
        assert_eq!(c.bytes(), 2 * ENTRY_OVERHEAD);
    }
}

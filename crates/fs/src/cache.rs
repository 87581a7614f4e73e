//! The DRAM chunk cache: verified chunk bytes by id, least recently used
//! out first, bounded in bytes.
//!
//! Chunks are kept as the store returned them, without a copy: the store
//! guarantees that a chunk shares its buffer only with chunks of the same
//! read that use most of it (cas invariant 6), so what the cache holds is
//! about what it counts. Such chunks enter together and, read once, leave
//! together; a few kept long after their neighbours left hold their whole
//! buffer (a span of at most 8 MiB). Copying every chunk instead cost a
//! tenth of a cold read's CPU, half of it faulting in fresh pages.
//!
//! Recipe nodes do not pass through here: an open file keeps its whole
//! extent list (its fast range map), so streaming data cannot evict the
//! metadata a read needs (HydraFS's concern behind its weighted LRU).

use parking_lot::Mutex;

use bytes::Bytes;
use cas::ChunkId;
use lru::LruCache;

pub struct ChunkCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

struct Inner {
    lru: LruCache<ChunkId, Bytes>,
    bytes: usize,
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
            }),
            capacity,
        }
    }

    pub fn get(&self, id: &ChunkId) -> Option<Bytes> {
        self.inner.lock().lru.get(id).cloned()
    }

    pub fn contains(&self, id: &ChunkId) -> bool {
        self.inner.lock().lru.contains(id)
    }

    pub fn put(&self, id: ChunkId, data: Bytes) {
        if data.len() > self.capacity {
            return;
        }
        let mut inner = self.inner.lock();
        inner.bytes += charge(&data);
        if let Some(old) = inner.lru.put(id, data) {
            inner.bytes -= charge(&old);
        }
        while inner.bytes > self.capacity {
            match inner.lru.pop_lru() {
                Some((_, old)) => inner.bytes -= charge(&old),
                None => break,
            }
        }
    }

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
        assert!(c.bytes() <= 2 * (100 + ENTRY_OVERHEAD) + 50);
    }
}

//! The compact in-RAM fingerprint index.
//!
//! A set of 4-byte short fingerprints, one per indexed chunk (DDFS keeps a
//! short fingerprint per chunk in its fast tier for the same reason). It
//! answers "might this chunk already be stored?" without touching the disk:
//! a miss is certain (the chunk is new), a hit is confirmed against the full
//! fingerprint in the persistent index. With a 32-bit prefix, a new chunk
//! costs a needless index lookup with probability (chunks / 2^32): 0.05% at
//! two million chunks. Chunks whose short fingerprints collide share one
//! entry, which is fine because a hit is always confirmed.

use std::hash::{BuildHasherDefault, Hasher};

use crate::id::ShortFp;

/// Short fingerprints are already uniformly distributed; one multiply spreads
/// them into the high bits hashbrown uses for its control bytes.
#[derive(Default)]
pub struct SpreadHasher(u64);

impl Hasher for SpreadHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Default)]
pub struct CompactIndex {
    set: hashbrown::HashSet<u32, BuildHasherDefault<SpreadHasher>>,
    chunks: u64,
}

impl CompactIndex {
    pub fn insert(&mut self, fp: ShortFp) {
        self.set.insert(fp.0);
        self.chunks += 1;
    }

    /// Counts `n` chunks as gone. Their short fingerprints stay: another
    /// chunk may share one, and a stale entry only costs a needless lookup
    /// (with probability stale entries / 2^32) until the next open.
    pub fn forget(&mut self, n: u64) {
        self.chunks = self.chunks.saturating_sub(n);
    }

    pub fn may_contain(&self, fp: ShortFp) -> bool {
        self.set.contains(&fp.0)
    }

    /// Heap bytes the set occupies.
    pub fn ram_bytes(&self) -> usize {
        self.set.allocation_size()
    }

    /// Heap bytes per indexed chunk (0 when empty).
    pub fn bytes_per_chunk(&self) -> f64 {
        if self.chunks == 0 {
            0.0
        } else {
            self.ram_bytes() as f64 / self.chunks as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_and_size() {
        let mut c = CompactIndex::default();
        for i in 0..100_000u32 {
            c.insert(ShortFp(i.wrapping_mul(2_654_435_761)));
        }
        assert!(c.may_contain(ShortFp(5u32.wrapping_mul(2_654_435_761))));
        let misses = (0..10_000u32)
            .filter(|i| c.may_contain(ShortFp(i.wrapping_mul(2_654_435_761) ^ 0x8000_0001)))
            .count();
        assert!(misses < 10, "{misses}");
        assert!(c.bytes_per_chunk() <= 16.0, "{}", c.bytes_per_chunk());
    }
}

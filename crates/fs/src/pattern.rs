//! Access-pattern detection (DDFS on nonsequential workloads): how each
//! region of an open file is being written, from the offsets and lengths
//! of its requests alone.
//!
//! A request is *sequential* when it starts where a recent request ended,
//! or close enough to the furthest end seen that it is one of a batch of
//! parallel requests the kernel sent together and FUSE delivered out of
//! order; *monotonic* when it starts further on, past a gap; *random*
//! when it jumps back. Of a region's last [`HISTORY`] requests: mostly
//! sequential ones make it sequential; else an eighth of them jumping back
//! makes it random (half of a random stream's jumps go forward), and fewer
//! monotonic. After a jump back the region follows the new position, so a
//! stream that starts over is sequential again at once.
//!
//! Bounded: a file keeps [`REGIONS`] regions (the least recently used one
//! is forgotten), each a fixed few words, and the [`Tracker`] keeps
//! [`TRACKED_FILES`] files. Pure logic: no clock, no I/O.

use std::num::NonZeroUsize;

use lru::LruCache;
use meta::InodeId;

/// How a region of a file is being accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Sequential,
    /// Increasing offsets with gaps between them.
    Monotonic,
    Random,
}

/// Bytes of a file whose requests are judged together (a VM image's log
/// and its random table updates fall in different regions).
const REGION_BYTES: u64 = 64 << 20;
/// Regions tracked per file.
pub const REGIONS: usize = 8;
/// Recent request ends remembered per region.
const ENDS: usize = 8;
/// Requests a region's pattern is judged over.
pub const HISTORY: u32 = 32;
/// Requests judged before a region has a pattern.
pub const MIN_SAMPLES: u32 = 16;
/// How many requests of a parallel batch may arrive out of order (the
/// kernel keeps a dozen or so FUSE requests in flight).
const REORDERED: u64 = 16;
/// Files tracked at once.
pub const TRACKED_FILES: usize = 1024;

#[derive(Debug, Clone, Default)]
struct Region {
    index: u64,
    ends: [u64; ENDS],
    next: usize,
    furthest: u64,
    /// One bit per judged request, newest lowest: random, monotonic.
    random: u32,
    monotonic: u32,
    judged: u32,
    used: u64,
}

impl Region {
    fn judge(&mut self, offset: u64, len: u64) {
        // Parallel requests are about as long as each other; the window
        // holds a batch of them, and at least 64 KiB.
        let window = (REORDERED * len.max(1)).clamp(64 << 10, 8 << 20);
        let kind = if self.used == 0 {
            None
        } else if self.ends.contains(&offset) || offset.abs_diff(self.furthest) <= window {
            Some(Access::Sequential)
        } else if offset > self.furthest {
            Some(Access::Monotonic)
        } else {
            Some(Access::Random)
        };
        if let Some(kind) = kind {
            self.random = (self.random << 1) | u32::from(kind == Access::Random);
            self.monotonic = (self.monotonic << 1) | u32::from(kind == Access::Monotonic);
            self.judged = (self.judged + 1).min(HISTORY);
        }
        let end = offset + len;
        self.ends[self.next] = end;
        self.next = (self.next + 1) % ENDS;
        // A jump back starts a new stream: the furthest end follows it.
        self.furthest = if kind == Some(Access::Random) {
            end
        } else {
            self.furthest.max(end)
        };
    }

    fn access(&self) -> Option<Access> {
        if self.judged < MIN_SAMPLES {
            return None;
        }
        let mask = if HISTORY == 32 {
            u32::MAX
        } else {
            (1 << HISTORY) - 1
        };
        let n = self.judged;
        let random = (self.random & mask).count_ones().min(n);
        let monotonic = (self.monotonic & mask).count_ones().min(n);
        // Half of a random stream's jumps go forward: a few jumps back
        // among many gaps already make it random, and a monotonic stream
        // that starts over now and then stays monotonic.
        Some(if 2 * (random + monotonic) < n {
            Access::Sequential
        } else if 8 * random >= n {
            Access::Random
        } else {
            Access::Monotonic
        })
    }
}

/// The regions of one file.
#[derive(Debug, Clone, Default)]
pub struct FilePattern {
    regions: Vec<Region>,
    clock: u64,
}

impl FilePattern {
    /// Judges a request and returns the pattern of its region (`None`
    /// until it has seen [`MIN_SAMPLES`] requests).
    pub fn observe(&mut self, offset: u64, len: u64) -> Option<Access> {
        self.clock += 1;
        let index = offset / REGION_BYTES;
        let i = match self.regions.iter().position(|r| r.index == index) {
            Some(i) => i,
            None if self.regions.len() < REGIONS => {
                self.regions.push(Region::default());
                self.regions.len() - 1
            }
            None => {
                let (i, _) = self
                    .regions
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, r)| r.used)
                    .expect("full");
                self.regions[i] = Region::default();
                i
            }
        };
        let r = &mut self.regions[i];
        r.index = index;
        r.judge(offset, len);
        r.used = self.clock;
        r.access()
    }
}

/// The patterns of the files written most recently.
pub struct Tracker {
    files: LruCache<InodeId, FilePattern>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            files: LruCache::new(NonZeroUsize::new(TRACKED_FILES).expect("nonzero")),
        }
    }
}

impl Tracker {
    /// See [`FilePattern::observe`].
    pub fn observe(&mut self, ino: InodeId, offset: u64, len: u64) -> Option<Access> {
        self.files
            .get_or_insert_mut(ino, FilePattern::default)
            .observe(offset, len)
    }

    /// Forgets a file (switched, so no longer watched).
    pub fn forget(&mut self, ino: InodeId) {
        self.files.pop(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn last(stream: impl IntoIterator<Item = (u64, u64)>) -> Option<Access> {
        let mut p = FilePattern::default();
        let mut out = None;
        for (o, l) in stream {
            out = p.observe(o, l);
        }
        out
    }

    /// A small deterministic generator (xorshift), for offsets.
    fn offsets(seed: u64, n: usize, span: u64) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % span) & !4095
            })
            .collect()
    }

    #[test]
    fn synthetic_streams_are_told_apart() {
        let seq = (0..100).map(|i| (i * 131_072, 131_072));
        assert_eq!(last(seq), Some(Access::Sequential));
        let mono = (0..100).map(|i| (i * (1 << 20), 4096));
        assert_eq!(last(mono), Some(Access::Monotonic));
        let random = offsets(7, 100, 60 << 20).into_iter().map(|o| (o, 4096));
        assert_eq!(last(random), Some(Access::Random));
        // Too few requests to say.
        assert_eq!(last((0..5).map(|i| (i * 4096, 4096))), None);
    }

    #[test]
    fn regions_are_judged_apart_and_bounded() {
        let mut p = FilePattern::default();
        // Region 0 is appended to, region 3 written at random, interleaved.
        let random = offsets(11, 200, 60 << 20);
        let (mut seq, mut rnd) = (None, None);
        for (i, o) in random.into_iter().enumerate() {
            seq = p.observe(i as u64 * 4096, 4096);
            rnd = p.observe(3 * REGION_BYTES + o, 4096);
        }
        assert_eq!(seq, Some(Access::Sequential));
        assert_eq!(rnd, Some(Access::Random));
        for r in 0..100 {
            p.observe(r * REGION_BYTES, 4096);
        }
        assert_eq!(p.regions.len(), REGIONS);
    }

    #[test]
    fn the_tracker_keeps_a_bounded_number_of_files() {
        let mut t = Tracker::default();
        for i in 0..(TRACKED_FILES as u64 + 50) {
            t.observe(InodeId(i + 2), 0, 4096);
        }
        assert_eq!(t.files.len(), TRACKED_FILES);
    }

    proptest! {
        /// A sequential stream whose parallel batches (of up to a dozen
        /// requests) arrive in any order is never taken for random.
        #[test]
        fn reordered_parallel_requests_are_not_random(
            len_kib in prop_oneof![Just(4u64), Just(128), Just(1024)],
            batch in 1usize..12,
            swaps in proptest::collection::vec((0usize..12, 0usize..12), 0..400),
        ) {
            let len = len_kib << 10;
            let mut offsets: Vec<u64> = (0..200).map(|i| i * len).collect();
            for (k, (a, b)) in swaps.into_iter().enumerate() {
                let base = (k % (200 / batch)) * batch;
                let (a, b) = (base + a % batch, base + b % batch);
                offsets.swap(a, b);
            }
            let mut p = FilePattern::default();
            for o in offsets {
                let got = p.observe(o, len);
                prop_assert!(got != Some(Access::Random), "taken for random at {o}");
            }
        }

        /// Uniformly random small writes over a large region are random.
        #[test]
        fn scattered_writes_are_random(seed in any::<u64>()) {
            let stream = offsets(seed, 64, REGION_BYTES).into_iter().map(|o| (o, 4096));
            prop_assert_eq!(last(stream), Some(Access::Random));
        }
    }
}

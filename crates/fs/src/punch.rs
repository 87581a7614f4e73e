//! Zeroing a range of an open file (`fallocate`'s `PUNCH_HOLE` and
//! `ZERO_RANGE`) by surgery on its extent list: data chunks wholly inside
//! the range become holes, dirty bytes inside it are dropped, and only a
//! chunk that straddles an edge of the range is rewritten, at once and
//! with its boundaries kept (its covered part zeroed; nothing is re-cut,
//! so the hole is never turned back into chunks of zeros). The cost is at
//! most two chunks, whatever the range's length: guests discard freed
//! blocks this way, often.

use std::ops::Range;

use cas::ChunkId;
use meta::Timestamp;
use recipe::Extent;

use crate::file::FileState;
use crate::Result;

/// Stores a copy of a chunk with the given bytes of it zeroed; its id.
pub type Rewrite<'a> = dyn FnMut(&ChunkId, Range<usize>) -> Result<ChunkId> + 'a;

impl FileState {
    /// Makes `lo..hi` (clipped to the size) read as zeros, keeping the
    /// size; an edge chunk is replaced by what `rewrite` stores. The
    /// caller waits for any apply in flight first. On an error nothing
    /// has changed.
    pub fn punch(
        &mut self,
        lo: u64,
        hi: u64,
        now: Timestamp,
        rewrite: &mut Rewrite<'_>,
    ) -> Result<()> {
        assert!(!self.busy(), "punch waits for the apply in flight");
        let hi = hi.min(self.size);
        if lo >= hi {
            return Ok(());
        }
        let first = self.extents.partition_point(|e| e.offset + e.len <= lo);
        // The edge chunks are stored first, so that a failure changes
        // nothing.
        let mut fresh: Vec<(usize, Option<ChunkId>)> = Vec::new();
        let mut last = first;
        for (i, e) in self.extents.iter().enumerate().skip(first) {
            if e.offset >= hi {
                break;
            }
            last = i + 1;
            let Some(id) = &e.chunk else {
                continue;
            };
            let end = e.offset + e.len;
            if lo <= e.offset && end <= hi {
                fresh.push((i, None));
            } else {
                let from = (lo.max(e.offset) - e.offset) as usize;
                let to = (hi.min(end) - e.offset) as usize;
                fresh.push((i, Some(rewrite(id, from..to)?)));
            }
        }
        self.touched.everything();
        for (i, id) in fresh {
            self.extents[i].chunk = id;
        }
        merge_holes(&mut self.extents, first.saturating_sub(1), last + 1);
        self.drop_dirty(lo, hi);
        self.modified(now);
        Ok(())
    }

    /// Drops the dirty bytes inside `lo..hi`; a run across an edge keeps
    /// its part outside.
    fn drop_dirty(&mut self, lo: u64, hi: u64) {
        let from = self.dirty.range(..lo).next_back().map_or(lo, |(&s, _)| s);
        let touched: Vec<u64> = self.dirty.range(from..hi).map(|(&s, _)| s).collect();
        for s in touched {
            let run = self.dirty.remove(&s).expect("listed");
            let end = s + run.len() as u64;
            if end <= lo {
                self.dirty.insert(s, run);
                continue;
            }
            if end > hi {
                self.dirty.insert(hi, run[(hi - s) as usize..].to_vec());
            }
            if s < lo {
                let mut head = run;
                head.truncate((lo - s) as usize);
                self.dirty.insert(s, head);
            }
        }
        self.dirty_bytes = self.dirty.values().map(Vec::len).sum();
    }
}

/// Merges neighbouring holes among `extents[a..b]` (clipped) into one, so
/// that repeated punches keep the extent list short.
fn merge_holes(extents: &mut Vec<Extent>, a: usize, b: usize) {
    let b = b.min(extents.len());
    if a >= b {
        return;
    }
    let mut merged: Vec<Extent> = Vec::with_capacity(b - a);
    for e in extents.drain(a..b) {
        match merged.last_mut() {
            Some(m) if m.chunk.is_none() && e.chunk.is_none() => m.len += e.len,
            _ => merged.push(e),
        }
    }
    extents.splice(a..a, merged);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use branch::LocalDir;
    use bytes::Bytes;
    use cas::{ChunkId, RepoKey, Store, StoreSettings};
    use chunking::ChunkerParams;
    use meta::{Content, InodeId};
    use proptest::prelude::*;

    use super::*;
    use crate::cache::ChunkCache;
    use crate::Result;

    const SMALL: ChunkerParams = ChunkerParams::ContentDefined {
        min: 256,
        avg: 1024,
        max: 4096,
    };

    fn store(dir: &std::path::Path) -> Store {
        let (b, _) = LocalDir::open("t", dir.join("b")).unwrap();
        Store::open(
            Arc::new(b),
            dir,
            RepoKey::generate(),
            StoreSettings::default(),
        )
        .unwrap()
    }

    fn data(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| ((i ^ seed).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    /// What `fallocate` does for an edge chunk, through `w`.
    fn rewrite<'a>(
        w: &'a mut cas::StreamWriter,
    ) -> impl FnMut(&ChunkId, std::ops::Range<usize>) -> Result<ChunkId> + 'a {
        move |id, range| {
            let mut b = w.store().read_chunk(id)?.to_vec();
            b[range].fill(0);
            Ok(w.write_batch(&[Bytes::from(b)])?[0])
        }
    }

    fn read_all(f: &FileState, s: &Store) -> Vec<u8> {
        let read = |ids: &[ChunkId]| -> Result<Vec<Bytes>> {
            ids.iter().map(|id| Ok(s.read_chunk(id)?)).collect()
        };
        f.read(0, f.size, &read).unwrap()
    }

    #[test]
    fn whole_chunks_inside_become_holes_and_only_edges_are_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(1 << 20);
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        let mut model = data(200_000, 7);
        f.write(0, &model, Timestamp::default());
        f.apply(true, SMALL, &mut w, &cache).unwrap();
        let (lo, hi) = (50_123, 150_321);
        let new_before = w.stats().new_bytes;
        f.punch(lo, hi, Timestamp::default(), &mut rewrite(&mut w))
            .unwrap();
        model[lo as usize..hi as usize].fill(0);
        // The punch stores the two edge chunks, at most, and nothing else.
        assert!(w.stats().new_bytes - new_before <= 2 * 4096);
        assert_eq!(f.dirty_bytes, 0);
        assert!(read_all(&f, &s) == model);
        let holes: Vec<&Extent> = f.extents.iter().filter(|e| e.chunk.is_none()).collect();
        assert_eq!(holes.len(), 1, "one merged hole: {holes:?}");
        assert!(holes[0].offset >= lo && holes[0].offset + holes[0].len <= hi);
        f.apply(true, SMALL, &mut w, &cache).unwrap();
        assert!(read_all(&f, &s) == model);
        // Of the punched range, only the parts of the edge chunks are
        // data, also after an apply.
        let data_inside: u64 = f
            .extents
            .iter()
            .filter(|e| e.chunk.is_some())
            .map(|e| (e.offset + e.len).min(hi).saturating_sub(e.offset.max(lo)))
            .sum();
        assert!(data_inside <= 2 * 4096, "{data_inside} bytes");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Write(u64, Vec<u8>),
        Punch(u64, u64),
        Apply(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..30_000, proptest::collection::vec(any::<u8>(), 1..6000)).prop_map(|(o, d)| Op::Write(o, d)),
            3 => (0u64..35_000, 1u64..20_000).prop_map(|(o, l)| Op::Punch(o, o + l)),
            2 => any::<bool>().prop_map(Op::Apply),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn punches_writes_and_applies_match_a_byte_model(ops in proptest::collection::vec(op(), 1..30)) {
            let dir = tempfile::tempdir().unwrap();
            let s = store(dir.path());
            let mut w = s.stream();
            let cache = ChunkCache::new(1 << 20);
            let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
            let mut model: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Write(o, d) => {
                        f.write(o, &d, Timestamp::default());
                        let end = o as usize + d.len();
                        if model.len() < end { model.resize(end, 0); }
                        model[o as usize..end].copy_from_slice(&d);
                    }
                    Op::Punch(lo, hi) => {
                        f.punch(lo, hi, Timestamp::default(), &mut rewrite(&mut w)).unwrap();
                        let hi = (hi as usize).min(model.len());
                        if (lo as usize) < hi { model[lo as usize..hi].fill(0); }
                    }
                    Op::Apply(whole) => f.apply(whole, SMALL, &mut w, &cache).unwrap(),
                }
                prop_assert_eq!(f.size, model.len() as u64);
                prop_assert!(read_all(&f, &s) == model);
                let mut end = 0;
                for e in &f.extents {
                    prop_assert_eq!(e.offset, end, "extents are contiguous");
                    end += e.len;
                }
            }
        }
    }
}

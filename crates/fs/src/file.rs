//! The state of one open file: its committed extents, the dirty bytes
//! written since, and the write stream its new chunks go to.
//!
//! Writes land in `dirty` (a map of non-overlapping byte runs). When a file
//! holds too much dirty data, or is flushed, the dirty runs are *applied*:
//! each cluster of nearby runs, together with the chunks it touches, is
//! re-chunked and written behind to the store, and the extent list is
//! spliced. Only the chunks around a change are rewritten; an overwrite in
//! the middle of a 4 GiB file re-stores a few hundred KiB.
//!
//! A file in fixed chunking mode ([`Chunking::Fixed`]) re-chunks less: each
//! dirty run is widened to whole blocks (absolute multiples of the block
//! size, clipped to the file's size), then only to the edges of the
//! extents those blocks overlap, and cut at block boundaries, so an aligned
//! overwrite re-stores exactly the blocks it covers and reads none of them.
//! Extents cut before a switch to fixed mode (content-defined ones) are
//! read as they are and replaced block by block as they are overwritten. A
//! block of zeros is stored as a hole.

use parking_lot::Condvar;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use cas::{ChunkId, Store, StreamWriter};
use chunking::ChunkerParams;
use meta::{Content, InodeId, Timestamp};
use recipe::Extent;

use crate::cache::ChunkCache;
use crate::chunkmode::{BlockSize, Chunking};
use crate::cut::{cut_fixed, cut_segments};
use crate::{FsError, Result};

/// Dirty runs closer than this are applied together (re-reading the bytes
/// between them costs less than splitting chunks twice).
const CLUSTER_GAP: u64 = 1 << 20;
/// Length past which appends to a dirty run start a new run (small under
/// test, so that the model test's files span many runs).
const RUN_MAX: usize = if cfg!(test) { 2048 } else { 1 << 20 };

pub struct FileState {
    pub ino: InodeId,
    pub size: u64,
    /// The content as last recorded in the metadata engine.
    pub content: Content,
    /// While the file is open and its writes were recorded by the committer
    /// (not by a close or fsync): the file as of its last close or fsync,
    /// which is what a version takes of it (see `history`).
    pub left_whole: Option<crate::tree::LeftWhole>,
    /// Bytes of stored extents replaced or cut away since the content was
    /// last recorded (see `Fs::released_bytes`).
    pub released: u64,
    /// Data chunks and holes covering `0..extents_end()`; beyond that, up
    /// to `size`, bytes are dirty or zeros.
    pub extents: Vec<Extent>,
    pub dirty: BTreeMap<u64, Vec<u8>>,
    /// Bytes in `dirty`.
    pub dirty_bytes: usize,
    /// Regions of an apply in flight (their dirty bytes and the old bytes
    /// they re-chunk), read under `dirty` until the apply is spliced in.
    pub in_flight: Vec<(u64, Bytes)>,
    /// Signalled when an apply in flight is spliced in or abandoned.
    pub settled: Arc<Condvar>,
    /// Why the last apply in the background failed (its bytes are dirty
    /// again); told to the next writer.
    pub failed: Option<FsError>,
    pub writer: Option<StreamWriter>,
    /// Content or size differ from what the metadata engine holds.
    pub changed: bool,
    /// When the content last changed, while that change is not recorded
    /// in the metadata engine (it is recorded with it).
    pub mtime: Option<Timestamp>,
    /// `mtime` was set by a program after the last write (`utimensat`), not
    /// by the write itself: recorded as the file's mtime, not its ctime.
    pub mtime_set: bool,
    pub handles: u32,
    /// How changed regions are cut into chunks.
    pub chunking: Chunking,
    /// The mode was chosen by nobody (no xattr, no rule): the detector may
    /// switch the file to fixed chunking.
    pub chunking_auto: bool,
    /// What overwrites of stored data have re-stored so far, for the judge
    /// that switches an auto file to fixed blocks (see [`crate::coverage`]).
    pub overwrites: crate::coverage::Overwrites,
    /// The judge switched the file to fixed blocks in an apply; the switch
    /// is not yet recorded in its xattr.
    pub switched: bool,
    /// `chunking` was looked up (on the first write or apply: a file only
    /// read never needs it, and the rules may walk its path).
    pub chunking_known: bool,
    /// Where the last read ended and how far read-ahead has been asked for.
    pub read_next: u64,
    pub read_ahead_until: u64,
    /// How the file is being read: a random reader's misses bring their
    /// neighbours into the caches (see `ahead`), a sequential one's do not.
    pub read_pattern: crate::pattern::FilePattern,
    /// The nodes of the recipe tree last stored for this file, reused by
    /// the next one while `content` is still that tree (see
    /// [`recipe::NodeMemo`]).
    pub memo: Option<recipe::NodeMemo>,
    /// Bytes whose extents changed since `memo`'s tree was stored: every
    /// change to `extents` is noted here.
    pub touched: crate::changed::Changed,
    /// The changes an fsync may log instead of storing chunks (see
    /// [`crate::intent`]).
    pub(crate) intent: crate::intent::Intent,
}

impl FileState {
    pub fn new(ino: InodeId, size: u64, content: Content, extents: Vec<Extent>) -> Self {
        let mut f = FileState {
            ino,
            size,
            content: content.clone(),
            left_whole: None,
            released: 0,
            extents,
            dirty: BTreeMap::new(),
            dirty_bytes: 0,
            in_flight: Vec::new(),
            settled: Arc::new(Condvar::new()),
            failed: None,
            writer: None,
            changed: false,
            mtime: None,
            mtime_set: false,
            handles: 0,
            chunking: Chunking::ContentDefined,
            chunking_auto: true,
            overwrites: Default::default(),
            switched: false,
            chunking_known: false,
            read_next: 0,
            read_ahead_until: 0,
            read_pattern: crate::pattern::FilePattern::default(),
            memo: None,
            touched: crate::changed::Changed::default(),
            intent: Default::default(),
        };
        if let Content::Inline(bytes) = content {
            f.dirty_bytes = f.insert_dirty(0, &bytes);
        }
        f
    }

    pub fn extents_end(&self) -> u64 {
        self.extents.last().map_or(0, |e| e.offset + e.len)
    }

    /// The stored chunks of the extents that overlap `[from, to)`.
    pub fn chunks_in(&self, from: u64, to: u64) -> Vec<ChunkId> {
        let first = self.extents.partition_point(|e| e.offset + e.len <= from);
        self.extents[first..]
            .iter()
            .take_while(|e| e.offset < to)
            .filter_map(|e| e.chunk)
            .collect()
    }

    /// Records a write; returns how many dirty bytes it added.
    pub fn write(&mut self, offset: u64, data: &[u8], now: Timestamp) -> usize {
        let before = self.dirty_bytes;
        self.intent.write(offset, data);
        self.dirty_bytes += self.insert_dirty(offset, data);
        debug_assert_eq!(
            self.dirty_bytes,
            self.dirty.values().map(Vec::len).sum::<usize>()
        );
        self.size = self.size.max(offset + data.len() as u64);
        self.modified_logged(now);
        self.dirty_bytes.saturating_sub(before)
    }

    /// Puts `data` at `offset` over whatever dirty bytes are there, merging
    /// runs that overlap so the map stays non-overlapping. A run shorter
    /// than [`RUN_MAX`] that ends at `offset` grows in place; a longer one is
    /// followed by a new run, so a stream of appends is never copied to make
    /// room (applying cuts chunks across runs, see [`crate::cut`]).
    /// Returns how many bytes `dirty` grew by (a file with many runs is
    /// not summed at each write).
    fn insert_dirty(&mut self, offset: u64, data: &[u8]) -> usize {
        if data.is_empty() {
            return 0;
        }
        let end = offset + data.len() as u64;
        let start = match self.dirty.range(..=offset).next_back() {
            Some((&s, run))
                if s + run.len() as u64 > offset
                    || (s + run.len() as u64 == offset && run.len() < RUN_MAX) =>
            {
                s
            }
            _ => offset,
        };
        let later: Vec<(u64, Vec<u8>)> = self
            .dirty
            .range(start + 1..end)
            .map(|(&s, _)| s)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|s| (s, self.dirty.remove(&s).expect("listed")))
            .collect();
        let had = self.dirty.get(&start).map_or(0, Vec::len)
            + later.iter().map(|(_, old)| old.len()).sum::<usize>();
        let run = self.dirty.entry(start).or_default();
        let at = (offset - start) as usize;
        if at + data.len() <= run.len() {
            run[at..at + data.len()].copy_from_slice(data);
        } else {
            run.truncate(at);
            run.extend_from_slice(data);
        }
        for (s, old) in later {
            let run_end = start + run.len() as u64;
            let old_end = s + old.len() as u64;
            if old_end > run_end {
                run.extend_from_slice(&old[(run_end - s) as usize..]);
            }
        }
        run.len() - had
    }

    /// Cuts the file to `size`, dropping extents and dirty bytes past it.
    pub fn truncate(
        &mut self,
        size: u64,
        now: Timestamp,
        read: &dyn Fn(&ChunkId) -> Result<Bytes>,
    ) -> Result<()> {
        assert!(!self.busy(), "truncate waits for the apply in flight");
        self.intent.truncate(size);
        if size < self.size {
            let tails: Vec<u64> = self.dirty.range(..).map(|(&s, _)| s).collect();
            for s in tails {
                let run_end = s + self.dirty[&s].len() as u64;
                if s >= size {
                    self.dirty.remove(&s);
                } else if run_end > size {
                    self.dirty
                        .get_mut(&s)
                        .expect("present")
                        .truncate((size - s) as usize);
                }
            }
            let keep = self.extents.partition_point(|e| e.offset + e.len <= size);
            if keep < self.extents.len() {
                let e = self.extents[keep];
                self.touched.touch(e.offset..u64::MAX);
                self.released += stored_len(&self.extents[keep..]);
                self.extents.truncate(keep);
                if e.offset < size {
                    if let Some(id) = e.chunk {
                        // The surviving head of a cut chunk becomes dirty data,
                        // under any newer dirty bytes.
                        let head = read(&id)?;
                        let mut base = head[..(size - e.offset) as usize].to_vec();
                        self.overlay_dirty(e.offset, &mut base);
                        self.insert_dirty(e.offset, &base);
                    }
                }
            }
            self.dirty_bytes = self.dirty.values().map(Vec::len).sum();
        }
        self.size = size;
        self.modified_logged(now);
        Ok(())
    }

    /// Notes a change of content at `now`, recorded with it: a change the
    /// intent log does not hold (a splice of extents, a hole punched), so
    /// the next fsync records the file whole.
    pub fn modified(&mut self, now: Timestamp) {
        self.intent.broken();
        self.modified_logged(now);
    }

    /// [`FileState::modified`] by a write or truncate, which the intent
    /// log holds.
    fn modified_logged(&mut self, now: Timestamp) {
        self.changed = true;
        self.mtime = Some(now);
        self.mtime_set = false;
    }

    /// Notes the content recorded: the engine's times are the file's.
    pub fn recorded(&mut self) {
        self.intent.recorded();
        self.changed = false;
        self.mtime = None;
        self.mtime_set = false;
    }

    /// Reads `offset..offset+len` (clipped to the size): committed extents,
    /// zeros past them, dirty bytes on top.
    pub fn read(
        &self,
        offset: u64,
        len: u64,
        chunks: &dyn Fn(&[ChunkId]) -> Result<Vec<Bytes>>,
    ) -> Result<Vec<u8>> {
        let plan = self.read_plan(offset, len);
        let data = chunks(&plan.ids())?;
        Ok(plan.assemble(data))
    }

    /// What reading `offset..offset+len` needs, taken under the file's lock
    /// so that the chunks can be fetched without it: the extents covering
    /// the range and copies of the newer bytes over them.
    pub fn read_plan(&self, offset: u64, len: u64) -> ReadPlan {
        let end = (offset + len).min(self.size);
        if offset >= end {
            return ReadPlan {
                offset,
                end: offset,
                covering: Vec::new(),
                overlays: Vec::new(),
            };
        }
        let first = self.extents.partition_point(|e| e.offset + e.len <= offset);
        let covering: Vec<Extent> = self.extents[first..]
            .iter()
            .take_while(|e| e.offset < end)
            .copied()
            .collect();
        let mut overlays: Vec<(u64, Bytes)> = Vec::new();
        for (s, bytes) in &self.in_flight {
            let from = offset.max(*s);
            let to = end.min(s + bytes.len() as u64);
            if from < to {
                overlays.push((from, bytes.slice((from - s) as usize..(to - s) as usize)));
            }
        }
        for (from, part) in self.dirty_in(offset, end) {
            overlays.push((from, Bytes::copy_from_slice(part)));
        }
        ReadPlan {
            offset,
            end,
            covering,
            overlays,
        }
    }

    /// The dirty bytes inside `offset..end`, each piece with the offset it
    /// starts at.
    fn dirty_in(&self, offset: u64, end: u64) -> impl Iterator<Item = (u64, &[u8])> {
        let start_key = self
            .dirty
            .range(..=offset)
            .next_back()
            .map_or(offset, |(&s, _)| s);
        self.dirty
            .range(start_key..end)
            .filter_map(move |(&s, run)| {
                let from = offset.max(s);
                let to = end.min(s + run.len() as u64);
                (from < to).then(|| (from, &run[(from - s) as usize..(to - s) as usize]))
            })
    }

    /// Whether dirty runs cover every byte of `lo..hi`.
    fn covered(&self, lo: u64, hi: u64) -> bool {
        let mut at = lo;
        for (from, part) in self.dirty_in(lo, hi) {
            if from != at {
                return false;
            }
            at += part.len() as u64;
        }
        at == hi
    }

    /// Copies the dirty bytes that fall in `offset..offset+buf.len()` over
    /// `buf`.
    fn overlay_dirty(&self, offset: u64, buf: &mut [u8]) {
        let end = offset + buf.len() as u64;
        for (from, part) in self.dirty_in(offset, end) {
            let at = (from - offset) as usize;
            buf[at..at + part.len()].copy_from_slice(part);
        }
    }

    /// The clusters of dirty runs, as (start, end) byte ranges. In fixed
    /// mode each run is widened to whole blocks and only runs whose blocks
    /// overlap are clustered: the bytes between two blocks are never read.
    fn clusters(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (&s, run) in &self.dirty {
            let e = s + run.len() as u64;
            if let Some(b) = self.chunking.block() {
                let (s, e) = (b.floor(s), b.ceil(e).min(self.size));
                match out.last_mut() {
                    Some(c) if s < c.1 => c.1 = c.1.max(e),
                    _ => out.push((s, e)),
                }
                continue;
            }
            match out.last_mut() {
                Some(c) if s <= c.1 + CLUSTER_GAP => c.1 = c.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }

    /// Writes every dirty byte behind to the store as chunks and splices the
    /// extents, on this thread. Without `whole`, the last chunk of the file
    /// stays dirty so that the next append re-cuts it at a content-defined
    /// boundary.
    pub fn apply(
        &mut self,
        whole: bool,
        params: ChunkerParams,
        writer: &mut StreamWriter,
        cache: &ChunkCache,
    ) -> Result<()> {
        let Some(job) = self.plan(whole, writer.store(), cache)? else {
            return Ok(());
        };
        match job.run(params, writer) {
            Ok(done) => {
                self.splice(done);
                Ok(())
            }
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// Whether an apply is in flight: its bytes are readable from
    /// `in_flight` and the extents must not change until it is spliced.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Dirty bytes held in memory: those still in `dirty` and those of an
    /// apply in flight.
    pub fn held(&self) -> usize {
        self.dirty_bytes + self.in_flight.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    /// The first half of an apply: takes the dirty runs out of `dirty` into
    /// regions to re-chunk (with the old bytes of the chunks they touch) and
    /// keeps them readable in `in_flight`. The regions are re-chunked and
    /// stored by [`Job::run`], with no lock held, and [`FileState::splice`]
    /// puts the result in the extents. Nothing may change the extents in
    /// between (callers wait while [`FileState::busy`]).
    pub fn plan(&mut self, whole: bool, store: &Store, cache: &ChunkCache) -> Result<Option<Job>> {
        assert!(!self.busy(), "one apply at a time");
        if self.chunking_auto && self.chunking.block().is_none() {
            let mut overwrites = std::mem::take(&mut self.overwrites);
            if overwrites.judge(self) {
                self.chunking = Chunking::Fixed(crate::chunkmode::BLOCK_DEFAULT);
                self.chunking_auto = false;
                self.switched = true;
            }
            self.overwrites = overwrites;
        }
        let clusters = self.clusters();
        let Some(&(last_lo, _)) = clusters.last() else {
            return Ok(None);
        };
        // A gap between the extents and the runs becomes a hole.
        let ext_end = self.extents_end();
        if last_lo > ext_end {
            self.touched.touch(ext_end..last_lo);
            self.extents.push(Extent {
                offset: ext_end,
                len: last_lo - ext_end,
                chunk: None,
            });
        }
        // Holes are split at the clusters' edges so re-chunking never has to
        // materialise hole bytes outside them.
        for &(lo, hi) in &clusters {
            for at in [lo, hi] {
                let i = self.extents.partition_point(|e| e.offset + e.len <= at);
                self.split_hole_at(i, at);
            }
        }
        // Each cluster's region: the extents it overlaps, merged with the
        // next region when they share an extent.
        let mut regions: Vec<(u64, u64, u64)> = Vec::new();
        let block = self.chunking.block();
        for (lo, hi) in clusters {
            let (start, old_end) = self.region_of(lo, hi);
            let end = old_end.max(hi);
            match regions.last_mut() {
                Some(r) if start < r.2 => {
                    r.1 = r.1.max(old_end);
                    r.2 = r.2.max(end);
                }
                _ => regions.push((start, old_end, end)),
            }
        }
        // The old chunks the regions keep bytes of, fetched together: one
        // at a time, a thousand scattered small overwrites waited for a
        // thousand reads in turn.
        let old = match self.old_chunks(&regions, store, cache) {
            Ok(old) => old,
            Err(e) => {
                self.dirty_bytes = self.dirty.values().map(Vec::len).sum();
                return Err(e);
            }
        };
        let mut pieces = Vec::with_capacity(regions.len());
        for (start, old_end, end) in regions {
            let segments = self.take_region(start, old_end, end, &old);
            let mut at = start;
            for seg in &segments {
                self.in_flight.push((at, seg.clone()));
                at += seg.len() as u64;
            }
            pieces.push(Piece {
                start,
                old_end,
                // Fixed blocks need no content-defined cut at the end.
                keep_tail: !whole && end >= self.size && block.is_none(),
                segments,
            });
        }
        self.dirty_bytes = self.dirty.values().map(Vec::len).sum();
        Ok(Some(Job { pieces, block }))
    }

    /// Where the region re-chunked for dirty bytes in `lo..hi` starts, and
    /// where the extents it replaces end. An append starts after the last
    /// stored chunk, never re-cutting it: a chunk at the end was stored by a
    /// flush (the tail of a stream being written stays dirty until then),
    /// and re-storing it on the next append, once per fsync, close or
    /// commit, multiplied what slow and small appends stored. The cost is a
    /// content-defined boundary moved at each flush (a chunk or two whose
    /// dedup with another copy is lost).
    fn region_of(&self, lo: u64, hi: u64) -> (u64, u64) {
        let a = self.extents.partition_point(|e| e.offset + e.len <= lo);
        let b = self.extents.partition_point(|e| e.offset < hi).max(a);
        let start = self.extents.get(a).map_or(self.extents_end(), |e| e.offset);
        let old_end = if b > a {
            self.extents[b - 1].offset + self.extents[b - 1].len
        } else {
            start
        };
        (start, old_end)
    }

    /// The chunks of `regions` (start, old end, end) whose bytes are not
    /// all overwritten by dirty runs, from the cache or else read from the
    /// store in one batch.
    fn old_chunks(
        &self,
        regions: &[(u64, u64, u64)],
        store: &Store,
        cache: &ChunkCache,
    ) -> Result<HashMap<ChunkId, Bytes>> {
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        for &(start, old_end, _) in regions {
            let a = self.extents.partition_point(|e| e.offset < start);
            let b = self.extents.partition_point(|e| e.offset < old_end);
            for e in &self.extents[a..b] {
                let Some(id) = e.chunk else { continue };
                if found.contains_key(&id) || self.covered(e.offset, e.offset + e.len) {
                    continue;
                }
                match cache.get(&id) {
                    Some(d) => {
                        found.insert(id, d);
                    }
                    None => missing.push(id),
                }
            }
        }
        missing.sort_unstable();
        missing.dedup();
        let data = store.read_chunks(&missing)?;
        found.extend(missing.into_iter().zip(data));
        Ok(found)
    }

    /// The bytes of `start..end`, in consecutive segments: the old chunks
    /// of `start..old_end` (from `old`, see [`FileState::old_chunks`]),
    /// then the dirty runs on top, which leave `dirty`. A region of dirty
    /// runs end to end and no old data (a stream of appends) is moved, not
    /// copied.
    fn take_region(
        &mut self,
        start: u64,
        old_end: u64,
        end: u64,
        old: &HashMap<ChunkId, Bytes>,
    ) -> Vec<Bytes> {
        let a = self.extents.partition_point(|e| e.offset < start);
        let b = self.extents.partition_point(|e| e.offset < old_end);
        let old_data = self.extents[a..b].iter().any(|e| e.chunk.is_some());
        if !old_data {
            let mut at = start;
            let tiled = self.dirty.range(start..end).all(|(&s, run)| {
                let ok = s == at;
                at += run.len() as u64;
                ok
            }) && at == end;
            if tiled {
                let keys: Vec<u64> = self.dirty.range(start..end).map(|(&s, _)| s).collect();
                return keys
                    .into_iter()
                    .map(|s| Bytes::from(self.dirty.remove(&s).expect("listed")))
                    .collect();
            }
        }
        let mut region = vec![0u8; (end - start) as usize];
        for e in &self.extents[a..b] {
            if let Some(id) = &e.chunk {
                // A chunk overwritten whole was not fetched: its old bytes
                // are not needed.
                let Some(data) = old.get(id) else { continue };
                let at = (e.offset - start) as usize;
                region[at..at + data.len()].copy_from_slice(data);
            }
        }
        let runs: Vec<u64> = self.dirty.range(start..end).map(|(&s, _)| s).collect();
        for s in &runs {
            let run = self.dirty.remove(s).expect("listed");
            let at = (s - start) as usize;
            region[at..at + run.len()].copy_from_slice(&run);
        }
        vec![Bytes::from(region)]
    }

    /// The second half of an apply: the new extents go in, and the bytes in
    /// flight are dropped. A kept last chunk becomes dirty again under any
    /// bytes written since.
    pub fn splice(&mut self, done: Done) {
        let mut pieces = done.pieces;
        pieces.sort_by_key(|p| std::cmp::Reverse(p.start));
        for p in pieces {
            let a = self.extents.partition_point(|e| e.offset < p.start);
            let b = self.extents.partition_point(|e| e.offset < p.old_end);
            let fresh_end = p.fresh.last().map_or(p.start, |e| e.offset + e.len);
            self.touched.touch(p.start..p.old_end.max(fresh_end));
            self.released += stored_len(&self.extents[a..b]);
            self.extents.splice(a..b, p.fresh);
            if let Some((offset, tail)) = p.tail {
                let mut base = tail.to_vec();
                self.overlay_dirty(offset, &mut base);
                self.insert_dirty(offset, &base);
            }
        }
        self.in_flight.clear();
        self.dirty_bytes = self.dirty.values().map(Vec::len).sum();
    }

    /// Gives up an apply that failed: its bytes become dirty again (under
    /// any written since), and the extents stay as they were.
    pub fn abort(&mut self) {
        for (start, bytes) in std::mem::take(&mut self.in_flight) {
            let mut base = bytes.to_vec();
            self.overlay_dirty(start, &mut base);
            self.insert_dirty(start, &base);
        }
        self.dirty_bytes = self.dirty.values().map(Vec::len).sum();
    }

    /// Splits a hole extent at `at` (if extent `i` is a hole spanning it),
    /// so re-chunking never has to materialise a large hole.
    fn split_hole_at(&mut self, i: usize, at: u64) {
        let Some(e) = self.extents.get(i).copied() else {
            return;
        };
        if e.chunk.is_none() && e.offset < at && at < e.offset + e.len {
            self.touched.touch(e.offset..e.offset + e.len);
            self.extents[i] = Extent {
                len: at - e.offset,
                ..e
            };
            self.extents.insert(
                i + 1,
                Extent {
                    offset: at,
                    len: e.offset + e.len - at,
                    chunk: None,
                },
            );
        }
    }
}

/// A read's extents and newer bytes, from [`FileState::read_plan`].
pub struct ReadPlan {
    offset: u64,
    end: u64,
    covering: Vec<Extent>,
    /// Bytes of applies in flight and dirty runs, in the order they go on.
    overlays: Vec<(u64, Bytes)>,
}

impl ReadPlan {
    /// The chunks the read needs, in order.
    pub fn ids(&self) -> Vec<ChunkId> {
        self.covering.iter().filter_map(|e| e.chunk).collect()
    }

    /// The bytes read, given the chunks of [`ReadPlan::ids`].
    pub fn assemble(&self, chunks: Vec<Bytes>) -> Vec<u8> {
        let (offset, end) = (self.offset, self.end);
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut data = chunks.into_iter();
        // Extents are contiguous from `offset`; past them the file is zeros.
        for e in &self.covering {
            let from = (offset.max(e.offset) - e.offset) as usize;
            let to = (end.min(e.offset + e.len) - e.offset) as usize;
            if e.chunk.is_none() {
                out.resize(out.len() + to - from, 0);
            } else {
                let bytes = data.next().expect("one chunk per data extent");
                out.extend_from_slice(&bytes[from..to]);
            }
        }
        out.resize((end - offset) as usize, 0);
        for (at, bytes) in &self.overlays {
            let from = (at - offset) as usize;
            out[from..from + bytes.len()].copy_from_slice(bytes);
        }
        out
    }
}

impl ReadPlan {
    /// The runs of the read that need only chunks `cached` gives (a hole
    /// needs none), each with its offset and bytes: what can be read
    /// without a storage read.
    pub fn assemble_cached(
        &self,
        cached: impl Fn(&ChunkId) -> Option<Bytes>,
    ) -> Vec<(u64, Vec<u8>)> {
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut open = false;
        for e in &self.covering {
            let from = self.offset.max(e.offset);
            let to = self.end.min(e.offset + e.len);
            let piece = match e.chunk {
                None => Some(None),
                Some(id) => cached(&id).map(Some),
            };
            let Some(piece) = piece else {
                open = false;
                continue;
            };
            if !open {
                runs.push((from, Vec::with_capacity((self.end - from) as usize)));
                open = true;
            }
            let run = &mut runs.last_mut().expect("opened").1;
            match piece {
                None => run.resize(run.len() + (to - from) as usize, 0),
                Some(b) => {
                    run.extend_from_slice(&b[(from - e.offset) as usize..(to - e.offset) as usize])
                }
            }
        }
        for (at, bytes) in &self.overlays {
            let end = at + bytes.len() as u64;
            for (start, run) in &mut runs {
                let run_end = *start + run.len() as u64;
                let (from, to) = ((*at).max(*start), end.min(run_end));
                if from < to {
                    run[(from - *start) as usize..(to - *start) as usize]
                        .copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
                }
            }
        }
        runs
    }
}

/// Regions of a file to re-chunk and store, taken out by
/// [`FileState::plan`].
pub struct Job {
    pieces: Vec<Piece>,
    /// The file's fixed block size when the job was planned.
    block: Option<BlockSize>,
}

struct Piece {
    start: u64,
    /// Where the extents the region replaces end.
    old_end: u64,
    /// The region reaches the end of the file and its last chunk is kept
    /// dirty for the next append.
    keep_tail: bool,
    /// The region's bytes, in consecutive pieces.
    segments: Vec<Bytes>,
}

/// A [`Job`]'s result, for [`FileState::splice`].
pub struct Done {
    pieces: Vec<Applied>,
}

struct Applied {
    start: u64,
    old_end: u64,
    fresh: Vec<Extent>,
    /// The kept last chunk and its offset.
    tail: Option<(u64, Bytes)>,
}

impl Job {
    /// Re-chunks each region and stores its chunks: the costly part of an
    /// apply, which needs no lock on the file.
    pub fn run(self, params: ChunkerParams, writer: &mut StreamWriter) -> Result<Done> {
        if let Some(b) = self.block {
            return Ok(Done {
                pieces: store_blocks(self.pieces, b, writer)?,
            });
        }
        let mut pieces = Vec::with_capacity(self.pieces.len());
        for p in self.pieces {
            let mut chunks = cut_segments(&p.segments, params);
            let len: usize = p.segments.iter().map(Bytes::len).sum();
            // Keep the file's last chunk dirty until the file is flushed (even
            // when it is the only one): the next append moves its cut to
            // where the content puts it, and nothing is stored twice.
            let tail = if p.keep_tail && !chunks.is_empty() {
                let last = chunks.pop().expect("not empty");
                let end = p.start + len as u64;
                Some((end - last.len() as u64, last))
            } else {
                None
            };
            let ids = writer.write_batch(&chunks)?;
            let mut offset = p.start;
            let fresh = chunks
                .iter()
                .zip(ids)
                .map(|(chunk, id)| {
                    let e = Extent {
                        offset,
                        len: chunk.len() as u64,
                        chunk: Some(id),
                    };
                    offset += e.len;
                    e
                })
                .collect();
            pieces.push(Applied {
                start: p.start,
                old_end: p.old_end,
                fresh,
                tail,
            });
        }
        Ok(Done { pieces })
    }
}

/// Bytes of the stored chunks (not holes) of `extents`.
fn stored_len(extents: &[Extent]) -> u64 {
    extents
        .iter()
        .filter(|e| e.chunk.is_some())
        .map(|e| e.len)
        .sum()
}

/// Raw bytes compressed together for a file in fixed chunking mode: such
/// files (images, databases) are read at random, and a read that misses
/// decodes its whole region; 64 KiB regions make a 4 KiB miss decode 16
/// blocks instead of the 256 of the store's 1 MiB ones, for a few percent
/// less compression.
const FIXED_REGION: usize = 64 << 10;

/// Cuts fixed-mode regions at block boundaries and stores their blocks in
/// one batch (thousands of scattered one-block regions then share
/// compression regions and one pass of hashing on every core, instead of a
/// region and a pass each); a block of zeros becomes (part of) a hole.
fn store_blocks(
    pieces: Vec<Piece>,
    block: BlockSize,
    writer: &mut StreamWriter,
) -> Result<Vec<Applied>> {
    let cut: Vec<Vec<Bytes>> = pieces
        .iter()
        .map(|p| cut_fixed(&p.segments, p.start, block))
        .collect();
    let zero = |c: &Bytes| c.iter().all(|&x| x == 0);
    let data: Vec<Bytes> = cut.iter().flatten().filter(|c| !zero(c)).cloned().collect();
    let mut ids = writer.write_batch_in(&data, FIXED_REGION)?.into_iter();
    let mut out = Vec::with_capacity(pieces.len());
    for (p, chunks) in pieces.into_iter().zip(cut) {
        let mut fresh: Vec<Extent> = Vec::with_capacity(chunks.len());
        let mut offset = p.start;
        for c in &chunks {
            let len = c.len() as u64;
            let z = zero(c);
            match fresh.last_mut() {
                Some(hole) if z && hole.chunk.is_none() => hole.len += len,
                _ => fresh.push(Extent {
                    offset,
                    len,
                    chunk: if z { None } else { ids.next() },
                }),
            }
            offset += len;
        }
        out.push(Applied {
            start: p.start,
            old_end: p.old_end,
            fresh,
            tail: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use branch::LocalDir;
    use cas::{RepoKey, Store, StoreSettings};
    use proptest::prelude::*;

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

    const SMALL: ChunkerParams = ChunkerParams::ContentDefined {
        min: 256,
        avg: 1024,
        max: 4096,
    };

    #[derive(Debug, Clone)]
    enum Op {
        Write(u64, Vec<u8>),
        Truncate(u64),
        Apply(bool),
        /// Plans and runs an apply in the background: its result is spliced
        /// in (or, when it "fails", abandoned) only before the next
        /// operation that needs the extents.
        Behind {
            whole: bool,
            fails: bool,
        },
        /// Switches the chunking mode (fixed blocks of 4 KiB << n, or
        /// content-defined), as an xattr set on an open file would.
        Mode(Option<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..40_000, proptest::collection::vec(any::<u8>(), 1..6000)).prop_map(|(o, d)| Op::Write(o, d)),
            1 => (0u64..50_000).prop_map(Op::Truncate),
            2 => any::<bool>().prop_map(Op::Apply),
            2 => (any::<bool>(), proptest::bool::weighted(0.25)).prop_map(|(whole, fails)| Op::Behind { whole, fails }),
            1 => proptest::option::of(0u8..3).prop_map(Op::Mode),
        ]
    }

    fn check(f: &FileState, w: &StreamWriter, cache: &ChunkCache, model: &[u8]) {
        assert_eq!(f.size, model.len() as u64);
        let read = |ids: &[ChunkId]| -> Result<Vec<Bytes>> {
            ids.iter()
                .map(|id| Ok(cache.get(id).map_or_else(|| w.store().read_chunk(id), Ok)?))
                .collect()
        };
        let all = f.read(0, f.size + 10, &read).unwrap();
        assert!(all == model, "content differs");
        let mid = f.read(model.len() as u64 / 3, 777, &read).unwrap();
        let from = model.len() / 3;
        assert!(mid[..] == model[from..(from + 777).min(model.len())]);
        // What a cache holding about half the chunks gives: runs of the
        // file's bytes, holes and dirty bytes included.
        let half = |id: &ChunkId| {
            id.as_bytes()[0].is_multiple_of(2).then(|| {
                cache
                    .get(id)
                    .map_or_else(|| w.store().read_chunk(id), Ok)
                    .unwrap()
            })
        };
        let mut seen = 0;
        for (at, run) in f.read_plan(0, f.size).assemble_cached(half) {
            assert!(at >= seen, "runs overlap");
            seen = at + run.len() as u64;
            assert!(
                run[..] == model[at as usize..seen as usize],
                "a cached run differs"
            );
        }
        let mut end = 0;
        for e in &f.extents {
            assert_eq!(e.offset, end, "extents are contiguous");
            end += e.len;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn writes_truncates_and_applies_match_a_byte_model(
            ops in proptest::collection::vec(op(), 1..40),
            fixed_first in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let s = store(dir.path());
            let mut w = s.stream();
            let cache = ChunkCache::new(1 << 20);
            let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
            if fixed_first {
                f.chunking = Chunking::Fixed(BlockSize::new(4096).unwrap());
            }
            let mut model: Vec<u8> = Vec::new();
            let mut behind: Option<Option<Done>> = None;
            for op in ops {
                if !matches!(op, Op::Write(..)) {
                    match behind.take() {
                        Some(Some(done)) => f.splice(done),
                        Some(None) => f.abort(),
                        None => {}
                    }
                }
                match op {
                    Op::Mode(m) => {
                        f.chunking = match m {
                            Some(n) => Chunking::Fixed(BlockSize::new(4096 << n).unwrap()),
                            None => Chunking::ContentDefined,
                        };
                    }
                    Op::Behind { whole, fails } => {
                        if let Some(job) = f.plan(whole, w.store(), &cache).unwrap() {
                            prop_assert!(f.busy());
                            let done = job.run(SMALL, &mut w).unwrap();
                            behind = Some((!fails).then_some(done));
                        }
                    }
                    Op::Write(o, d) => {
                        f.write(o, &d, Timestamp::default());
                        let end = o as usize + d.len();
                        if model.len() < end { model.resize(end, 0); }
                        model[o as usize..end].copy_from_slice(&d);
                    }
                    Op::Truncate(n) => {
                        let read = |id: &ChunkId| Ok(cache.get(id).map_or_else(|| w.store().read_chunk(id), Ok)?);
                        f.truncate(n, Timestamp::default(), &read).unwrap();
                        model.resize(n as usize, 0);
                    }
                    Op::Apply(whole) => f.apply(whole, SMALL, &mut w, &cache).unwrap(),
                }
                check(&f, &w, &cache, &model);
            }
            match behind.take() {
                Some(Some(done)) => f.splice(done),
                Some(None) => f.abort(),
                None => {}
            }
            check(&f, &w, &cache, &model);
            f.apply(true, SMALL, &mut w, &cache).unwrap();
            prop_assert!(f.dirty.is_empty() || f.extents_end() < f.size);
            check(&f, &w, &cache, &model);
        }
    }

    #[test]
    fn an_overwrite_in_the_middle_restores_only_nearby_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(64 << 20);
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        let data: Vec<u8> = (0..4_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        f.write(0, &data, Timestamp::default());
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        let before = w.stats().new_bytes;
        f.write(2_000_000, b"a small edit", Timestamp::default());
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        let added = w.stats().new_bytes - before;
        assert!(
            added <= 3 * 256 * 1024,
            "re-stored {added} bytes for a 12-byte edit"
        );
    }

    /// Random bytes that do not deduplicate (no block repeats).
    fn noise(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| ((i ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    /// Whether every data extent of the file lies within one block.
    fn aligned(f: &FileState, block: u64) -> bool {
        f.extents
            .iter()
            .filter(|e| e.chunk.is_some())
            .all(|e| e.offset / block == (e.offset + e.len - 1) / block)
    }

    /// Bytes in which no chunk repeats.
    fn random(len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut out);
        out
    }

    /// Appends `data` in `piece`-byte writes, applying after each (as a
    /// writer past the global dirty limit does) and flushing whole every
    /// `flush_every` writes (as fsync, close and the committer do); returns
    /// the bytes the store took for it and the file's extents.
    fn store_appends(data: &[u8], piece: usize, flush_every: usize) -> (u64, Vec<Extent>) {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(64 << 20);
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        let params = ChunkerParams::default();
        for (i, p) in data.chunks(piece).enumerate() {
            f.write(f.size, p, Timestamp::default());
            let whole = (i + 1) % flush_every == 0;
            f.apply(whole, params, &mut w, &cache).unwrap();
        }
        f.apply(true, params, &mut w, &cache).unwrap();
        let read = |id: &ChunkId| Ok(w.store().read_chunk(id)?);
        let all = f
            .read(0, f.size, &|ids: &[ChunkId]| ids.iter().map(read).collect())
            .unwrap();
        assert!(all == data, "content differs");
        (w.stats().new_bytes, f.extents)
    }

    #[test]
    fn small_appends_applied_one_by_one_store_each_byte_once() {
        let data = random(3 << 20);
        let (stored, extents) = store_appends(&data, 4096, usize::MAX);
        assert_eq!(stored, data.len() as u64, "4 KiB appends, each applied");
        // Cut where one write of it all is cut: the last chunk waited.
        // (Chunk ids differ: each call has a store of its own key.)
        let (_, at_once) = store_appends(&data, data.len(), usize::MAX);
        let cuts = |x: &[Extent]| x.iter().map(|e| (e.offset, e.len)).collect::<Vec<_>>();
        assert_eq!(cuts(&extents), cuts(&at_once));
    }

    #[test]
    fn appends_between_frequent_flushes_store_each_byte_once() {
        let data = random(2 << 20);
        for (piece, every) in [(4096, 1), (512, 7), (4096, 16)] {
            let (stored, _) = store_appends(&data, piece, every);
            assert_eq!(
                stored,
                data.len() as u64,
                "{piece}-byte appends, a flush every {every}"
            );
        }
    }

    /// A content-defined 4 MiB file, then `batches` batches of `per` 4 KiB
    /// overwrites at random offsets, each batch applied in file order (as
    /// the kernel's writeback hands them over); returns the bytes stored
    /// for the overwrites, the bytes overwritten and the file.
    fn overwrite_at_random(batches: usize, per: usize) -> (u64, u64, FileState) {
        use rand::Rng;
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(64 << 20);
        let params = ChunkerParams::default();
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        let mut model = random(4 << 20);
        f.write(0, &model, Timestamp::default());
        f.apply(true, params, &mut w, &cache).unwrap();
        let before = w.stats().new_bytes;
        let mut rng = rand::thread_rng();
        for _ in 0..batches {
            for _ in 0..per {
                let at = rng.gen_range(0..model.len() / 4096) * 4096;
                let page = random(4096);
                model[at..at + 4096].copy_from_slice(&page);
                f.write(at as u64, &page, Timestamp::default());
            }
            f.apply(true, params, &mut w, &cache).unwrap();
        }
        let read = |id: &ChunkId| Ok(w.store().read_chunk(id)?);
        let all = f
            .read(0, f.size, &|ids: &[ChunkId]| ids.iter().map(read).collect())
            .unwrap();
        assert!(all == model, "content differs");
        let stored = w.stats().new_bytes - before;
        (stored, (batches * per * 4096) as u64, f)
    }

    #[test]
    fn a_file_overwritten_at_random_in_file_order_switches_to_fixed_blocks() {
        // The content-defined chunks are re-stored once each, as blocks, when
        // first overwritten: over a few times the file's size written, that
        // is paid back.
        let (stored, written, f) = overwrite_at_random(120, 32);
        assert!(f.switched, "the switch waits to be recorded");
        assert_eq!(f.chunking, Chunking::Fixed(crate::chunkmode::BLOCK_DEFAULT));
        assert!(
            stored * 2 <= written * 3,
            "stored {stored} for {written} overwritten"
        );
    }

    #[test]
    fn a_few_edits_keep_content_defined_chunks() {
        let (_, _, f) = overwrite_at_random(1, 3);
        assert_eq!(f.chunking, Chunking::ContentDefined);
        assert!(!f.switched);
    }

    #[test]
    fn aligned_overwrites_of_a_fixed_file_store_exactly_the_blocks_written() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(0);
        let block = 16 << 10;
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        f.chunking = Chunking::Fixed(BlockSize::new(block).unwrap());
        let mut model = noise(64 * block as usize, 1);
        f.write(0, &model, Timestamp::default());
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        assert_eq!(f.extents.len(), 64);
        assert!(aligned(&f, block));
        let before = w.stats();
        // Four single blocks and one run of three, each new content.
        let writes = [(3u64, 1u64), (10, 1), (11, 1), (40, 3), (63, 1)];
        for (i, &(at, n)) in writes.iter().enumerate() {
            let data = noise((n * block) as usize, 100 + i as u32);
            f.write(at * block, &data, Timestamp::default());
            let from = (at * block) as usize;
            model[from..from + data.len()].copy_from_slice(&data);
        }
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        let after = w.stats();
        assert_eq!(after.new_chunks - before.new_chunks, 7, "blocks re-stored");
        assert_eq!(after.bytes - before.bytes, 7 * block, "bytes re-chunked");
        assert_eq!(f.extents.len(), 64);
        let read = |ids: &[ChunkId]| -> Result<Vec<Bytes>> {
            ids.iter().map(|id| Ok(s.read_chunk(id)?)).collect()
        };
        assert!(f.read(0, f.size, &read).unwrap() == model);
    }

    #[test]
    fn a_content_defined_file_switched_to_fixed_reads_back_and_converges_to_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(0);
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        let mut model = noise(1_000_000, 7);
        f.write(0, &model, Timestamp::default());
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        assert!(!aligned(&f, 4096), "content-defined cuts fall anywhere");
        f.chunking = Chunking::Fixed(BlockSize::new(4096).unwrap());
        let read = |ids: &[ChunkId]| -> Result<Vec<Bytes>> {
            ids.iter().map(|id| Ok(s.read_chunk(id)?)).collect()
        };
        // An unaligned small write: the old extents it touches are re-cut
        // into blocks, the others stay.
        let old = f.extents.clone();
        f.write(500_001, b"an unaligned edit", Timestamp::default());
        model[500_001..500_018].copy_from_slice(b"an unaligned edit");
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        assert!(f.read(0, f.size, &read).unwrap() == model);
        let kept = f.extents.iter().filter(|e| old.contains(e)).count();
        assert!(
            kept + 2 >= old.len(),
            "only the touched extents are replaced"
        );
        // Overwriting it all leaves only blocks.
        model = noise(1_000_000, 8);
        f.write(0, &model, Timestamp::default());
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        assert!(aligned(&f, 4096));
        assert!(f.read(0, f.size, &read).unwrap() == model);
    }

    #[test]
    fn zero_blocks_of_a_fixed_file_are_holes_and_dedup_holds() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut w = s.stream();
        let cache = ChunkCache::new(0);
        let mut f = FileState::new(InodeId(2), 0, Content::Empty, Vec::new());
        f.chunking = Chunking::Fixed(BlockSize::new(4096).unwrap());
        let a = noise(4096, 3);
        let mut model = vec![0u8; 40 * 4096];
        for at in [2usize, 9, 30] {
            model[at * 4096..(at + 1) * 4096].copy_from_slice(&a);
        }
        f.write(0, &model, Timestamp::default());
        f.apply(true, ChunkerParams::default(), &mut w, &cache)
            .unwrap();
        assert_eq!(w.stats().new_chunks, 1, "three equal blocks, stored once");
        let data = f.extents.iter().filter(|e| e.chunk.is_some()).count();
        assert_eq!(data, 3);
        let holes: u64 = f
            .extents
            .iter()
            .filter(|e| e.chunk.is_none())
            .map(|e| e.len)
            .sum();
        assert_eq!(holes, 37 * 4096);
        let read = |ids: &[ChunkId]| -> Result<Vec<Bytes>> {
            ids.iter().map(|id| Ok(s.read_chunk(id)?)).collect()
        };
        assert!(f.read(0, f.size, &read).unwrap() == model);
    }
}

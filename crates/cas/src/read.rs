//! The read path: locate, read regions (coalesced into few large reads),
//! decompress, verify. A chunk copy that fails verification is recorded as
//! damaged (see `salvage`), so that writing the data again heals it.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use bytes::Bytes;
use rayon::prelude::*;

use crate::container::ChunkLocation;
use crate::id::{ChunkId, ContainerId};
use crate::region;
use crate::store::Store;
use crate::{CasError, Result};

/// Regions of one container closer than this are read in one request: a
/// little wasted transfer costs less than another round trip to the disk.
const COALESCE_GAP: u64 = 64 << 10;
/// Upper bound on one coalesced read.
const MAX_SPAN: u64 = 8 << 20;
/// Bytes of a raw region around a random read's chunks that its
/// neighbours may add to the read (see [`Store::read_around`]).
const AROUND_RAW: u32 = 128 << 10;
/// Chunks a random read asks for at most to take the raw-region path (a
/// random request is a few KiB: a chunk or two).
const RAW_PARTS_MAX: usize = 8;
/// Regions beside a random read's own that its neighbours may add to it.
const NEIGHBOUR_REGIONS: usize = 2;

/// What [`Store::read_around`] returns: the asked chunks in order, and the
/// neighbours it read with them.
pub type Around = (Vec<Bytes>, Vec<(ChunkId, Bytes)>);

/// A byte range of one container covering several regions.
struct Span {
    container: ContainerId,
    start: u64,
    end: u64,
}

/// Groups regions into spans; returns the spans and, per region, its span.
fn coalesce(regions: &[ChunkLocation]) -> (Vec<Span>, Vec<usize>) {
    let mut order: Vec<usize> = (0..regions.len()).collect();
    order.sort_by_key(|&i| (regions[i].container, regions[i].region_offset));
    let mut spans: Vec<Span> = Vec::new();
    let mut span_of = vec![0; regions.len()];
    for i in order {
        let r = &regions[i];
        let end = r.region_offset + r.region_len as u64;
        match spans.last_mut() {
            Some(s)
                if s.container == r.container
                    && r.region_offset <= s.end + COALESCE_GAP
                    && end.max(s.end) - s.start <= MAX_SPAN =>
            {
                s.end = s.end.max(end);
            }
            _ => spans.push(Span {
                container: r.container,
                start: r.region_offset,
                end,
            }),
        }
        span_of[i] = spans.len() - 1;
    }
    (spans, span_of)
}

/// See [`Store::read_ahead_runs`]: `regions[i]` is the region of chunk `i`,
/// if known.
fn region_runs<R: PartialEq>(regions: &[R], min: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..regions.len() {
        let long = i - start >= min;
        if (long && regions[i] != regions[i - 1]) || i - start >= 4 * min {
            runs.push(start..i);
            start = i;
        }
    }
    if start < regions.len() {
        runs.push(start..regions.len());
    }
    runs
}

/// Regions read from the branch for a list of chunks, not yet decompressed
/// or verified (see [`Store::fetch_chunks`]).
pub struct Fetched {
    ids: Vec<ChunkId>,
    locs: Vec<ChunkLocation>,
    regions: Vec<ChunkLocation>,
    region_of: Vec<usize>,
    spans: Vec<Span>,
    span_of: Vec<usize>,
    bytes: Vec<Bytes>,
}

/// Whether chunks using `used` bytes of a buffer of `size` would keep too
/// much of it alive (invariant 6).
fn sparse(used: usize, size: usize) -> bool {
    used * 8 < size * 7
}

impl Fetched {
    /// Per region: whether its chunks are copied out of their buffer
    /// (invariant 6). A region stored raw is a slice of its span, so the
    /// span is the buffer, shared by all raw regions in it; a compressed
    /// region decodes into a buffer of its own.
    fn copy_out(&self, members: &[Vec<usize>]) -> Vec<bool> {
        let stored = |r: usize| {
            let (loc, s) = (&self.regions[r], self.span_of[r]);
            let from = (loc.region_offset - self.spans[s].start) as usize;
            &self.bytes[s][from..from + loc.region_len as usize]
        };
        // Bytes of distinct chunks in each region (an id may be asked twice).
        let used: Vec<usize> = members
            .iter()
            .map(|m| {
                let mut parts: Vec<(u32, u32)> = m
                    .iter()
                    .map(|&i| (self.locs[i].offset_in_region, self.locs[i].len))
                    .collect();
                parts.sort_unstable();
                parts.dedup();
                parts.iter().map(|&(_, len)| len as usize).sum()
            })
            .collect();
        let raw: Vec<bool> = (0..self.regions.len())
            .map(|r| region::is_raw(stored(r)))
            .collect();
        let mut span_used = vec![0; self.spans.len()];
        for r in (0..self.regions.len()).filter(|&r| raw[r]) {
            span_used[self.span_of[r]] += used[r];
        }
        (0..self.regions.len())
            .map(|r| {
                if raw[r] {
                    sparse(
                        span_used[self.span_of[r]],
                        self.bytes[self.span_of[r]].len(),
                    )
                } else {
                    let size = region::decoded_len(stored(r)).unwrap_or(0);
                    sparse(used[r], size)
                }
            })
            .collect()
    }
}

impl Store {
    /// The decoded region holding `id` at `loc`; a region that does not
    /// decode is [`CasError::CorruptChunk`] naming `id`.
    pub(crate) fn read_region(&self, loc: &ChunkLocation, id: &ChunkId) -> Result<Bytes> {
        let stored = self.shared.read_container_range(
            loc.container,
            loc.region_offset,
            loc.region_len as usize,
        )?;
        decode_region(loc, stored.into()).map_err(|bad| bad.of(id))
    }

    /// Cuts a chunk out of its decoded region and verifies its id.
    pub(crate) fn verify(
        &self,
        id: &ChunkId,
        loc: &ChunkLocation,
        region: &Bytes,
    ) -> Result<Bytes> {
        let corrupt = |reason: String| CasError::CorruptChunk {
            id: *id,
            container: loc.container,
            reason,
        };
        let start = loc.offset_in_region as usize;
        let end = start + loc.len as usize;
        if end > region.len() {
            return Err(corrupt(format!(
                "bytes {start}..{end} lie outside its {}-byte region",
                region.len()
            )));
        }
        let data = region.slice(start..end);
        if self.shared.key.chunk_id(&data) != *id {
            return Err(corrupt("content does not match its id".into()));
        }
        Ok(data)
    }

    /// Reads and verifies one chunk (also one whose container is still open).
    pub fn read_chunk(&self, id: &ChunkId) -> Result<Bytes> {
        if let Some(data) = self.shared.unsealed.lock().get(id) {
            return Ok(Bytes::copy_from_slice(data));
        }
        moved_retry(|| {
            let loc = self.locate(id)?;
            let read = self
                .read_region(&loc, id)
                .and_then(|region| Ok((self.verify(id, &loc, &region)?, region)));
            if let Err(e) = &read {
                self.note_lost(e, loc.container, &[(*id, loc.container)]);
            }
            let (data, region) = read?;
            // The buffer is the region (decoded or as stored, about alike).
            Ok(if sparse(data.len(), region.len()) {
                Bytes::copy_from_slice(&data)
            } else {
                data
            })
        })
    }

    /// The distinct regions holding `locs`, and which region each loc is in.
    fn regions_of(locs: &[ChunkLocation]) -> (Vec<ChunkLocation>, Vec<usize>) {
        let mut region_of = Vec::with_capacity(locs.len());
        let mut regions = Vec::new();
        let mut seen: HashMap<(ContainerId, u64), usize> = HashMap::new();
        for loc in locs {
            let slot = *seen
                .entry((loc.container, loc.region_offset))
                .or_insert_with(|| {
                    regions.push(*loc);
                    regions.len() - 1
                });
            region_of.push(slot);
        }
        (regions, region_of)
    }

    /// Reads and verifies many chunks, in order, using every core. Each
    /// distinct region is read and decompressed once, and nearby regions of
    /// a container are fetched in one request.
    pub fn read_chunks(&self, ids: &[ChunkId]) -> Result<Vec<Bytes>> {
        // A chunk of an open container is a slice of what its writer passed
        // in, which may be much larger.
        let open: Vec<Option<Bytes>> = {
            let unsealed = self.shared.unsealed.lock();
            ids.iter()
                .map(|id| unsealed.get(id).map(|b| Bytes::copy_from_slice(b)))
                .collect()
        };
        if open.iter().all(Option::is_none) {
            return self.decode_fetched(self.fetch_chunks(ids)?);
        }
        let rest: Vec<ChunkId> = ids
            .iter()
            .zip(&open)
            .filter(|(_, o)| o.is_none())
            .map(|(id, _)| *id)
            .collect();
        let mut fetched = self.decode_fetched(self.fetch_chunks(&rest)?)?.into_iter();
        Ok(open
            .into_iter()
            .map(|o| o.unwrap_or_else(|| fetched.next().expect("one per missing id")))
            .collect())
    }

    /// [`Store::read_chunks`] of `ids` for a random reader, and the chunks
    /// of `near` (its neighbours in the file, bounded by the caller: DDFS
    /// admits the ~128 KiB around a random read) that lie in a region the
    /// read opens anyway, for the caller to cache at no cost in I/O or
    /// decompression. A region stored raw is not read whole: only the
    /// bytes of the asked chunks and their neighbours in it (a 4 KiB read
    /// of incompressible data need not copy a 1 MiB region). Anything
    /// unusual (an unsealed chunk, a compressed region, a failed read or
    /// verification) takes the ordinary path, which reports and records it;
    /// a neighbour that fails costs only itself.
    pub fn read_around(&self, ids: &[ChunkId], near: &[ChunkId]) -> Result<Around> {
        if let Some(done) = self.read_raw_parts(ids, near) {
            return Ok(done);
        }
        let extra = self.in_regions_of(ids, near);
        if extra.is_empty() {
            return Ok((self.read_chunks(ids)?, Vec::new()));
        }
        let all: Vec<ChunkId> = ids.iter().chain(&extra).copied().collect();
        match self.read_chunks(&all) {
            Ok(mut chunks) => {
                let more = chunks.split_off(ids.len());
                Ok((chunks, extra.into_iter().zip(more).collect()))
            }
            Err(_) => Ok((self.read_chunks(ids)?, Vec::new())),
        }
    }

    /// [`Store::read_around`] when every asked chunk is sealed and in a raw
    /// region: per region, one read of the bytes from the first to the end
    /// of the last of its asked chunks and of the neighbours within
    /// [`AROUND_RAW`] of them; and, for up to [`NEIGHBOUR_REGIONS`] raw
    /// regions that hold only neighbours, one read of those. `None` sends the caller the ordinary way.
    fn read_raw_parts(&self, ids: &[ChunkId], near: &[ChunkId]) -> Option<Around> {
        if ids.is_empty() || ids.len() > RAW_PARTS_MAX {
            return None;
        }
        {
            let unsealed = self.shared.unsealed.lock();
            if ids.iter().any(|id| unsealed.contains_key(id)) {
                return None;
            }
        }
        let locs = self.locate_many(ids).ok()?;
        let found = self.shared.index.lookup_many(near).ok()?;
        let (mut regions, region_of) = Self::regions_of(&locs);
        // A region (or a container) ends wherever its writer's flush fell,
        // often right next to the read: the neighbours in the regions
        // beside it are read too (a header and a range each).
        let asked_regions = regions.len();
        for l in found.iter().flatten() {
            let known = regions
                .iter()
                .any(|r| (r.container, r.region_offset) == (l.container, l.region_offset));
            if !known && regions.len() < asked_regions + NEIGHBOUR_REGIONS {
                regions.push(*l);
            }
        }
        let mut out: Vec<Option<Bytes>> = vec![None; ids.len()];
        let mut extra = Vec::new();
        for (r, region) in regions.iter().enumerate() {
            let asked: Vec<usize> = (0..ids.len()).filter(|&i| region_of[i] == r).collect();
            let same = |l: &ChunkLocation| {
                (l.container, l.region_offset) == (region.container, region.region_offset)
            };
            let mut neighbours: Vec<(ChunkId, ChunkLocation)> = near
                .iter()
                .zip(&found)
                .filter_map(|(id, l)| Some((*id, (*l)?)))
                .filter(|(id, l)| same(l) && !ids.contains(id))
                .collect();
            let span = |l: &ChunkLocation| (l.offset_in_region, l.offset_in_region + l.len);
            let (lo, hi) = if asked.is_empty() {
                // Only neighbours here (`near` is bounded by the caller):
                // read if it can be, else left out.
                let (Some(lo), Some(hi)) = (
                    neighbours.iter().map(|(_, l)| span(l).0).min(),
                    neighbours.iter().map(|(_, l)| span(l).1).max(),
                ) else {
                    continue;
                };
                (lo, hi)
            } else {
                let lo = asked.iter().map(|&i| span(&locs[i]).0).min()?;
                let hi = asked.iter().map(|&i| span(&locs[i]).1).max()?;
                neighbours
                    .retain(|(_, l)| span(l).1 <= hi + AROUND_RAW && span(l).0 + AROUND_RAW >= lo);
                (lo, hi)
            };
            let from = neighbours
                .iter()
                .map(|(_, l)| l.offset_in_region)
                .fold(lo, u32::min);
            let to = neighbours
                .iter()
                .map(|(_, l)| l.offset_in_region + l.len)
                .fold(hi, u32::max);
            let Some(bytes) = self.raw_range(region, from, to) else {
                if asked.is_empty() {
                    continue;
                }
                return None;
            };
            let cut = |l: &ChunkLocation| {
                let start = (l.offset_in_region - from) as usize;
                bytes.slice(start..start + l.len as usize)
            };
            for &i in &asked {
                let data = cut(&locs[i]);
                if self.shared.key.chunk_id(&data) != ids[i] {
                    return None;
                }
                out[i] = Some(data);
            }
            for (id, l) in &neighbours {
                let data = cut(l);
                if self.shared.key.chunk_id(&data) == *id {
                    extra.push((*id, data));
                }
            }
        }
        let out = out.into_iter().collect::<Option<Vec<Bytes>>>()?;
        Some((out, extra))
    }

    /// Bytes `from..to` of the data of the raw region at `region`; `None`
    /// when it is not raw, shorter, or cannot be read.
    fn raw_range(&self, region: &ChunkLocation, from: u32, to: u32) -> Option<Bytes> {
        let header = self
            .shared
            .read_container_range(region.container, region.region_offset, region::HEADER_LEN)
            .ok()?;
        if !region::is_raw(&header) || region::decoded_len(&header)? < to as usize {
            return None;
        }
        let at = region.region_offset + region::HEADER_LEN as u64 + from as u64;
        self.shared
            .read_container_range(region.container, at, (to - from) as usize)
            .ok()
            .map(Bytes::from)
    }

    /// The distinct chunks of `near`, not in `ids`, stored in a region that
    /// also holds one of `ids` (as the index says now; a chunk it cannot
    /// place is left out).
    fn in_regions_of(&self, ids: &[ChunkId], near: &[ChunkId]) -> Vec<ChunkId> {
        let (Ok(asked), Ok(found)) = (
            self.shared.index.lookup_many(ids),
            self.shared.index.lookup_many(near),
        ) else {
            return Vec::new();
        };
        let regions: HashSet<(ContainerId, u64)> = asked
            .iter()
            .flatten()
            .map(|l| (l.container, l.region_offset))
            .collect();
        let mut seen: HashSet<ChunkId> = ids.iter().copied().collect();
        near.iter()
            .zip(found)
            .filter(|(_, l)| l.is_some_and(|l| regions.contains(&(l.container, l.region_offset))))
            .filter(|(id, _)| seen.insert(**id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Plans read-ahead of `ids`: asks the branch to start reading their
    /// regions in the background (as [`Store::prefetch`]) and cuts `ids`
    /// into runs of at least `min` chunks (the last may be shorter) that end
    /// where a region ends, so that runs read apart read no region twice.
    /// Runs cut by count alone split a region at every boundary, and both
    /// runs read all of it: a fifth more bytes for 64-chunk runs over 1 MiB
    /// regions. A run is cut at `4 * min` chunks whatever its regions.
    /// Only the index is asked, without waiting for containers still being
    /// written: chunks it cannot place yet are grouped by count and not
    /// hinted (their read waits for them, and reports any error).
    ///
    /// Each run comes with the bytes reading it holds at most: its chunks
    /// decoded plus its regions as stored (chunks not placed count none),
    /// so that a reader can reserve memory for it first.
    pub fn read_ahead_runs(&self, ids: &[ChunkId], min: usize) -> Vec<(Range<usize>, u64)> {
        let found = match self.shared.index.lookup_many(ids) {
            Ok(found) => found,
            Err(_) => vec![None; ids.len()],
        };
        let placed: Vec<ChunkLocation> = found.iter().flatten().copied().collect();
        self.hint(&placed);
        let regions: Vec<Option<(ContainerId, u64)>> = found
            .iter()
            .map(|l| l.map(|l| (l.container, l.region_offset)))
            .collect();
        region_runs(&regions, min.max(1))
            .into_iter()
            .map(|run| {
                let mut seen = HashSet::new();
                let bytes = found[run.clone()]
                    .iter()
                    .flatten()
                    .map(|l| {
                        let stored = if seen.insert((l.container, l.region_offset)) {
                            u64::from(l.region_len)
                        } else {
                            0
                        };
                        u64::from(l.len) + stored
                    })
                    .sum();
                (run, bytes)
            })
            .collect()
    }

    /// The I/O half of [`Store::read_chunks`]: reads the regions of `ids`
    /// (in a few large requests, on this thread, so no compute worker waits
    /// on the disk) without decompressing or verifying them.
    pub fn fetch_chunks(&self, ids: &[ChunkId]) -> Result<Fetched> {
        moved_retry(|| self.fetch_located(ids))
    }

    fn fetch_located(&self, ids: &[ChunkId]) -> Result<Fetched> {
        let locs = self.locate_many(ids)?;
        let (regions, region_of) = Self::regions_of(&locs);
        let (spans, span_of) = coalesce(&regions);
        // The copies of the chunks in the regions `failed` picks, when `e`
        // says their data is lost: never deduplicated against again.
        let noting = |e: CasError, container: ContainerId, failed: &dyn Fn(usize) -> bool| {
            let lost: Vec<(ChunkId, ContainerId)> = (0..ids.len())
                .filter(|&c| failed(region_of[c]))
                .map(|c| (ids[c], locs[c].container))
                .collect();
            self.note_lost(&e, container, &lost);
            e
        };
        let bytes = spans
            .iter()
            .enumerate()
            .map(|(i, s)| {
                match self.shared.read_container_range(
                    s.container,
                    s.start,
                    (s.end - s.start) as usize,
                ) {
                    Ok(b) => Ok(Bytes::from(b)),
                    // The gaps between regions may be what cannot be read
                    // (lost beyond the policy): they were only read to save
                    // requests, so read the regions alone.
                    Err(_) if span_of.iter().filter(|&&x| x == i).count() > 1 => self
                        .read_span_by_region(s, &regions, &span_of, i)
                        .map_err(|(r, e)| noting(e, s.container, &|x| x == r)),
                    Err(e) => Err(noting(e, s.container, &|r| span_of[r] == i)),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Fetched {
            ids: ids.to_vec(),
            locs,
            regions,
            region_of,
            spans,
            span_of,
            bytes,
        })
    }

    /// Span `i` read one region at a time, the gaps left zero (nothing
    /// is cut from them); on failure, the region that failed and why.
    fn read_span_by_region(
        &self,
        span: &Span,
        regions: &[ChunkLocation],
        span_of: &[usize],
        i: usize,
    ) -> std::result::Result<Bytes, (usize, CasError)> {
        let mut buf = vec![0u8; (span.end - span.start) as usize];
        for (r, _) in span_of.iter().enumerate().filter(|(_, &x)| x == i) {
            let loc = &regions[r];
            let got = self
                .shared
                .read_container_range(span.container, loc.region_offset, loc.region_len as usize)
                .map_err(|e| (r, e))?;
            let at = (loc.region_offset - span.start) as usize;
            buf[at..at + got.len()].copy_from_slice(&got);
        }
        Ok(Bytes::from(buf))
    }

    /// The compute half of [`Store::read_chunks`]: decompresses each region
    /// and verifies its chunks in one task (while the region is still in
    /// cache), on every core.
    pub fn decode_fetched(&self, f: Fetched) -> Result<Vec<Bytes>> {
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); f.regions.len()];
        for (i, &r) in f.region_of.iter().enumerate() {
            members[r].push(i);
        }
        let copy = f.copy_out(&members);
        let verified: Vec<Vec<(usize, Result<Bytes>)>> = f
            .regions
            .par_iter()
            .zip(f.span_of.par_iter())
            .zip(members.par_iter().zip(copy.par_iter()))
            .map(|((r, &s), (chunks, &copy))| {
                let from = (r.region_offset - f.spans[s].start) as usize;
                let region = decode_region(r, f.bytes[s].slice(from..from + r.region_len as usize));
                chunks
                    .iter()
                    .map(|&i| {
                        let result = match &region {
                            Ok(region) => self.verify(&f.ids[i], &f.locs[i], region),
                            Err(bad) => Err(bad.of(&f.ids[i])),
                        };
                        let result = match result {
                            Ok(data) if copy => Ok(Bytes::copy_from_slice(&data)),
                            other => other,
                        };
                        (i, result)
                    })
                    .collect()
            })
            .collect();
        let mut out: Vec<Option<Bytes>> = vec![None; f.ids.len()];
        let mut damaged = Vec::new();
        let mut failed = None;
        for (i, result) in verified.into_iter().flatten() {
            match result {
                Ok(data) => out[i] = Some(data),
                Err(e) => {
                    if let CasError::CorruptChunk { .. } = e {
                        damaged.push((f.ids[i], f.locs[i].container));
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        if !damaged.is_empty() {
            self.note_damaged_chunks(&damaged);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(out
            .into_iter()
            .map(|b| b.expect("every chunk belongs to a region"))
            .collect())
    }

    /// Asks the branch to start fetching the regions of `ids` in the
    /// background, so a later [`Store::read_chunks`] of them finds them
    /// close at hand. Unknown chunks are skipped; this never fails.
    pub fn prefetch(&self, ids: &[ChunkId]) {
        let found = self.shared.index.lookup_many(ids).unwrap_or_default();
        let locs: Vec<ChunkLocation> = found.into_iter().flatten().collect();
        self.hint(&locs);
    }

    fn hint(&self, locs: &[ChunkLocation]) {
        let (regions, _) = Self::regions_of(locs);
        let (spans, _) = coalesce(&regions);
        for s in spans {
            self.shared
                .prefetch_container(s.container, s.start, s.end - s.start);
        }
    }
}

/// A region that does not decode: every chunk in it is corrupt, each
/// error naming its own chunk ([`BadRegion::of`]).
struct BadRegion {
    container: ContainerId,
    reason: String,
}

impl BadRegion {
    fn of(&self, id: &ChunkId) -> CasError {
        CasError::CorruptChunk {
            id: *id,
            container: self.container,
            reason: self.reason.clone(),
        }
    }
}

fn decode_region(loc: &ChunkLocation, stored: Bytes) -> std::result::Result<Bytes, BadRegion> {
    region::decode(stored).map_err(|e| BadRegion {
        container: loc.container,
        reason: format!("region at offset {}: {e}", loc.region_offset),
    })
}

/// Reads again when a container vanished under the read: garbage
/// collection may have moved the chunk between the index lookup and the
/// read (or, another client's collection, deleted a container this index
/// still named: the failed read forgot it), and another lookup finds the
/// copy. Gone is also a container every shard of which is missing (a
/// layer that had mapped it), not only one on no branch. A read over
/// many containers may meet several such, one per try; a container
/// that fails twice is lost, not moved.
fn moved_retry<T>(read: impl Fn() -> Result<T>) -> Result<T> {
    let mut failed: Vec<Option<ContainerId>> = Vec::new();
    loop {
        match read() {
            Err(e) if e.is_gone() && failed.len() + 1 < MOVED_TRIES => {
                let container = match &e {
                    CasError::ContainerLost { container, .. } => Some(*container),
                    _ => None,
                };
                if failed.contains(&container) {
                    return Err(e);
                }
                failed.push(container);
            }
            other => return other,
        }
    }
}

/// Tries of a read whose containers vanish under it.
const MOVED_TRIES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(c: u64, off: u64, len: u32) -> ChunkLocation {
        ChunkLocation {
            container: ContainerId(c),
            region_offset: off,
            region_len: len,
            offset_in_region: 0,
            len,
        }
    }

    #[test]
    fn nearby_regions_share_a_read() {
        let regions = [
            loc(1, 8, 100),
            loc(2, 8, 100),
            loc(1, 108, 50),
            loc(1, 1 << 20, 10),
        ];
        let (spans, span_of) = coalesce(&regions);
        assert_eq!(spans.len(), 3);
        assert_eq!(span_of[0], span_of[2]);
        assert_ne!(span_of[0], span_of[3]);
        let s = &spans[span_of[0]];
        assert_eq!((s.start, s.end), (8, 158));
    }

    proptest::proptest! {
        #[test]
        fn region_runs_cover_all_and_split_no_region(
            regions in proptest::collection::vec(0u64..6, 0..300),
            min in 1usize..20,
        ) {
            // Consecutive chunks mostly share a region, as a file's do.
            let locs: Vec<ChunkLocation> =
                regions.iter().map(|&r| loc(r / 3, (r % 3) << 20, 1 << 20)).collect();
            let keys: Vec<(ContainerId, u64)> =
                locs.iter().map(|l| (l.container, l.region_offset)).collect();
            let runs = region_runs(&keys, min);
            let mut next = 0;
            for (k, run) in runs.iter().enumerate() {
                proptest::prop_assert_eq!(run.start, next);
                proptest::prop_assert!(run.end > run.start && run.len() <= 4 * min);
                if k + 1 < runs.len() {
                    proptest::prop_assert!(run.len() >= min);
                    let (last, first) = (&locs[run.end - 1], &locs[run.end]);
                    let split = (last.container, last.region_offset)
                        == (first.container, first.region_offset);
                    proptest::prop_assert!(!split || run.len() == 4 * min);
                }
                next = run.end;
            }
            proptest::prop_assert_eq!(next, locs.len());
        }
    }
}

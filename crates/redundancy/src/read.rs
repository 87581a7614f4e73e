//! Reading containers back: whole or a range, healthy or degraded.
//!
//! Copies: one copy is read, the one balancing picks, and the next on any
//! fault. Coded: only the data shards a read overlaps are read (coding is
//! systematic); a data shard that fails is rebuilt from the same blocks of
//! K other shards, again picked by balancing. Every fault marks its branch
//! degraded.

use std::ops::Range;
use std::time::Instant;

use branch::BlobKey;

use crate::codec;
use crate::error::{Error, Result, ShardFault};
use crate::latency::weighted_order;
use crate::map::{shard_key, Entry};
use crate::members::{BranchId, FaultKind};
use crate::parallel::fan_out;
use crate::policy::Coding;
use crate::shard::{self, Layout, BLOCK};
use crate::Redundant;

impl Redundant {
    /// The whole container, verified.
    pub fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        let entry = self.entry(key)?;
        let layout = &entry.layout;
        let all = 0..layout.blocks();
        if layout.policy.coding() == Coding::Copies {
            return self.read_copies(key, &entry, &all);
        }
        let wanted: Vec<(u16, Range<u64>)> = (0..layout.k()).map(|i| (i, all.clone())).collect();
        let mut spans = self.read_coded(key, &entry, &wanted)?.into_iter();
        let mut out = spans.next().expect("K >= 1");
        let len = layout.container_len as usize;
        out.truncate(len);
        out.reserve(len - out.len());
        for span in spans {
            let room = len - out.len();
            out.extend_from_slice(&span[..span.len().min(room)]);
        }
        Ok(out)
    }

    /// `len` bytes at `offset` of the container, verified, reading only
    /// the blocks that hold them while their shards are healthy.
    pub fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        let entry = self.entry(key)?;
        let layout = &entry.layout;
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= layout.container_len)
            .ok_or_else(|| Error::OutOfRange {
                key: key.clone(),
                offset,
                len,
                size: layout.container_len,
            })?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let pieces = data_spans(layout, offset..end);
        let wanted: Vec<(u16, Range<u64>)> = pieces
            .iter()
            .map(|(i, span)| (*i, layout.blocks_for(span)))
            .collect();
        if layout.policy.coding() == Coding::Copies {
            let mut bytes = self.read_copies(key, &entry, &wanted[0].1)?;
            let skip = (offset - wanted[0].1.start * BLOCK) as usize;
            bytes.copy_within(skip..skip + len, 0);
            bytes.truncate(len);
            return Ok(bytes);
        }
        let spans = self.read_coded(key, &entry, &wanted)?;
        let mut out = Vec::with_capacity(len);
        for ((_, span), ((_, blocks), bytes)) in pieces.iter().zip(wanted.iter().zip(&spans)) {
            let skip = (span.start - blocks.start * BLOCK) as usize;
            out.extend_from_slice(&bytes[skip..skip + (span.end - span.start) as usize]);
        }
        Ok(out)
    }

    /// Hints the branches a read of `len` bytes at `offset` would most
    /// likely use that it is coming. Never fails.
    pub fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        let Some(entry) = self.map.get(key) else {
            return;
        };
        let layout = &entry.layout;
        let end = offset.saturating_add(len).min(layout.container_len);
        if offset >= end {
            return;
        }
        let score = |id: BranchId| self.member(id).score().unwrap_or(0.0);
        for (index, span) in data_spans(layout, offset..end) {
            // Any copy can serve a copy policy: the first without
            // balancing, else the best scored is the likeliest pick.
            let candidates = match layout.policy.coding() {
                Coding::Copies => located(&entry, &[]),
                Coding::Xor | Coding::ReedSolomon => located(&entry, &[])
                    .into_iter()
                    .filter(|(i, _)| *i == index)
                    .collect(),
            };
            let best = if self.balancing() {
                candidates
                    .into_iter()
                    .min_by(|a, b| score(a.1).total_cmp(&score(b.1)))
            } else {
                candidates.into_iter().next()
            };
            if let Some((shard, id)) = best {
                let (off, n) = layout.blob_span(&layout.blocks_for(&span));
                self.member(id)
                    .branch
                    .prefetch(&shard_key(key, shard), off, n as u64);
            }
        }
    }

    /// Reads one shard's `blocks` from branch `id`, verified; records the
    /// branch's latency, or its fault.
    pub(crate) fn read_shard(
        &self,
        key: &BlobKey,
        layout: &Layout,
        index: u16,
        id: BranchId,
        blocks: &Range<u64>,
    ) -> Result<Vec<u8>, ShardFault> {
        let member = self.member(id);
        let blob = shard_key(key, index);
        let start = Instant::now();
        let whole = *blocks == (0..layout.blocks());
        let read = if whole {
            member.branch.get(&blob)
        } else {
            let (off, n) = layout.blob_span(blocks);
            member.branch.read_range(&blob, off, n)
        };
        let took = start.elapsed();
        let checked = match read {
            Ok(bytes) if whole => shard::decode(layout, index, bytes),
            Ok(bytes) => shard::decode_blocks(layout, index, blocks, bytes),
            Err(err) => {
                let kind = FaultKind::of(&err);
                return Err(self.fault(key, id, index, kind, err.to_string()));
            }
        };
        match checked {
            Ok(payload) => {
                member.read_ok(took);
                Ok(payload)
            }
            Err(bad) => Err(self.fault(key, id, index, FaultKind::Corrupt, bad.0)),
        }
    }

    fn fault(
        &self,
        key: &BlobKey,
        id: BranchId,
        index: u16,
        kind: FaultKind,
        detail: String,
    ) -> ShardFault {
        let member = self.member(id);
        member.fault(kind, &format!("{}: {detail}", shard_key(key, index)));
        ShardFault {
            index,
            branch: Some(member.name.clone()),
            kind,
            detail,
        }
    }

    /// Candidate (shard, branch) pairs in the order to try them: drawn by
    /// latency when balancing, else as given (index order).
    pub(crate) fn order(&self, mut candidates: Vec<(u16, BranchId)>) -> Vec<(u16, BranchId)> {
        if !self.balancing() || candidates.len() < 2 {
            return candidates;
        }
        let scores: Vec<Option<f64>> = candidates
            .iter()
            .map(|(_, id)| self.member(*id).score())
            .collect();
        let order = weighted_order(&scores, &mut rand::thread_rng());
        let mut slots: Vec<Option<(u16, BranchId)>> = candidates.drain(..).map(Some).collect();
        order
            .into_iter()
            .map(|i| slots[i].take().expect("a permutation"))
            .collect()
    }

    /// `blocks` of the container from any one copy.
    fn read_copies(&self, key: &BlobKey, entry: &Entry, blocks: &Range<u64>) -> Result<Vec<u8>> {
        let mut lost = Vec::new();
        for (index, id) in self.order(located(entry, &[])) {
            match self.read_shard(key, &entry.layout, index, id, blocks) {
                Ok(payload) => return Ok(payload),
                Err(fault) => lost.push(fault),
            }
        }
        Err(unrecoverable(key, entry, lost, &[]))
    }

    /// `blocks` of each wanted data shard, rebuilding those that fail.
    pub(crate) fn read_coded(
        &self,
        key: &BlobKey,
        entry: &Entry,
        wanted: &[(u16, Range<u64>)],
    ) -> Result<Vec<Vec<u8>>> {
        let layout = &entry.layout;
        let first = fan_out(wanted, |(index, blocks)| {
            let mut faults = Vec::new();
            for &id in &entry.locations[usize::from(*index)] {
                match self.read_shard(key, layout, *index, id, blocks) {
                    Ok(payload) => return Ok(payload),
                    Err(fault) => faults.push(fault),
                }
            }
            Err(faults)
        });
        let mut faults = Vec::new();
        let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(wanted.len());
        for r in first {
            match r {
                Ok(payload) => out.push(Some(payload)),
                Err(f) => {
                    faults.extend(f);
                    out.push(None);
                }
            }
        }
        let failed: Vec<usize> = (0..wanted.len()).filter(|&j| out[j].is_none()).collect();
        if failed.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        // Rebuild the failed shards over one span covering all of them.
        let union = failed
            .iter()
            .map(|&j| wanted[j].1.clone())
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
            .expect("something failed");
        let want_span = layout.payload_span(&union);
        let lost: Vec<u16> = failed.iter().map(|&j| wanted[j].0).collect();
        let reuse: Vec<(u16, Vec<u8>)> = wanted
            .iter()
            .zip(&out)
            .filter_map(|((index, blocks), payload)| {
                let payload = payload.as_ref()?;
                let have = layout.payload_span(blocks);
                let covers = have.start <= want_span.start && want_span.end <= have.end;
                covers.then(|| {
                    let from = (want_span.start - have.start) as usize;
                    let to = (want_span.end - have.start) as usize;
                    (*index, payload[from..to].to_vec())
                })
            })
            .collect();
        let have = self.gather(key, entry, &union, &lost, reuse, faults)?;
        let refs: Vec<(u16, &[u8])> = have.iter().map(|(i, b)| (*i, b.as_slice())).collect();
        let rebuilt = codec::rebuild(layout, &refs, &lost).map_err(|source| Error::Coding {
            key: key.clone(),
            source,
        })?;
        for (&j, bytes) in failed.iter().zip(rebuilt) {
            let own = layout.payload_span(&wanted[j].1);
            let from = (own.start - want_span.start) as usize;
            out[j] = Some(bytes[from..from + (own.end - own.start) as usize].to_vec());
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Adds verified `blocks` of other shards to `have` until it holds K,
    /// never reading a shard in `exclude`. Faults met on the way (and
    /// `faults` from before) are named in the error if K cannot be had.
    pub(crate) fn gather(
        &self,
        key: &BlobKey,
        entry: &Entry,
        blocks: &Range<u64>,
        exclude: &[u16],
        mut have: Vec<(u16, Vec<u8>)>,
        mut faults: Vec<ShardFault>,
    ) -> Result<Vec<(u16, Vec<u8>)>> {
        let k = usize::from(entry.layout.k());
        let mut skip: Vec<u16> = exclude.to_vec();
        skip.extend(have.iter().map(|(i, _)| *i));
        let mut candidates = self.order(located(entry, &skip)).into_iter();
        while have.len() < k {
            let mut batch: Vec<(u16, BranchId)> = Vec::new();
            for (index, id) in candidates.by_ref() {
                let taken = have.iter().any(|(i, _)| *i == index);
                if !taken && !batch.iter().any(|(i, _)| *i == index) {
                    batch.push((index, id));
                    if batch.len() == k - have.len() {
                        break;
                    }
                }
            }
            if batch.is_empty() {
                let good: Vec<u16> = have.iter().map(|(i, _)| *i).collect();
                return Err(unrecoverable(key, entry, faults, &good));
            }
            let results = fan_out(&batch, |&(index, id)| {
                self.read_shard(key, &entry.layout, index, id, blocks)
            });
            for (&(index, _), r) in batch.iter().zip(results) {
                match r {
                    Ok(payload) => have.push((index, payload)),
                    Err(fault) => faults.push(fault),
                }
            }
        }
        Ok(have)
    }
}

/// Every (shard, branch) location of a container, shards in `skip` left out.
pub(crate) fn located(entry: &Entry, skip: &[u16]) -> Vec<(u16, BranchId)> {
    (0..)
        .zip(&entry.locations)
        .filter(|(i, _)| !skip.contains(i))
        .flat_map(|(i, ids)| ids.iter().map(move |id| (i, *id)))
        .collect()
}

/// The error for a container that lost too much: every fault of a shard
/// not in `good`, plus the shards no branch is known to hold.
pub(crate) fn unrecoverable(
    key: &BlobKey,
    entry: &Entry,
    faults: Vec<ShardFault>,
    good: &[u16],
) -> Error {
    let mut lost: Vec<ShardFault> = faults
        .into_iter()
        .filter(|f| !good.contains(&f.index))
        .collect();
    for (index, ids) in (0..).zip(&entry.locations) {
        if ids.is_empty() {
            lost.push(unlocated(index));
        }
    }
    lost.sort_by_key(|f| f.index);
    Error::Unrecoverable {
        key: key.clone(),
        policy: entry.layout.policy.clone(),
        needed: entry.layout.k(),
        lost,
    }
}

/// The fault of a shard no branch is known to hold.
pub(crate) fn unlocated(index: u16) -> ShardFault {
    ShardFault {
        index,
        branch: None,
        kind: FaultKind::Missing,
        detail: "no branch is known to hold it".into(),
    }
}

/// The data shards holding container bytes `range`, each with the payload
/// bytes of it they hold. Copies hold everything in "shard" 0.
fn data_spans(layout: &Layout, range: Range<u64>) -> Vec<(u16, Range<u64>)> {
    if layout.policy.coding() == Coding::Copies {
        return vec![(0, range)];
    }
    let s = layout.shard_len;
    let first = range.start / s;
    let last = (range.end - 1) / s;
    (first..=last)
        .map(|i| {
            let base = i * s;
            (
                i as u16,
                range.start.max(base) - base..range.end.min(base + s) - base,
            )
        })
        .collect()
}

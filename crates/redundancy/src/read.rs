//! Reading containers back: whole or a range, healthy or degraded.
//!
//! Damage is judged per block (see [`crate::rows`]). Copies: one copy is
//! read, the one balancing picks, and the blocks that fail are read from
//! the next copy. Coded: only the data shards a read overlaps are read
//! (coding is systematic); a block that fails is decoded from the same row
//! of K other shards whose block there verifies, again picked by
//! balancing. Every fault marks its branch degraded.

use std::ops::Range;

use branch::BlobKey;

use crate::error::{Error, Result, Runs, ShardFault};
use crate::latency::weighted_order;
use crate::map::{shard_key, Entry};
use crate::members::{BranchId, FaultKind};
use crate::parallel::fan_out;
use crate::plain::{plain_get, plain_read_range};
use crate::policy::Coding;
use crate::rows::{self, Span};
use crate::shard::{self, Layout, BLOCK};
use crate::Redundant;

impl Redundant {
    /// The whole container, verified.
    pub fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        if let Some(plain) = &self.plain {
            return plain_get(plain, key);
        }
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
        if let Some(plain) = &self.plain {
            return plain_read_range(plain, key, offset, len);
        }
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
        if let Some(plain) = &self.plain {
            return plain.prefetch(key, offset, len);
        }
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

    /// Reads one shard's `rows` from branch `id`, each block verified on
    /// its own; records the branch's latency, or its fault (a whole read
    /// also checks the header, so a bad header is a fault of the shard even
    /// though its blocks stay usable).
    pub(crate) fn read_span(
        &self,
        key: &BlobKey,
        layout: &Layout,
        index: u16,
        id: BranchId,
        rows: &Range<u64>,
    ) -> (Span, Option<ShardFault>) {
        let member = self.member(id);
        let blob = shard_key(key, index);
        let start = self.clock.now();
        let whole = *rows == (0..layout.blocks());
        let read = if whole {
            member.branch.get(&blob)
        } else {
            let (off, n) = layout.blob_span(rows);
            member.branch.read_range(&blob, off, n)
        };
        let took = self.clock.now().saturating_sub(start);
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(err) => {
                let fault = self.fault(key, id, index, FaultKind::of(&err), err.to_string());
                return (Span::failed(index, rows.clone()), Some(fault));
            }
        };
        let (checked, header) = if whole {
            shard::check_blob(layout, index, bytes)
        } else {
            (shard::check_blocks(layout, index, rows, bytes), None)
        };
        let span = Span::checked(index, rows.clone(), checked);
        let mut why: Vec<String> = header.into_iter().map(|c| c.0).collect();
        if !span.is_clean() {
            why.push(format!("checksum failed in {}", Runs("block", span.bad())));
        }
        if why.is_empty() {
            member.read_ok(took);
            return (span, None);
        }
        let fault = self.fault(key, id, index, FaultKind::Corrupt, why.join("; "));
        (span, Some(fault))
    }

    /// Reads shard `index`'s `rows` from each of `from` in turn until every
    /// block is good, later reads covering only what is still bad.
    fn read_filled(
        &self,
        key: &BlobKey,
        layout: &Layout,
        from: &[(u16, BranchId)],
        rows: &Range<u64>,
        faults: &mut Vec<ShardFault>,
    ) -> Option<Span> {
        let mut have: Option<Span> = None;
        for &(index, id) in from {
            let want = match &have {
                None => rows.clone(),
                Some(span) => match span.bad_run() {
                    Some(run) => run,
                    None => break,
                },
            };
            let (got, fault) = self.read_span(key, layout, index, id, &want);
            faults.extend(fault);
            match &mut have {
                None => have = Some(got),
                Some(span) => span.fill_from(layout, &got),
            }
        }
        have
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
        let order = weighted_order(&scores, &mut *self.rng.lock());
        let mut slots: Vec<Option<(u16, BranchId)>> = candidates.drain(..).map(Some).collect();
        order
            .into_iter()
            .map(|i| slots[i].take().expect("a permutation"))
            .collect()
    }

    /// `blocks` of the container: each block from the first copy (as
    /// balancing orders them) whose block verifies.
    fn read_copies(&self, key: &BlobKey, entry: &Entry, blocks: &Range<u64>) -> Result<Vec<u8>> {
        let layout = &entry.layout;
        let mut faults = Vec::new();
        let order = self.order(located(entry, &[]));
        let span = self.read_filled(key, layout, &order, blocks, &mut faults);
        match span {
            Some(span) if span.is_clean() => Ok(span.into_payload()),
            span => {
                let lost = span.map_or_else(|| blocks.clone().collect(), |s| s.bad().to_vec());
                Err(unrecoverable(key, entry, faults, &lost))
            }
        }
    }

    /// `blocks` of each wanted data shard. A block that fails on every
    /// copy of its shard is decoded from K other shards good in its row,
    /// read over just the runs of rows that need them.
    pub(crate) fn read_coded(
        &self,
        key: &BlobKey,
        entry: &Entry,
        wanted: &[(u16, Range<u64>)],
    ) -> Result<Vec<Vec<u8>>> {
        let layout = &entry.layout;
        let first = fan_out(wanted, |(index, blocks)| {
            let mut faults = Vec::new();
            let from: Vec<(u16, BranchId)> = entry.locations[usize::from(*index)]
                .iter()
                .map(|id| (*index, *id))
                .collect();
            let span = self
                .read_filled(key, layout, &from, blocks, &mut faults)
                .unwrap_or_else(|| Span::failed(*index, blocks.clone()));
            (span, faults)
        });
        let mut faults = Vec::new();
        let mut targets = Vec::with_capacity(wanted.len());
        for (span, f) in first {
            targets.push(span);
            faults.extend(f);
        }
        if targets.iter().all(Span::is_clean) {
            return Ok(targets.into_iter().map(Span::into_payload).collect());
        }
        let skip: Vec<u16> = wanted.iter().map(|(i, _)| *i).collect();
        self.fill_rows(key, entry, &mut targets, &skip, Vec::new(), faults)?;
        Ok(targets.into_iter().map(Span::into_payload).collect())
    }

    /// Makes every block of `targets` good: reads, over each run of rows
    /// some target has bad, as many other shards as the rows need beyond
    /// `sources` (none in `skip` whose target covers the run: those were
    /// read from every copy already), then restores them row by row. Fails
    /// naming every fault (`faults` from before included) when some row
    /// has fewer good blocks than the coding needs.
    pub(crate) fn fill_rows(
        &self,
        key: &BlobKey,
        entry: &Entry,
        targets: &mut [Span],
        skip: &[u16],
        mut sources: Vec<Span>,
        mut faults: Vec<ShardFault>,
    ) -> Result<()> {
        let layout = &entry.layout;
        for run in runs(&rows::bad_rows(targets)) {
            // A skipped shard is read again where its target does not
            // reach: a range read wants different rows of each shard.
            let covered: Vec<u16> = targets
                .iter()
                .filter(|t| skip.contains(&t.index))
                .filter(|t| t.rows.start <= run.start && run.end <= t.rows.end)
                .map(|t| t.index)
                .collect();
            let mut candidates = self.order(located(entry, &covered)).into_iter();
            loop {
                let short = rows::shortfall(layout, targets, &sources, &run);
                let batch: Vec<(u16, BranchId)> = candidates.by_ref().take(short).collect();
                if batch.is_empty() {
                    break;
                }
                let read = fan_out(&batch, |&(index, id)| {
                    self.read_span(key, layout, index, id, &run)
                });
                for (span, fault) in read {
                    sources.push(span);
                    faults.extend(fault);
                }
            }
        }
        let lost = rows::restore(layout, targets, &sources).map_err(|source| Error::Coding {
            key: key.clone(),
            source,
        })?;
        if lost.is_empty() {
            return Ok(());
        }
        let rows: Vec<u64> = lost.iter().map(|l| l.row).collect();
        Err(unrecoverable(key, entry, faults, &rows))
    }
}

/// `rows` (ascending) cut into runs of consecutive rows.
pub(crate) fn runs(rows: &[u64]) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for &row in rows {
        match out.last_mut() {
            Some(run) if run.end == row => run.end += 1,
            _ => out.push(row..row + 1),
        }
    }
    out
}

/// Every (shard, branch) location of a container, shards in `skip` left out.
pub(crate) fn located(entry: &Entry, skip: &[u16]) -> Vec<(u16, BranchId)> {
    (0..)
        .zip(&entry.locations)
        .filter(|(i, _)| !skip.contains(i))
        .flat_map(|(i, ids)| ids.iter().map(move |id| (i, *id)))
        .collect()
}

/// The error for a container some of whose block `rows` have too few
/// good blocks: every fault met, plus the shards no branch is known to hold.
pub(crate) fn unrecoverable(
    key: &BlobKey,
    entry: &Entry,
    mut lost: Vec<ShardFault>,
    rows: &[u64],
) -> Error {
    for (index, ids) in (0..).zip(&entry.locations) {
        if ids.is_empty() {
            lost.push(unlocated(index));
        }
    }
    lost.sort_by_key(|f| f.index);
    lost.dedup();
    Error::Unrecoverable {
        key: key.clone(),
        policy: entry.layout.policy.clone(),
        needed: entry.layout.k(),
        rows: rows.to_vec(),
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

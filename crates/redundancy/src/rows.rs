//! Damage judged per block, not per shard.
//!
//! Every shard block carries its own digest, so a shard with one bad block
//! still offers all its other blocks. Block `b` of every shard of a
//! container makes up row `b`, and each row is coded on its own: a row
//! decodes from any K shards whose block in it verifies (for copies, from
//! any one copy). A container is lost only where some row has fewer than K
//! good blocks, and then only in the data blocks of that row that are bad.

use std::ops::Range;

use crate::codec::{self, CodingError};
use crate::policy::Coding;
use crate::shard::{Checked, Layout};

/// One shard's payload over a run of rows, as read: blocks that did not
/// verify (or were not read at all) are marked bad and never handed out.
#[derive(Debug)]
pub(crate) struct Span {
    pub index: u16,
    pub rows: Range<u64>,
    /// Payload bytes of `rows`; empty while no block of it was read.
    payload: Vec<u8>,
    /// Rows whose block is not good, ascending.
    bad: Vec<u64>,
}

impl Span {
    /// A span none of whose blocks could be read.
    pub fn failed(index: u16, rows: Range<u64>) -> Span {
        Span {
            index,
            bad: rows.clone().collect(),
            rows,
            payload: Vec::new(),
        }
    }

    pub fn checked(index: u16, rows: Range<u64>, checked: Checked) -> Span {
        Span {
            index,
            rows,
            payload: checked.payload,
            bad: checked.bad,
        }
    }

    pub fn is_clean(&self) -> bool {
        self.bad.is_empty()
    }

    pub fn bad(&self) -> &[u64] {
        &self.bad
    }

    /// The rows from the first bad one to the last.
    pub fn bad_run(&self) -> Option<Range<u64>> {
        Some(*self.bad.first()?..*self.bad.last()? + 1)
    }

    fn is_good(&self, row: u64) -> bool {
        self.rows.contains(&row) && self.bad.binary_search(&row).is_err()
    }

    fn local(&self, layout: &Layout, row: u64) -> Range<usize> {
        let base = layout.payload_span(&self.rows).start;
        let span = layout.payload_span(&(row..row + 1));
        (span.start - base) as usize..(span.end - base) as usize
    }

    /// Row `row`'s block, if this span holds it good.
    pub fn block(&self, layout: &Layout, row: u64) -> Option<&[u8]> {
        self.is_good(row)
            .then(|| &self.payload[self.local(layout, row)])
    }

    /// Makes `bytes` row `row`'s block, a good one.
    fn set(&mut self, layout: &Layout, row: u64, bytes: &[u8]) {
        if self.payload.is_empty() {
            let all = layout.payload_span(&self.rows);
            self.payload = vec![0; (all.end - all.start) as usize];
        }
        let at = self.local(layout, row);
        self.payload[at].copy_from_slice(bytes);
        if let Ok(i) = self.bad.binary_search(&row) {
            self.bad.remove(i);
        }
    }

    /// Takes every good block of `other` (the same shard, or any copy of
    /// a copied container) for a bad block of this span.
    pub fn fill_from(&mut self, layout: &Layout, other: &Span) {
        for row in self.bad.clone() {
            if let Some(bytes) = other.block(layout, row) {
                self.set(layout, row, bytes);
            }
        }
    }

    /// The payload, once every block is good.
    pub fn payload(&self) -> &[u8] {
        assert!(
            self.bad.is_empty(),
            "a span with bad blocks is never handed up"
        );
        &self.payload
    }

    /// The payload, once every block is good.
    pub fn into_payload(self) -> Vec<u8> {
        assert!(
            self.bad.is_empty(),
            "a span with bad blocks is never handed up"
        );
        self.payload
    }
}

/// A row that could not be restored, with the shards still bad in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LostRow {
    pub row: u64,
    /// Good blocks the row has, fewer than K.
    pub good: usize,
    pub shards: Vec<u16>,
}

/// Distinct shard indices with a good block in `row`, in index order.
fn good_in<'a>(
    layout: &Layout,
    spans: impl Iterator<Item = &'a Span>,
    row: u64,
) -> Vec<(u16, &'a [u8])> {
    let mut out: Vec<(u16, &[u8])> = Vec::new();
    for s in spans {
        if let Some(bytes) = s.block(layout, row) {
            if !out.iter().any(|(i, _)| *i == s.index) {
                out.push((s.index, bytes));
            }
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out
}

/// How many more good blocks the bad rows of `targets` within `run` need
/// before they can be restored from `targets` and `sources`: the largest
/// shortfall, 0 when every such row can be restored.
pub(crate) fn shortfall(
    layout: &Layout,
    targets: &[Span],
    sources: &[Span],
    run: &Range<u64>,
) -> usize {
    let k = usize::from(layout.k());
    let copies = layout.policy.coding() == Coding::Copies;
    let all = || targets.iter().chain(sources);
    bad_rows(targets)
        .into_iter()
        .filter(|row| run.contains(row))
        .map(|row| {
            let direct = targets
                .iter()
                .filter(|t| t.bad.binary_search(&row).is_ok())
                .all(|t| all().any(|s| (copies || s.index == t.index) && s.is_good(row)));
            if direct {
                return 0;
            }
            k.saturating_sub(good_in(layout, all(), row).len())
        })
        .max()
        .unwrap_or(0)
}

/// Every row some target has bad, ascending.
pub(crate) fn bad_rows(targets: &[Span]) -> Vec<u64> {
    let mut rows: Vec<u64> = targets.iter().flat_map(|t| t.bad.iter().copied()).collect();
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Rows gathered for one decoding call: consecutive, each decoded from the
/// same shards into the same shards.
struct Group {
    rows: Range<u64>,
    from: Vec<u16>,
    into: Vec<u16>,
}

/// Restores the bad blocks of `targets` from the good blocks of `targets`
/// and `sources`: copied from the same shard (any copy, for copies), else
/// decoded row by row from K shards good in that row. Returns the rows
/// that have fewer than K good blocks; their bad blocks stay bad.
pub(crate) fn restore(
    layout: &Layout,
    targets: &mut [Span],
    sources: &[Span],
) -> Result<Vec<LostRow>, CodingError> {
    let copies = layout.policy.coding() == Coding::Copies;
    // Blocks that are somewhere as they are.
    for t in 0..targets.len() {
        for row in targets[t].bad.clone() {
            let same = |s: &&Span| copies || s.index == targets[t].index;
            let found = targets
                .iter()
                .chain(sources)
                .filter(same)
                .find_map(|s| s.block(layout, row))
                .map(<[u8]>::to_vec);
            if let Some(bytes) = found {
                targets[t].set(layout, row, &bytes);
            }
        }
    }
    let k = usize::from(layout.k());
    let mut lost = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    for row in bad_rows(targets) {
        let good = good_in(layout, targets.iter().chain(sources), row);
        let mut into: Vec<u16> = targets
            .iter()
            .filter(|t| t.bad.binary_search(&row).is_ok())
            .map(|t| t.index)
            .collect();
        into.sort_unstable();
        into.dedup();
        if good.len() < k {
            lost.push(LostRow {
                row,
                good: good.len(),
                shards: into,
            });
            continue;
        }
        let from: Vec<u16> = good.iter().take(k).map(|(i, _)| *i).collect();
        match groups.last_mut() {
            Some(g) if g.rows.end == row && g.from == from && g.into == into => g.rows.end += 1,
            _ => groups.push(Group {
                rows: row..row + 1,
                from,
                into,
            }),
        }
    }
    for g in groups {
        decode_group(layout, targets, sources, &g)?;
    }
    Ok(lost)
}

/// Decodes one group's rows (the codes work position by position, so
/// consecutive rows decode as one longer span) and sets them in `targets`.
fn decode_group(
    layout: &Layout,
    targets: &mut [Span],
    sources: &[Span],
    g: &Group,
) -> Result<(), CodingError> {
    let have: Vec<(u16, Vec<u8>)> = g
        .from
        .iter()
        .map(|&index| {
            let mut bytes = Vec::new();
            for row in g.rows.clone() {
                let block = targets
                    .iter()
                    .chain(sources)
                    .filter(|s| s.index == index)
                    .find_map(|s| s.block(layout, row))
                    .expect("chosen because it is good in every row of the group");
                bytes.extend_from_slice(block);
            }
            (index, bytes)
        })
        .collect();
    let refs: Vec<(u16, &[u8])> = have.iter().map(|(i, b)| (*i, b.as_slice())).collect();
    let rebuilt = codec::rebuild(layout, &refs, &g.into)?;
    let base = layout.payload_span(&g.rows).start;
    for (index, bytes) in g.into.iter().zip(rebuilt) {
        for t in targets.iter_mut().filter(|t| t.index == *index) {
            for row in g.rows.clone() {
                let span = layout.payload_span(&(row..row + 1));
                let at = (span.start - base) as usize..(span.end - base) as usize;
                if t.bad.binary_search(&row).is_ok() {
                    t.set(layout, row, &bytes[at]);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{check_blob, encode, BLOCK};

    fn layout(policy: &str, len: u64) -> Layout {
        Layout::new(policy.parse().unwrap(), "containers/1", len)
    }

    /// Every shard of a container of `len` patterned bytes, as read spans.
    fn spans(l: &Layout) -> (Vec<u8>, Vec<Span>) {
        let data: Vec<u8> = (0..l.container_len).map(|i| (i * 7 % 251) as u8).collect();
        let mut payloads: Vec<Vec<u8>> = Vec::new();
        codec::with_redundant(l, &data, |red| {
            for i in 0..l.k() {
                let mut p = codec::data_slice(l, &data, i).to_vec();
                p.resize(l.shard_len as usize, 0);
                payloads.push(if l.policy.coding() == Coding::Copies {
                    data.clone()
                } else {
                    p
                });
            }
            payloads.extend(red.iter().map(|r| r.to_vec()));
        })
        .unwrap();
        while payloads.len() < usize::from(l.shards()) {
            payloads.push(data.clone());
        }
        let spans = (0..l.shards())
            .map(|i| {
                let blob = encode(l, i, &payloads[usize::from(i)]);
                let (checked, _) = check_blob(l, i, blob);
                Span::checked(i, 0..l.blocks(), checked)
            })
            .collect();
        (data, spans)
    }

    fn spoil(s: &mut Span, rows: &[u64]) {
        s.bad.extend_from_slice(rows);
        s.bad.sort_unstable();
        s.bad.dedup();
    }

    #[test]
    fn rows_damaged_in_different_shards_all_come_back() {
        for policy in ["mirror:2", "parity:3", "rs:4+2"] {
            let k = u64::from(policy.parse::<crate::Policy>().unwrap().data_shards());
            let l = layout(policy, (8 * BLOCK + 1234) * k);
            let (data, all) = spans(&l);
            let want: Vec<Vec<u8>> = all.iter().map(|s| s.payload.clone()).collect();
            let (m, n) = (l.policy.tolerance(), usize::from(l.shards()));
            // Every shard has bad blocks, but no row more than M of them.
            let mut damaged = all;
            for (i, s) in damaged.iter_mut().enumerate() {
                let rows: Vec<u64> = (0..l.blocks())
                    .filter(|r| (*r as usize + i) % n < m)
                    .collect();
                assert!(!rows.is_empty());
                spoil(s, &rows);
            }
            let lost = restore(&l, &mut damaged, &[]).unwrap();
            assert!(lost.is_empty(), "{policy}: {lost:?}");
            for (s, w) in damaged.into_iter().zip(&want) {
                assert!(s.into_payload() == *w, "{policy}");
            }
            assert!(!data.is_empty());
        }
    }

    #[test]
    fn a_row_with_too_few_good_blocks_is_named() {
        let l = layout("rs:2+1", 10 * BLOCK);
        let (_, mut all) = spans(&l);
        spoil(&mut all[0], &[1, 3]);
        spoil(&mut all[2], &[3]);
        let (wanted, sources) = all.split_at_mut(1);
        let lost = restore(&l, wanted, sources).unwrap();
        assert_eq!(
            lost,
            vec![LostRow {
                row: 3,
                good: 1,
                shards: vec![0]
            }]
        );
        assert_eq!(wanted[0].bad(), &[3]);
        assert_eq!(shortfall(&l, wanted, sources, &(0..5)), 1);
        assert_eq!(shortfall(&l, wanted, sources, &(0..3)), 0);
    }
}

//! The overwrite judge: decides from what an apply would re-store that a
//! content-defined file is being overwritten in place, and should be cut
//! in fixed blocks.
//!
//! The detector of [`crate::pattern`] watches write offsets, but with the
//! kernel's writeback cache those arrive in file order whatever the program
//! did: a database's scattered page writes look like a front-to-back pass.
//! What an apply is about to do does not depend on that order: a dirty run
//! inside stored chunks re-stores the whole chunks around it, so the bytes
//! re-stored beyond the ones written say how badly content-defined chunks
//! fit the file, whatever the order, pace or size of the writes.

use crate::file::FileState;

/// Overwrites seen before a verdict: one small edit of a document is no
/// reason to change how it is cut.
const RUNS_MIN: u32 = 8;
/// Files smaller than this are never switched: their chunks are few, and
/// re-cutting one costs little.
pub const SIZE_MIN: u64 = 1 << 20;

/// What the overwrites of a file have cost so far.
#[derive(Debug, Default, Clone)]
pub struct Overwrites {
    /// Dirty runs applied inside stored data.
    runs: u32,
    /// Their bytes.
    written: u64,
    /// Old bytes around them that were re-stored with them.
    restored: u64,
}

impl Overwrites {
    /// Adds what applying the file's dirty runs would re-store; true when
    /// the file should now be cut in fixed blocks: more than half again
    /// the bytes overwritten re-stored around them (at that rate a file
    /// overwritten at random stores over 1.5 times what was written).
    pub fn judge(&mut self, f: &FileState) -> bool {
        let stored_end = f.extents_end();
        // Spans of the stored extents each run touches, merged.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut written = 0;
        for (&s, run) in f.dirty.range(..stored_end) {
            let e = (s + run.len() as u64).min(stored_end);
            let a = f.extents.partition_point(|x| x.offset + x.len <= s);
            let b = f.extents.partition_point(|x| x.offset < e);
            let (Some(first), Some(last)) =
                (f.extents.get(a), b.checked_sub(1).map(|b| &f.extents[b]))
            else {
                continue;
            };
            // Holes are split at the runs' edges: nothing around a write
            // into one is re-stored.
            let (lo, hi) = if first.chunk.is_none() && a + 1 == b {
                (s, e)
            } else {
                (first.offset, last.offset + last.len)
            };
            self.runs = self.runs.saturating_add(1);
            written += e - s;
            match spans.last_mut() {
                Some(p) if lo <= p.1 => p.1 = p.1.max(hi),
                _ => spans.push((lo, hi)),
            }
        }
        let span: u64 = spans.iter().map(|(lo, hi)| hi - lo).sum();
        self.written += written;
        self.restored += span.saturating_sub(written);
        self.runs >= RUNS_MIN && f.size >= SIZE_MIN && self.restored > self.written / 2
    }
}

//! The byte ranges of a file whose extents changed since its recipe tree
//! was last stored, so the next store rebuilds only the leaves over them
//! ([`recipe::store_tree_changed`]) instead of walking every extent: a
//! database-like job spent a third of the daemon's CPU walking a 512 MiB
//! file's 131,072 extents at every fsync to change a few dozen.
//!
//! Every change to a file's extents must be noted here (a missed one would
//! let a stale leaf stand). Debug builds check each tree stored this way
//! against one stored from every extent (see `Inner::record_chunks`), so
//! the test suites catch a change that is not noted.

use std::ops::Range;

/// Past this many separate ranges the next store walks every extent.
const MAX_RANGES: usize = 4096;

#[derive(Debug, Default)]
pub struct Changed {
    ranges: Vec<Range<u64>>,
    /// Too many ranges, or a change not described by one: rebuild all.
    all: bool,
}

impl Changed {
    pub fn touch(&mut self, range: Range<u64>) {
        if self.all || range.is_empty() {
            return;
        }
        if self.ranges.len() >= MAX_RANGES {
            self.everything();
            return;
        }
        self.ranges.push(range);
    }

    pub fn everything(&mut self) {
        self.all = true;
        self.ranges = Vec::new();
    }

    /// The changes so far, sorted and merged (`None`: everything), and a
    /// fresh start.
    pub fn take(&mut self) -> Option<Vec<Range<u64>>> {
        let all = std::mem::take(&mut self.all);
        let mut ranges = std::mem::take(&mut self.ranges);
        if all {
            return None;
        }
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        Some(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_come_back_sorted_and_merged() {
        let mut c = Changed::default();
        c.touch(10..20);
        c.touch(0..5);
        c.touch(15..30);
        c.touch(40..40);
        assert_eq!(c.take(), Some(vec![0..5, 10..30]));
        assert_eq!(c.take(), Some(vec![]));
    }

    #[test]
    fn too_many_ranges_mean_everything() {
        let mut c = Changed::default();
        for i in 0..=MAX_RANGES as u64 {
            c.touch(i * 10..i * 10 + 1);
        }
        assert_eq!(c.take(), None);
        assert_eq!(c.take(), Some(vec![]));
    }
}

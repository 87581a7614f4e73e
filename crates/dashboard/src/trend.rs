//! Capacity over time, for the dashboard's plots: a bounded series of
//! points, at least [`SPACING`] seconds apart (a newer figure within that
//! replaces the last point, so the plot always ends at the latest one).
//! Pure logic: the caller gives each point its time.

use std::collections::VecDeque;

use serde::Serialize;

/// Points kept: five days at one per five minutes.
pub const POINTS: usize = 1440;
/// Seconds between two kept points.
pub const SPACING: u64 = 60;

/// The store's figures at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    /// Seconds since the Unix epoch.
    pub t: u64,
    /// Bytes the live files, versions, snapshots and streams hold.
    pub logical: u64,
    /// Bytes of distinct chunks, uncompressed.
    pub unique: u64,
    /// Bytes of containers on the branches.
    pub stored: u64,
}

#[derive(Debug, Default)]
pub struct Trend(VecDeque<Point>);

impl Trend {
    pub fn record(&mut self, p: Point) {
        match self.0.back_mut() {
            Some(last) if p.t < last.t.saturating_add(SPACING) => *last = p,
            _ => {
                self.0.push_back(p);
                if self.0.len() > POINTS {
                    self.0.pop_front();
                }
            }
        }
    }

    pub fn points(&self) -> Vec<Point> {
        self.0.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: u64, stored: u64) -> Point {
        Point {
            t,
            logical: 2 * stored,
            unique: stored,
            stored,
        }
    }

    #[test]
    fn points_closer_than_the_spacing_replace_the_last() {
        let mut tr = Trend::default();
        tr.record(at(1000, 1));
        tr.record(at(1000 + SPACING - 1, 2));
        assert_eq!(tr.points(), vec![at(1000 + SPACING - 1, 2)]);
        tr.record(at(1000 + 2 * SPACING, 3));
        assert_eq!(tr.points().len(), 2);
        assert_eq!(tr.points()[1], at(1000 + 2 * SPACING, 3));
    }

    #[test]
    fn the_series_keeps_its_newest_points() {
        let mut tr = Trend::default();
        for i in 0..(POINTS as u64 + 10) {
            tr.record(at(i * SPACING, i));
        }
        let p = tr.points();
        assert_eq!(p.len(), POINTS);
        assert_eq!(p[0].stored, 10);
        assert_eq!(p.last().unwrap().stored, POINTS as u64 + 9);
    }
}

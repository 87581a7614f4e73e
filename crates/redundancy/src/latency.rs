//! Read latency estimates and latency-proportional choice between branches.
//!
//! Each branch keeps a smoothed latency and a smoothed deviation, updated
//! the way TCP estimates round-trip time, and is scored by
//! `latency + DEVIATION_WEIGHT * deviation`: a branch that is slow, or
//! erratic, scores high. A read that several branches could serve picks
//! one with probability proportional to the inverse of its score, so a
//! branch twice as slow gets about half the share of the other, and none
//! is starved of the reads that would show it has recovered.

use std::time::Duration;

use rand::Rng;

/// Weight of a new sample in the smoothed latency.
const GAIN: f64 = 1.0 / 8.0;
/// Weight of a new sample in the smoothed deviation.
const DEVIATION_GAIN: f64 = 1.0 / 4.0;
/// How much an erratic branch is penalised. TCP uses 4 to set a timeout
/// that is rarely hit; balancing wants the typical latency, so less.
const DEVIATION_WEIGHT: f64 = 2.0;
/// Floor for a score, so an implausibly fast sample cannot take all reads.
const MIN_SCORE: f64 = 1e-6;

#[derive(Debug, Clone, Default)]
pub struct Estimator {
    /// (smoothed latency, smoothed deviation) in seconds, once sampled.
    state: Option<(f64, f64)>,
}

impl Estimator {
    pub fn observe(&mut self, sample: Duration) {
        let r = sample.as_secs_f64();
        self.state = Some(match self.state {
            None => (r, r / 2.0),
            Some((mean, dev)) => (
                mean + GAIN * (r - mean),
                dev + DEVIATION_GAIN * ((r - mean).abs() - dev),
            ),
        });
    }

    /// The branch's score in seconds; `None` before its first read.
    pub fn score(&self) -> Option<f64> {
        self.state
            .map(|(mean, dev)| (mean + DEVIATION_WEIGHT * dev).max(MIN_SCORE))
    }
}

/// Orders candidates for a read: each next one is drawn with probability
/// proportional to 1/score among those left. A candidate never measured
/// counts as the best measured one, so new branches get tried.
pub fn weighted_order(scores: &[Option<f64>], rng: &mut impl Rng) -> Vec<usize> {
    let best = scores
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let best = if best.is_finite() { best } else { 1.0 };
    let mut left: Vec<(usize, f64)> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| (i, 1.0 / s.unwrap_or(best)))
        .collect();
    let mut order = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let total: f64 = left.iter().map(|(_, w)| w).sum();
        let mut x = rng.gen::<f64>() * total;
        let mut pick = left.len() - 1;
        for (j, (_, w)) in left.iter().enumerate() {
            if x < *w {
                pick = j;
                break;
            }
            x -= w;
        }
        order.push(left.remove(pick).0);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn steady_latency_converges_to_itself() {
        let mut e = Estimator::default();
        assert_eq!(e.score(), None);
        for _ in 0..200 {
            e.observe(ms(10));
        }
        let s = e.score().unwrap();
        assert!((s - 0.010).abs() < 0.0001, "{s}");
    }

    #[test]
    fn a_slowdown_raises_the_score_gradually() {
        let mut e = Estimator::default();
        for _ in 0..100 {
            e.observe(ms(10));
        }
        e.observe(ms(100));
        let after_one = e.score().unwrap();
        // One outlier moves the mean by 1/8 of the jump, and the deviation
        // term adds to that: the score rises, but stays far below 100 ms.
        assert!(after_one > 0.030 && after_one < 0.080, "{after_one}");
        for _ in 0..100 {
            e.observe(ms(100));
        }
        let settled = e.score().unwrap();
        assert!((settled - 0.100).abs() < 0.001, "{settled}");
    }

    #[test]
    fn jitter_costs_more_than_its_mean() {
        let (mut steady, mut jittery) = (Estimator::default(), Estimator::default());
        for i in 0..400 {
            steady.observe(ms(10));
            jittery.observe(ms(if i % 2 == 0 { 5 } else { 15 }));
        }
        assert!(jittery.score().unwrap() > steady.score().unwrap() * 1.5);
    }

    #[test]
    fn share_is_inverse_to_score() {
        let mut rng = StdRng::seed_from_u64(7);
        let scores = [Some(0.010), Some(0.020)];
        let trials = 30_000;
        let fast = (0..trials)
            .filter(|_| weighted_order(&scores, &mut rng)[0] == 0)
            .count();
        let share = fast as f64 / trials as f64;
        assert!((share - 2.0 / 3.0).abs() < 0.02, "{share}");
    }

    #[test]
    fn order_is_a_permutation_and_unmeasured_branches_are_tried() {
        let mut rng = StdRng::seed_from_u64(1);
        let scores = [Some(0.010), None, Some(0.040)];
        let mut firsts = [0usize; 3];
        for _ in 0..9_000 {
            let mut order = weighted_order(&scores, &mut rng);
            firsts[order[0]] += 1;
            order.sort();
            assert_eq!(order, vec![0, 1, 2]);
        }
        // Unmeasured counts as the best (10 ms): weights 1 : 1 : 1/4.
        assert!(firsts[1] > 3_500 && firsts[2] < 1_400, "{firsts:?}");
    }
}

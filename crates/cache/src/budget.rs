//! The write-rate budget: a token bucket of bytes, refilled at the rate
//! and holding at most one second of it.

use std::time::Instant;

pub(crate) struct Budget {
    rate: u64,
    tokens: f64,
    at: Instant,
}

impl Budget {
    pub(crate) fn new(rate: u64) -> Self {
        Budget {
            rate,
            tokens: rate as f64,
            at: Instant::now(),
        }
    }

    /// Takes `bytes` from the bucket if it holds them.
    pub(crate) fn take(&mut self, bytes: u64) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.rate as f64;
        self.tokens = (self.tokens + refill).min(self.rate as f64);
        self.at = now;
        if self.tokens < bytes as f64 {
            return false;
        }
        self.tokens -= bytes as f64;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_of_budget_then_nothing() {
        let mut b = Budget::new(1000);
        assert!(b.take(600));
        assert!(b.take(300));
        assert!(!b.take(600), "900 of 1000 spent within a moment");
        let mut none = Budget::new(0);
        assert!(!none.take(1));
    }
}

//! The write-rate budget: a token bucket of bytes, refilled at the rate
//! and holding at most one second of it. Time comes from a clock the
//! tier is given, so tests decide how much of it passes.

use std::time::Instant;

/// Where the budget's time comes from.
pub(crate) type Clock = Box<dyn Fn() -> Instant + Send>;

pub(crate) struct Budget {
    rate: u64,
    tokens: f64,
    at: Instant,
    clock: Clock,
}

impl Budget {
    pub(crate) fn new(rate: u64, clock: Clock) -> Self {
        Budget {
            rate,
            tokens: rate as f64,
            at: clock(),
            clock,
        }
    }

    /// Takes `bytes` from the bucket if it holds them.
    pub(crate) fn take(&mut self, bytes: u64) -> bool {
        let now = (self.clock)();
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate as f64;
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
pub(crate) mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// A clock that moves only when the test moves it.
    pub(crate) fn manual() -> (Clock, Arc<Mutex<Instant>>) {
        let now = Arc::new(Mutex::new(Instant::now()));
        let read = now.clone();
        (Box::new(move || *read.lock().unwrap()), now)
    }

    #[test]
    fn a_second_of_budget_then_nothing_until_time_passes() {
        let (clock, now) = manual();
        let mut b = Budget::new(1000, clock);
        assert!(b.take(600));
        assert!(b.take(300));
        assert!(!b.take(600), "900 of 1000 spent, no time passed");
        *now.lock().unwrap() += Duration::from_millis(500);
        assert!(b.take(600), "half a second refills 500");
        *now.lock().unwrap() += Duration::from_secs(10);
        assert!(!b.take(1001), "the bucket holds one second at most");
        let (clock, _) = manual();
        let mut none = Budget::new(0, clock);
        assert!(!none.take(1));
    }
}

//! Where elapsed time comes from, so that what measures it (read balancing)
//! and what spends it (a slow branch in a test) can run on a clock the test
//! controls, and no test depends on the machine's speed.

use std::cell::Cell;
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// A monotonic clock that can also be waited on.
pub trait Clock: Send + Sync + Debug {
    /// Time since an arbitrary start, never going back.
    fn now(&self) -> Duration;
    /// Lets `d` pass.
    fn sleep(&self, d: Duration);
}

/// The machine's monotonic clock; `sleep` sleeps.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    start: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            start: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

thread_local! {
    static VIRTUAL_NOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Virtual time, one count per thread: `sleep` returns at once and moves
/// the calling thread's clock on by exactly that much, and nothing else
/// does. A measurement made on one thread (start, operation, end) sees
/// exactly the time the operation slept, however fast the machine runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct VirtualClock;

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        VIRTUAL_NOW.with(Cell::get)
    }

    fn sleep(&self, d: Duration) {
        VIRTUAL_NOW.with(|now| now.set(now.get().saturating_add(d)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_time_moves_only_by_sleeps_of_the_same_thread() {
        let clock = VirtualClock;
        let start = clock.now();
        clock.sleep(Duration::from_millis(4));
        assert_eq!(clock.now() - start, Duration::from_millis(4));
        let other = std::thread::spawn(move || {
            let start = clock.now();
            clock.sleep(Duration::from_secs(1));
            clock.now() - start
        });
        assert_eq!(other.join().unwrap(), Duration::from_secs(1));
        assert_eq!(clock.now() - start, Duration::from_millis(4));
    }
}

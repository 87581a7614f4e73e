//! Waiting for what another process does in its own time (an etcd lease
//! lapsing, a daemon answering): polled, with a deadline that only turns
//! "never" into a failure naming what was awaited, never a measure.

use std::time::{Duration, Instant};

/// Longest wait before [`until`] fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// Calls `f` every 200 ms until it says done; panics with `what` if it
/// has not within a minute.
pub fn until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < DEADLINE, "never: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

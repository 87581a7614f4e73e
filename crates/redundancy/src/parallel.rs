//! Running one blocking branch call per shard at once.
//!
//! Shard I/O waits on disks and networks, not on the CPU, so it runs on
//! scoped threads rather than a CPU-sized pool: a slow branch then costs a
//! container one branch's latency, not the sum of all of them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

/// Upper bound on threads per call; wider policies queue the rest.
const MAX_THREADS: usize = 16;

/// `f` applied to every item, concurrently; results in item order.
pub fn fan_out<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut results: Vec<(usize, R)> = thread::scope(|s| {
        let helpers: Vec<_> = (1..items.len().min(MAX_THREADS))
            .map(|_| s.spawn(work))
            .collect();
        let mut all = work();
        for h in helpers {
            match h.join() {
                Ok(part) => all.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    results.sort_unstable_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn results_keep_item_order() {
        let items: Vec<u32> = (0..100).collect();
        assert_eq!(
            fan_out(&items, |x| x * 2),
            (0..100).map(|x| x * 2).collect::<Vec<_>>()
        );
        assert_eq!(fan_out(&[] as &[u32], |x| *x), Vec::<u32>::new());
    }

    #[test]
    fn blocking_calls_overlap() {
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        fan_out(&[0; 8], |_| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            // Long enough that the other threads start meanwhile.
            thread::sleep(Duration::from_millis(50));
            running.fetch_sub(1, Ordering::SeqCst);
        });
        assert!(
            most.load(Ordering::SeqCst) > 1,
            "the calls ran one at a time"
        );
    }
}

//! The allocator: mimalloc, told to give freed memory back to the kernel
//! soon after it is freed.
//!
//! mimalloc keeps freed pages for reuse; with glibc's allocator the many
//! multi-MiB buffers of ingest and read-back were returned to the kernel and
//! faulted in again, which cost about a tenth of all CPU time. But mimalloc
//! 3 keeps a freed page for a whole second (`purge_delay`) before returning
//! it, and the write and read pipelines free buffers on other threads than
//! the ones that allocated them, so under a mix of random and sequential
//! jobs the daemon's RSS stood well above its live heap (`docs/file-system.md`,
//! "Memory"). A delay of [`PURGE_DELAY_MS`] keeps the pages of one burst (a
//! container, a read-ahead step) for the next and returns the rest. Measured
//! (768 MiB written then read cold, three to seven runs on a busy machine,
//! medians): 1 s gave 311 MiB/s write and 675 MiB/s read, 250 ms 310 and
//! 587, 100 ms 242 and 530; the peak RSS of the random jobs moved less than
//! its run-to-run spread between 100 ms and 1 s.
//!
//! That retention is what took the daemon past its budgets: under a 64 KiB
//! random-write load its peak RSS stood about 200 MiB above the sum of its
//! budgets, and about 130 MiB below it with no delay at all. So a daemon
//! also runs a [`govern`] thread: when its RSS nears the sum of its
//! budgets, freed pages go back to the kernel at once (and what is already
//! waiting is returned) and the DRAM chunk cache shrinks to a quarter; when
//! it is well below again, both come back. Throughput pays only while
//! memory is tight.

use std::ffi::c_long;
use std::time::Duration;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3's `mi_option_purge_delay`, which libmimalloc-sys does not
/// name; the test below checks it against the option's default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Milliseconds a freed page is kept before it is returned to the kernel.
const PURGE_DELAY_MS: c_long = 250;
/// The variable by which mimalloc reads the option, which wins over ours.
const PURGE_DELAY_VAR: &str = "MIMALLOC_PURGE_DELAY";

/// The purge delay while memory is tight. Not 0: mimalloc stops visiting
/// pages already waiting for their delay when it is 0, and those would stay.
const TIGHT_PURGE_DELAY_MS: c_long = 1;
/// How often the governor reads the RSS: at a few hundred MB/s of writes,
/// 50 ms is a few MiB of growth.
const GOVERN_EVERY: Duration = Duration::from_millis(50);

/// Sets the allocator's options, unless the environment sets them.
pub fn tune() {
    if std::env::var_os(PURGE_DELAY_VAR).is_none() {
        set_purge_delay(PURGE_DELAY_MS);
    }
}

fn set_purge_delay(ms: c_long) {
    // SAFETY: sets one option by its number; mimalloc reads options
    // atomically, so a call while other threads allocate is sound.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, ms) }
}

/// Starts the thread that keeps the daemon's RSS under `limit` bytes (the
/// sum of its budgets, `repo::Config::memory_limit`): while memory is
/// tight the allocator returns freed pages at once (unless the environment
/// sets the purge delay: the operator's choice wins) and the file
/// system's DRAM cache yields (`fs::Fs::memory_pressure`; held weakly, so
/// that the governor never keeps a file system open; the thread ends with
/// it). Nothing when the RSS cannot be read.
pub fn govern(limit: u64, fs: std::sync::Weak<fs::Fs>) {
    if rss().is_none() {
        return;
    }
    let tune_allocator = std::env::var_os(PURGE_DELAY_VAR).is_none();
    let mut governor = Governor::new(limit);
    let spawned = std::thread::Builder::new()
        .name("mem-governor".into())
        .spawn(move || loop {
            if fs.strong_count() == 0 {
                return; // the file system is gone: nothing left to govern
            }
            if let Some(rss) = rss() {
                if let Some(p) = governor.observe(rss) {
                    let tight = p == Pressure::Tight;
                    tracing::debug!(rss, limit, tight, "memory pressure changed");
                    if tune_allocator {
                        set_purge_delay(if tight {
                            TIGHT_PURGE_DELAY_MS
                        } else {
                            PURGE_DELAY_MS
                        });
                    }
                    if let Some(fs) = fs.upgrade() {
                        fs.memory_pressure(tight);
                    }
                }
                if governor.tight && tune_allocator {
                    // SAFETY: a plain call; `true` also returns the pages
                    // of every arena that wait for their delay.
                    unsafe { libmimalloc_sys::mi_collect(true) }
                }
            }
            std::thread::sleep(GOVERN_EVERY);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no memory governor thread: the RSS may pass the budgets");
    }
}

/// The process's resident set in bytes (`/proc/self/statm`).
fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: a plain getter.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[derive(Debug, PartialEq, Eq)]
enum Pressure {
    Tight,
    Relaxed,
}

/// When memory counts as tight: from 85% of the limit up, until the RSS is
/// under 70% again (apart, so that a load near one line does not flip the
/// allocator's mode on every reading).
struct Governor {
    enter: u64,
    leave: u64,
    tight: bool,
}

impl Governor {
    fn new(limit: u64) -> Governor {
        Governor {
            enter: limit / 100 * 85,
            leave: limit / 100 * 70,
            tight: false,
        }
    }

    /// The change a reading of the RSS calls for, if any.
    fn observe(&mut self, rss: u64) -> Option<Pressure> {
        match (self.tight, rss) {
            (false, r) if r >= self.enter => {
                self.tight = true;
                Some(Pressure::Tight)
            }
            (true, r) if r < self.leave => {
                self.tight = false;
                Some(Pressure::Relaxed)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_turns_tight_near_the_limit_and_relaxes_well_below() {
        let mut g = Governor::new(1000 << 20);
        let mib = |m: u64| m << 20;
        assert_eq!(g.observe(mib(500)), None);
        assert_eq!(g.observe(mib(849)), None);
        assert_eq!(g.observe(mib(850)), Some(Pressure::Tight));
        assert_eq!(g.observe(mib(990)), None, "already tight");
        assert_eq!(g.observe(mib(750)), None, "between the lines: still tight");
        assert!(g.tight);
        assert_eq!(g.observe(mib(699)), Some(Pressure::Relaxed));
        assert_eq!(
            g.observe(mib(800)),
            None,
            "between the lines: still relaxed"
        );
        assert_eq!(g.observe(mib(900)), Some(Pressure::Tight));
    }

    #[test]
    fn the_rss_is_read() {
        let rss = rss().expect("/proc/self/statm");
        assert!(rss > 0 && rss < 1 << 40, "{rss}");
    }

    #[test]
    fn the_option_set_is_the_purge_delay() {
        let from_env = std::env::var(PURGE_DELAY_VAR).ok();
        // SAFETY: reads one option by its number.
        let before = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        match from_env.as_deref().map(str::parse::<c_long>) {
            Some(Ok(set)) => assert_eq!(before, set),
            // mimalloc 3's default purge delay: no other option has it.
            _ => assert_eq!(before, 1000, "option {PURGE_DELAY} is not purge_delay"),
        }
        tune();
        // SAFETY: as above.
        let after = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        if from_env.is_none() {
            assert_eq!(after, PURGE_DELAY_MS);
        }
    }
}

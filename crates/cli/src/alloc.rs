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

use std::ffi::c_long;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3's `mi_option_purge_delay`, which libmimalloc-sys does not
/// name; the test below checks it against the option's default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Milliseconds a freed page is kept before it is returned to the kernel.
const PURGE_DELAY_MS: c_long = 250;
/// The variable by which mimalloc reads the option, which wins over ours.
const PURGE_DELAY_VAR: &str = "MIMALLOC_PURGE_DELAY";

/// Sets the allocator's options, unless the environment sets them.
pub fn tune() {
    if std::env::var_os(PURGE_DELAY_VAR).is_none() {
        // SAFETY: sets one option by its number; mimalloc reads options
        // atomically, so a call while other threads allocate is sound.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! Collection without a command: a daemon's thread that starts `gc` by
//! itself once files gave up enough data, or the store grew enough, since
//! the last collection, so that deleted files give their space back
//! without anyone running `cairn gc`.
//!
//! The trigger is the bytes files gave up ([`fs::Fs::released_bytes`]:
//! deleted, truncated, overwritten), a counter read every
//! `gc.auto_check_seconds`: no walk, nothing read from disk. A collection
//! starts once it moved by `gc.auto_after` since the last one, and by an
//! eighth of what the store held after it ([`cas::Store::stored_bytes`],
//! [`AutoGc::due`]):
//! marking costs time in proportion to the whole store, and this keeps its
//! cost in proportion to what changed since. It runs as a job started
//! "by auto" (listed by the dashboard and `/metrics` like any other), with
//! the defaults of `cairn gc`, its reads in the background class of
//! `cas::qos` (they yield to the file system's readers); a collection
//! already running, from a command or the dashboard, is not doubled.
//!
//! **Throttled.** A collection marks and reads while the file system is in
//! use; after one that took `d`, the next waits until `REST` times `d` has
//! passed since it ended ([`rested`]), so collections take at most a fifth
//! of the wall clock however fast garbage is made (a database rewriting its
//! pages makes it all the time), and the file system keeps the rest. Low
//! space does not wait.
//!
//! **Low space.** When the store's branches can take less than
//! `gc.keep_free_percent` of their capacity, the oldest automatic version
//! is dropped at each check (never the newest, never a snapshot or label)
//! and a collection runs, so that what old versions hold comes back before
//! writes fail, as Time Machine thins its backups. Each drop is logged.
//!
//! **Never** runs on a read-only mount, nor over a namespace other clients
//! share (the daemon does not start it: a collection across clients waits
//! on all of them, which is for an operator to start).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use repo::AutoGc;

use crate::control::Served;
use crate::request::Request;

/// How many times a collection's duration the next automatic one waits
/// after it ended.
const REST: u32 = 4;

/// Whether a collection that took `took` and ended `since` ago has rested
/// long enough for the next to start.
fn rested(took: Duration, since: Duration) -> bool {
    since >= took.saturating_mul(REST)
}

/// The thread; dropping it stops it (waiting for a collection running).
pub struct AutoGcThread {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts the thread for the file system `served` (of the repository at
/// `root`); `None` when `settings` turns it off or the thread cannot start
/// (logged: collections then wait for a command).
pub fn spawn(served: Arc<Served>, root: PathBuf, settings: AutoGc) -> Option<AutoGcThread> {
    if (settings.after == 0 && settings.keep_free_percent == 0) || served.read_only {
        return None;
    }
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let flag = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("auto-gc".into())
        .spawn(move || run(&served, &root, settings, &flag));
    match spawned {
        Ok(t) => Some(AutoGcThread {
            stop,
            thread: Some(t),
        }),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the automatic collection thread; run `cairn gc` to reclaim space");
            None
        }
    }
}

fn run(
    served: &Arc<Served>,
    root: &std::path::Path,
    settings: AutoGc,
    stop: &(Mutex<bool>, Condvar),
) {
    let store = served.fs.store();
    let mut base = store.stored_bytes();
    let mut released = served.fs.released_bytes();
    let (lock, cv) = stop;
    let mut stopped = lock.lock();
    let mut last: Option<(Duration, Instant)> = None;
    loop {
        cv.wait_for(&mut stopped, settings.check);
        if *stopped {
            return;
        }
        let given_up = served.fs.released_bytes() - released;
        let thinned = if low_on_space(served, &settings) {
            thin(served)
        } else {
            None
        };
        let resting = last.is_some_and(|(took, ended)| !rested(took, ended.elapsed()));
        if thinned.is_none() && (resting || !settings.due(base, given_up)) {
            continue;
        }
        drop(stopped);
        if thinned.is_none() {
            tracing::info!(
                stored = base,
                released = given_up,
                "files gave up data: collecting garbage"
            );
        }
        let req = Request::Gc {
            threshold: crate::GC_THRESHOLD,
            max_garbage: gc::MAX_GARBAGE,
            dry_run: false,
            peer_wait: gc::PEER_WAIT.as_secs(),
        };
        // Refused (another collection running) or failed, it is logged as
        // the job ends; the next try waits for the store to grow again.
        let started = Instant::now();
        let _ = crate::jobs::run_auto(served, root, &req);
        last = Some((started.elapsed(), Instant::now()));
        base = store.stored_bytes();
        released = served.fs.released_bytes();
        stopped = lock.lock();
    }
}

/// Whether the store's branches can take less than `keep_free_percent` of
/// their capacity (never, for branches that cannot tell: object stores).
fn low_on_space(served: &Served, settings: &AutoGc) -> bool {
    if settings.keep_free_percent == 0 {
        return false;
    }
    match served.fs.space() {
        Ok(Some(space)) => settings.space_low(&space),
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell the space left; no version thinned");
            false
        }
    }
}

/// Drops the oldest automatic version; its label, or `None` when only the
/// newest is left (then nothing more can be given back this way).
fn thin(served: &Served) -> Option<String> {
    match served.fs.thin_versions() {
        Ok(Some(label)) => {
            tracing::warn!(version = %label, "space is low: dropped the oldest version to collect what only it held ([gc] keep_free_percent)");
            Some(label)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::error!(error = %e, "space is low, and dropping the oldest version failed");
            None
        }
    }
}

impl Drop for AutoGcThread {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_waits_four_times_the_last_ones_duration() {
        let took = Duration::from_secs(3);
        assert!(!rested(took, Duration::from_secs(11)));
        assert!(rested(took, Duration::from_secs(12)));
        assert!(rested(Duration::ZERO, Duration::ZERO));
        assert!(!rested(Duration::MAX, Duration::from_secs(u64::MAX / 2)));
    }
}

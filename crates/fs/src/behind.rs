//! Write-behind in the background: a file past its dirty limit hands its
//! dirty runs to an applier thread, which re-chunks, hashes, compresses and
//! stores them while FUSE writes to the file go on.
//!
//! The kernel sends a stream's writes one at a time, so an apply done on
//! the writing thread stalls the stream for its whole duration; here the
//! writer only takes the runs out ([`FileState::plan`]) and returns. The
//! runs stay readable in the file's `in_flight` until the applier splices
//! the new extents in. One apply per file is in flight at a time: the next
//! writer past the limit, and everything that needs the extents (truncate,
//! finalize, the commit's flush of the file's stream), waits for it first.

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::file::FileState;
use crate::{FsError, Inner, Result};

type Task = Box<dyn FnOnce() + Send>;

/// Threads that run applies. Two let one file's chunking overlap another's
/// (each apply also hashes and compresses on every core).
const APPLIERS: usize = 2;

/// Applies waiting for a thread. Each holds one file's dirty runs (there is
/// at most one apply per file in flight), so a full queue means that many
/// files' data waits in memory: a writer past its limit then waits here,
/// which is the back-pressure the dirty limits want, rather than queueing
/// more. Eight per applier keeps both busy between a writer's turns.
const APPLY_QUEUE: usize = 8 * APPLIERS;

/// The applier threads; they end when this is dropped.
pub(crate) struct Appliers {
    tx: Sender<Task>,
}

impl Appliers {
    pub(crate) fn start() -> Appliers {
        let (tx, rx) = crossbeam_channel::bounded::<Task>(APPLY_QUEUE);
        for i in 0..APPLIERS {
            let rx: Receiver<Task> = rx.clone();
            std::thread::Builder::new()
                .name(format!("fs-apply-{i}"))
                .spawn(move || {
                    for task in rx {
                        task();
                    }
                })
                .expect("spawn an applier thread");
        }
        Appliers { tx }
    }
}

impl Inner {
    /// Waits until the file has no apply in flight.
    pub(crate) fn settle<'a>(&self, mut f: MutexGuard<'a, FileState>) -> MutexGuard<'a, FileState> {
        let settled = f.settled.clone();
        settled.wait_while(&mut f, |f| f.busy());
        f
    }

    /// Locks a file's state once no apply is in flight for it.
    pub(crate) fn lock_settled<'a>(
        &self,
        state: &'a Mutex<FileState>,
    ) -> MutexGuard<'a, FileState> {
        self.settle(state.lock())
    }

    /// Hands the file's dirty runs to an applier thread (the file must have
    /// no apply in flight). The bytes stay counted as dirty until the apply
    /// is spliced in; when it fails they become dirty again and the next
    /// writer is told.
    pub(crate) fn apply_behind(
        self: &Arc<Self>,
        state: &Arc<Mutex<FileState>>,
        f: &mut FileState,
    ) -> Result<()> {
        self.know_chunking(f)?;
        let mut writer = match f.writer.take() {
            Some(w) => w,
            None => self.open_stream(f)?,
        };
        let planned = f.plan(false, &self.store, &self.cache);
        if f.switched {
            self.record_switch(f, crate::open::OVERWRITTEN);
        }
        let job = match planned {
            Ok(Some(job)) => job,
            other => {
                f.writer = Some(writer);
                return other.map(|_| ());
            }
        };
        let inner = self.clone();
        let state = state.clone();
        let task = move || {
            let result = job.run(inner.params, &mut writer);
            let mut f = state.lock();
            let before = f.held();
            match result {
                Ok(done) => f.splice(done),
                Err(e) => {
                    f.abort();
                    f.failed = Some(e);
                }
            }
            f.writer = Some(writer);
            inner.account(before, f.held());
            f.settled.notify_all();
        };
        // Only a task that panicked in every applier closes the channel;
        // then the runs go back to dirty, kept for the next writer.
        if self.appliers.tx.send(Box::new(task)).is_err() {
            f.abort();
            tracing::error!("every write-behind thread is gone; writes are kept in memory");
            return Err(FsError::WorkerGone("write-behind"));
        }
        Ok(())
    }
}

//! Re-storing files under a new policy in the background: a fixed pool of
//! threads fed by a bounded queue, so a burst of policy `setxattr`s
//! (`setfattr` over a whole tree) cannot start a thread per file.

use std::sync::OnceLock;

use crossbeam_channel::{Sender, TrySendError};

type Task = Box<dyn FnOnce() + Send>;

/// Threads that re-store files. Two: a migration reads and rewrites a whole
/// file, bound by the disks, and a second overlaps one file's reads with
/// another's writes without taking the cores FUSE requests need.
pub(crate) const MIGRATORS: usize = 2;
/// Migrations waiting for a thread. Each is a few words (an inode, a recipe
/// root, a policy), so the queue costs little; past it a policy `setxattr`
/// waits for room, which paces a script setting thousands of policies.
pub(crate) const MIGRATE_QUEUE: usize = 4096;

/// The migration threads, started on first use; they end once this is
/// dropped and the queue is drained.
pub(crate) struct Migrators {
    tx: OnceLock<Sender<Task>>,
    threads: usize,
    queue: usize,
}

/// No migration thread runs (none could start, or every one panicked).
#[derive(Debug)]
pub(crate) struct Gone;

impl Migrators {
    pub(crate) fn new(threads: usize, queue: usize) -> Migrators {
        Migrators {
            tx: OnceLock::new(),
            threads,
            queue,
        }
    }

    fn sender(&self) -> &Sender<Task> {
        self.tx.get_or_init(|| {
            let (tx, rx) = crossbeam_channel::bounded::<Task>(self.queue);
            for i in 0..self.threads {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("policy-migrate-{i}"))
                    .spawn(move || {
                        for task in rx {
                            task();
                        }
                    });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a policy migration thread");
                }
            }
            tx
        })
    }

    /// Queues `task` if there is room now.
    fn offer(&self, task: Task) -> Result<(), TrySendError<Task>> {
        self.sender().try_send(task)
    }

    /// Queues `task`, waiting for room while the queue is full.
    pub(crate) fn submit(&self, task: Task) -> Result<(), Gone> {
        match self.offer(task) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(task)) => {
                tracing::info!(
                    queued = self.queue,
                    "policy migrations are queued to the limit; waiting for room"
                );
                self.sender().send(task).map_err(|_| Gone)
            }
            Err(TrySendError::Disconnected(_)) => Err(Gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_and_drains() {
        let m = Migrators::new(1, 1);
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
        let (done_tx, done) = crossbeam_channel::unbounded::<u32>();
        // The thread takes the first task and blocks in it.
        m.submit(Box::new(move || {
            started_tx.send(()).unwrap();
            held.recv().unwrap();
        }))
        .unwrap();
        started.recv().unwrap();
        let d = done_tx.clone();
        m.submit(Box::new(move || d.send(2).unwrap())).unwrap();
        let d = done_tx.clone();
        assert!(matches!(
            m.offer(Box::new(move || d.send(3).unwrap())),
            Err(TrySendError::Full(_))
        ));
        release.send(()).unwrap();
        assert_eq!(done.recv().unwrap(), 2);
        let d = done_tx.clone();
        m.submit(Box::new(move || d.send(4).unwrap())).unwrap();
        assert_eq!(done.recv().unwrap(), 4);
    }
}

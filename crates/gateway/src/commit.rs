//! Group commit: a PUT is answered only once it is durable, and PUTs that
//! finish while a commit runs share the next one instead of queueing one
//! commit each (the file system's commit makes everything recorded before
//! it durable, whoever asked for it).

use parking_lot::{Condvar, Mutex};

struct State {
    /// Commits started so far.
    started: u64,
    /// Commits finished so far, and how the last one ended.
    done: u64,
    last: Result<(), String>,
    running: bool,
    /// Callers waiting for a commit someone else runs.
    waiting: usize,
}

pub struct GroupCommit {
    state: Mutex<State>,
    ended: Condvar,
}

impl Default for GroupCommit {
    fn default() -> GroupCommit {
        GroupCommit {
            state: Mutex::new(State {
                started: 0,
                done: 0,
                last: Ok(()),
                running: false,
                waiting: 0,
            }),
            ended: Condvar::new(),
        }
    }
}

impl GroupCommit {
    /// Returns once a commit that started after this call has ended:
    /// everything recorded before the call is durable then. Runs `commit`
    /// itself when no commit is running; else waits for the running one
    /// and the next, which one of the waiters runs for all of them.
    pub fn durable<E: std::fmt::Display>(
        &self,
        commit: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), String> {
        let mut st = self.state.lock();
        let target = st.started + 1;
        loop {
            if st.done >= target {
                // A commit this caller waited for, or a later one: the
                // last result is that of a commit covering this call.
                return st.last.clone();
            }
            if !st.running {
                st.running = true;
                st.started += 1;
                let mine = st.started;
                drop(st);
                let result = commit().map_err(|e| e.to_string());
                let mut st = self.state.lock();
                st.running = false;
                st.done = mine;
                st.last = result.clone();
                self.ended.notify_all();
                return result;
            }
            st.waiting += 1;
            self.ended.wait(&mut st);
            st.waiting -= 1;
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state.lock().waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn callers_waiting_on_a_commit_share_the_next() {
        let group = Arc::new(GroupCommit::default());
        let commits = Arc::new(AtomicUsize::new(0));
        let first = {
            let (g, c) = (group.clone(), commits.clone());
            std::thread::spawn(move || {
                g.durable(|| {
                    c.fetch_add(1, Ordering::SeqCst);
                    // Runs until seven others wait behind it.
                    while g.waiting() < 7 {
                        std::thread::yield_now();
                    }
                    Ok::<(), String>(())
                })
            })
        };
        while commits.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let others: Vec<_> = (0..7)
            .map(|_| {
                let (g, c) = (group.clone(), commits.clone());
                std::thread::spawn(move || {
                    g.durable(|| {
                        c.fetch_add(1, Ordering::SeqCst);
                        Ok::<(), String>(())
                    })
                })
            })
            .collect();
        assert!(first.join().unwrap().is_ok());
        for t in others {
            assert!(t.join().unwrap().is_ok());
        }
        // The first commit, then one for all seven.
        assert_eq!(commits.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_failed_commit_fails_every_caller_it_covered() {
        let group = GroupCommit::default();
        assert_eq!(
            group.durable(|| Err("disk gone")),
            Err("disk gone".to_string())
        );
        assert!(group.durable(|| Ok::<(), String>(())).is_ok());
    }
}

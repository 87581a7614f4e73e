//! Operations started by a caller that does not wait for them (the web
//! dashboard): each runs on a thread of its own, reports its progress into
//! its record, and leaves its answer there for whoever looks next.
//!
//! Bounded: at most [`RUNNING_MAX`] run at once and one of each kind (a
//! second scrub while one runs is refused, not queued); the last
//! [`KEPT`] finished ones are kept. Only operations that make sense to
//! start and watch are taken ([`Jobs::start`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

use crate::control::Served;
use crate::{exec, Progress, Reply, Request, Result, ServiceError, Step};

/// Jobs running at once.
pub const RUNNING_MAX: usize = 4;
/// Finished jobs remembered.
pub const KEPT: usize = 32;

/// One job as a caller sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub id: u64,
    /// The request's `op` (`scrub`, `gc`, `snapshot_create`, `check`).
    pub kind: &'static str,
    /// Seconds since the Unix epoch.
    pub started: u64,
    pub finished: Option<u64>,
    /// `running`, `done` or `failed`.
    pub state: &'static str,
    /// The last step reported.
    pub step: Option<Step>,
    pub error: Option<String>,
    /// The operation's answer, once done.
    pub reply: Option<Reply>,
}

/// The daemon's jobs.
pub struct Jobs {
    served: Arc<Served>,
    root: PathBuf,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    next: u64,
    running: Vec<JobView>,
    finished: VecDeque<JobView>,
}

/// The kind of a request a job may run, or `None`.
fn kind_of(req: &Request) -> Option<&'static str> {
    Some(match req {
        Request::Scrub => "scrub",
        Request::Gc { .. } => "gc",
        Request::SnapshotCreate { .. } => "snapshot_create",
        Request::Check => "check",
        _ => return None,
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Jobs {
    /// Jobs run against the mounted file system `served` of the
    /// repository at `root`.
    pub fn new(root: PathBuf, served: Arc<Served>) -> Jobs {
        Jobs {
            served,
            root,
            state: Arc::default(),
        }
    }

    /// Starts `req` on a thread of its own; its id. Refused: a request
    /// that is not a job's, one that writes on a read-only mount, a kind
    /// already running, [`RUNNING_MAX`] running.
    pub fn start(&self, req: Request) -> Result<u64> {
        let kind = kind_of(&req).ok_or(ServiceError::NotAJob)?;
        if self.served.read_only && req.writes() {
            return Err(ServiceError::ReadOnlyMount {
                mountpoint: self.served.mountpoint.clone(),
            });
        }
        let id = {
            let mut s = self.state.lock();
            if s.running.iter().any(|j| j.kind == kind) {
                return Err(ServiceError::JobRunning(kind));
            }
            if s.running.len() >= RUNNING_MAX {
                return Err(ServiceError::JobsFull(RUNNING_MAX));
            }
            s.next += 1;
            let id = s.next;
            s.running.push(JobView {
                id,
                kind,
                started: now(),
                finished: None,
                state: "running",
                step: None,
                error: None,
                reply: None,
            });
            id
        };
        let (served, root, state) = (self.served.clone(), self.root.clone(), self.state.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("job-{kind}"))
            .spawn(move || {
                let target = served.target(&root);
                tracing::info!(job = id, kind, "job started");
                let progress = JobProgress { state: &state, id };
                let result = exec(&target, &req, None, &progress);
                finish(&state, id, result);
            });
        if let Err(e) = spawned {
            let err = ServiceError::Io {
                what: "start a thread for",
                path: PathBuf::from(kind),
                source: e,
            };
            tracing::error!(job = id, kind, error = %err, "a job could not start");
            self.state.lock().running.retain(|j| j.id != id);
            return Err(err);
        }
        Ok(id)
    }

    /// Running jobs, then finished ones, newest first.
    pub fn list(&self) -> Vec<JobView> {
        let s = self.state.lock();
        let mut out: Vec<JobView> = s.running.iter().rev().cloned().collect();
        out.extend(s.finished.iter().cloned());
        out
    }
}

fn finish(state: &Mutex<State>, id: u64, result: Result<Reply>) {
    let mut s = state.lock();
    let Some(at) = s.running.iter().position(|j| j.id == id) else {
        return;
    };
    let mut job = s.running.remove(at);
    job.finished = Some(now());
    match result {
        Ok(reply) => {
            tracing::info!(job = id, kind = job.kind, "job done");
            job.state = "done";
            job.reply = Some(reply);
        }
        Err(e) => {
            tracing::error!(job = id, kind = job.kind, error = %e, "job failed");
            job.state = "failed";
            job.error = Some(e.to_string());
        }
    }
    s.finished.push_front(job);
    s.finished.truncate(KEPT);
}

struct JobProgress<'a> {
    state: &'a Mutex<State>,
    id: u64,
}

impl Progress for JobProgress<'_> {
    fn step(&self, what: &str, done: u64, total: u64) {
        let mut s = self.state.lock();
        if let Some(job) = s.running.iter_mut().find(|j| j.id == self.id) {
            job.step = Some(Step {
                what: what.to_owned(),
                done,
                total,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(state: &Mutex<State>, kind: &'static str) -> u64 {
        let mut s = state.lock();
        s.next += 1;
        let id = s.next;
        s.running.push(JobView {
            id,
            kind,
            started: 0,
            finished: None,
            state: "running",
            step: None,
            error: None,
            reply: None,
        });
        id
    }

    #[test]
    fn only_watchable_operations_are_jobs() {
        assert_eq!(kind_of(&Request::Scrub), Some("scrub"));
        assert_eq!(kind_of(&Request::Check), Some("check"));
        assert_eq!(kind_of(&Request::Stats), None);
        assert_eq!(kind_of(&Request::Rm { label: "x".into() }), None);
    }

    #[test]
    fn progress_lands_in_the_job_and_the_outcome_when_it_ends() {
        let state = Mutex::new(State::default());
        let id = running(&state, "scrub");
        JobProgress { state: &state, id }.step("containers", 3, 10);
        assert_eq!(state.lock().running[0].step.as_ref().unwrap().done, 3);
        finish(&state, id, Err(ServiceError::NoStream));
        let s = state.lock();
        assert!(s.running.is_empty());
        assert_eq!(s.finished[0].state, "failed");
        assert!(s.finished[0]
            .error
            .as_deref()
            .unwrap()
            .contains("file descriptor"));
    }

    #[test]
    fn finished_jobs_are_kept_newest_first_up_to_the_bound() {
        let state = Mutex::new(State::default());
        for _ in 0..KEPT + 5 {
            let id = running(&state, "gc");
            finish(&state, id, Err(ServiceError::NotAJob));
        }
        let s = state.lock();
        assert_eq!(s.finished.len(), KEPT);
        assert_eq!(s.finished[0].id, (KEPT + 5) as u64);
    }
}

//! The daemon's long operations, as jobs anyone can watch: those the web
//! dashboard starts (on a thread of their own, [`start`]) and those a
//! command asks for through the control socket ([`Jobs::attached`], run on
//! the caller's connection as before). Each reports its progress into its
//! record and leaves its outcome there for whoever looks next (the
//! dashboard's jobs list, `/metrics`).
//!
//! Bounded: the dashboard starts at most [`RUNNING_MAX`] at once and one of
//! each kind (a second scrub while one runs is refused, not queued); the
//! last [`KEPT`] finished jobs are kept, and a count of every finished job
//! by kind and outcome (a few kinds, three outcomes: done, failed,
//! refused). Beside them, a count
//! of every request the control socket answered, by kind and outcome
//! (`cairn_control_requests_total`: the CLI's share of the daemon's work,
//! next to FUSE's and S3's; as many kinds as [`Request`] has).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde::Serialize;

use crate::control::Served;
use crate::{exec, Progress, Reply, Request, Result, ServiceError, Step};

/// Jobs the dashboard runs at once.
pub const RUNNING_MAX: usize = 4;
/// Finished jobs remembered.
pub const KEPT: usize = 32;

/// One job as a caller sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub id: u64,
    /// The request's `op` (`scrub`, `gc`, `check`, `snapshot_create`,
    /// `branch_replace`, `branch_drain`).
    pub kind: &'static str,
    /// `dashboard` or `command` (asked through the control socket).
    pub by: &'static str,
    /// Seconds since the Unix epoch.
    pub started: u64,
    pub finished: Option<u64>,
    /// `running`, `done`, `failed`, or `refused` (the request was refused
    /// as asked, [`ServiceError::is_refusal`]: a bad argument, a name taken).
    pub state: &'static str,
    /// The last step reported.
    pub step: Option<Step>,
    pub error: Option<String>,
    /// The operation's answer, once done.
    pub reply: Option<Reply>,
}

/// The daemon's jobs (held by [`Served`]).
#[derive(Default)]
pub struct Jobs {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    running: Vec<JobView>,
    finished: VecDeque<JobView>,
    /// Finished jobs by (kind, state), since the daemon started.
    counts: BTreeMap<(&'static str, &'static str), u64>,
    /// Control-socket requests answered, by (kind, outcome).
    requests: BTreeMap<(&'static str, &'static str), u64>,
}

/// The kind of a request recorded as a job, or `None`.
fn kind_of(req: &Request) -> Option<&'static str> {
    Some(match req {
        Request::Scrub => "scrub",
        Request::Gc { .. } => "gc",
        Request::SnapshotCreate { .. } => "snapshot_create",
        Request::Check => "check",
        Request::BranchReplace { .. } => "branch_replace",
        Request::BranchDrain { .. } => "branch_drain",
        _ => return None,
    })
}

/// Kinds the dashboard may start.
const STARTABLE: [&str; 4] = ["scrub", "gc", "snapshot_create", "check"];

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Starts `req` against `served` (the repository at `root`) on a thread of
/// its own; the job's id. Refused: a request the dashboard may not start,
/// one that writes on a read-only mount, a kind already running,
/// [`RUNNING_MAX`] running.
pub fn start(served: &Arc<Served>, root: &Path, req: Request) -> Result<u64> {
    let kind = kind_of(&req)
        .filter(|k| STARTABLE.contains(k))
        .ok_or(ServiceError::NotAJob)?;
    if served.read_only && req.writes() {
        return Err(ServiceError::ReadOnlyMount {
            mountpoint: served.mountpoint.clone(),
        });
    }
    let jobs = &served.jobs;
    let id = {
        let mut s = jobs.state.lock();
        if s.running.iter().any(|j| j.kind == kind) {
            return Err(ServiceError::JobRunning(kind));
        }
        if s.running.iter().filter(|j| j.by == "dashboard").count() >= RUNNING_MAX {
            return Err(ServiceError::JobsFull(RUNNING_MAX));
        }
        s.begin(kind, "dashboard")
    };
    let (served, root) = (served.clone(), root.to_path_buf());
    let spawned = std::thread::Builder::new()
        .name(format!("job-{kind}"))
        .spawn(move || {
            let target = served.target(&root);
            let progress = JobProgress {
                jobs: &served.jobs,
                id,
                caller: None,
            };
            let result = exec(&target, &req, None, &progress);
            served.jobs.finish(id, result.as_ref());
        });
    if let Err(e) = spawned {
        let err = ServiceError::Io {
            what: "start a thread for",
            path: kind.into(),
            source: e,
        };
        tracing::error!(job = id, kind, error = %err, "a job could not start");
        jobs.state.lock().running.retain(|j| j.id != id);
        return Err(err);
    }
    Ok(id)
}

/// Runs `req` on this thread as a job started by the daemon itself
/// ([`crate::autogc`]); refused while a job of its kind runs.
pub(crate) fn run_auto(served: &Arc<Served>, root: &Path, req: &Request) -> Result<Reply> {
    let kind = kind_of(req).ok_or(ServiceError::NotAJob)?;
    let id = {
        let mut s = served.jobs.state.lock();
        if s.running.iter().any(|j| j.kind == kind) {
            return Err(ServiceError::JobRunning(kind));
        }
        s.begin(kind, "auto")
    };
    let target = served.target(root);
    let progress = JobProgress {
        jobs: &served.jobs,
        id,
        caller: None,
    };
    let result = exec(&target, req, None, &progress);
    served.jobs.finish(id, result.as_ref());
    result
}

impl State {
    fn begin(&mut self, kind: &'static str, by: &'static str) -> u64 {
        self.next += 1;
        let id = self.next;
        self.running.push(JobView {
            id,
            kind,
            by,
            started: now(),
            finished: None,
            state: "running",
            step: None,
            error: None,
            reply: None,
        });
        tracing::info!(job = id, kind, by, "job started");
        id
    }
}

impl Jobs {
    /// Runs `run` (the operation `req` asked through the control socket)
    /// on this thread, recorded as a job when it is one of the long kinds;
    /// its progress goes to the job and on to `progress`.
    pub fn attached(
        &self,
        req: &Request,
        progress: &dyn Progress,
        run: impl FnOnce(&dyn Progress) -> Result<Reply>,
    ) -> Result<Reply> {
        let Some(kind) = kind_of(req) else {
            return run(progress);
        };
        let id = self.state.lock().begin(kind, "command");
        let tee = JobProgress {
            jobs: self,
            id,
            caller: Some(progress),
        };
        let result = run(&tee);
        self.finish(id, result.as_ref());
        result
    }

    /// Counts a request of kind `op` the control socket answered, done or
    /// failed.
    pub fn answered(&self, op: &'static str, ok: bool) {
        let outcome = if ok { "done" } else { "failed" };
        *self.state.lock().requests.entry((op, outcome)).or_default() += 1;
    }

    /// Running jobs, then finished ones, newest first.
    pub fn list(&self) -> Vec<JobView> {
        let s = self.state.lock();
        let mut out: Vec<JobView> = s.running.iter().rev().cloned().collect();
        out.extend(s.finished.iter().cloned());
        out
    }

    /// Registers `cairn_jobs_running`, `cairn_jobs_finished_total`,
    /// `cairn_job_progress_ratio` and `cairn_control_requests_total` in
    /// `registry`, read at each scrape.
    pub fn register_metrics(self: &Arc<Self>, registry: &mut Registry) {
        registry.register_collector(Box::new(Figures(self.clone())));
    }

    fn finish(&self, id: u64, result: std::result::Result<&Reply, &ServiceError>) {
        let mut s = self.state.lock();
        let Some(at) = s.running.iter().position(|j| j.id == id) else {
            return;
        };
        let mut job = s.running.remove(at);
        job.finished = Some(now());
        match result {
            Ok(reply) => {
                tracing::info!(job = id, kind = job.kind, "job done");
                job.state = "done";
                job.reply = Some(reply.clone());
            }
            Err(e) if e.is_refusal() => {
                tracing::info!(job = id, kind = job.kind, error = %e, "job refused");
                job.state = "refused";
                job.error = Some(e.to_string());
            }
            Err(e) => {
                tracing::error!(job = id, kind = job.kind, error = %e, "job failed");
                job.state = "failed";
                job.error = Some(e.to_string());
            }
        }
        *s.counts.entry((job.kind, job.state)).or_default() += 1;
        s.finished.push_front(job);
        s.finished.truncate(KEPT);
    }
}

/// A job's progress: into its record, and on to the caller waiting for
/// it, if any.
struct JobProgress<'a> {
    jobs: &'a Jobs,
    id: u64,
    caller: Option<&'a dyn Progress>,
}

impl Progress for JobProgress<'_> {
    fn step(&self, what: &str, done: u64, total: u64) {
        {
            let mut s = self.jobs.state.lock();
            if let Some(job) = s.running.iter_mut().find(|j| j.id == self.id) {
                job.step = Some(Step {
                    what: what.to_owned(),
                    done,
                    total,
                });
            }
        }
        if let Some(c) = self.caller {
            c.step(what, done, total);
        }
    }

    fn cancelled(&self) -> bool {
        self.caller.is_some_and(|c| c.cancelled())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    kind: &'static str,
    state: &'static str,
}

/// The jobs' figures for `/metrics`.
struct Figures(Arc<Jobs>);

impl std::fmt::Debug for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("jobs::Figures")
    }
}

impl Collector for Figures {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let (running, counts, requests) = {
            let s = self.0.state.lock();
            (s.running.clone(), s.counts.clone(), s.requests.clone())
        };
        let mut family = enc.encode_descriptor(
            "cairn_jobs_running",
            "Jobs running (scrub, gc, check, snapshots, branch moves), by kind",
            None,
            MetricType::Gauge,
        )?;
        for kind in [
            "scrub",
            "gc",
            "check",
            "snapshot_create",
            "branch_replace",
            "branch_drain",
        ] {
            let n = running.iter().filter(|j| j.kind == kind).count() as i64;
            ConstGauge::new(n).encode(family.encode_family(&Kind { kind })?)?;
        }
        let mut family = enc.encode_descriptor(
            "cairn_jobs_finished",
            "Jobs finished since the daemon started, by kind and outcome",
            None,
            MetricType::Counter,
        )?;
        for ((kind, state), n) in counts {
            ConstCounter::new(n).encode(family.encode_family(&Outcome { kind, state })?)?;
        }
        let mut family = enc.encode_descriptor(
            "cairn_control_requests",
            "Requests the control socket (the CLI) answered, by kind and outcome",
            None,
            MetricType::Counter,
        )?;
        for ((kind, state), n) in requests {
            ConstCounter::new(n).encode(family.encode_family(&Outcome { kind, state })?)?;
        }
        let mut family = enc.encode_descriptor(
            "cairn_job_progress_ratio",
            "How far each running job with a known total is (0 to 1), by kind",
            None,
            MetricType::Gauge,
        )?;
        for job in &running {
            if let Some(step) = job.step.as_ref().filter(|s| s.total > 0) {
                let ratio = step.done as f64 / step.total as f64;
                ConstGauge::new(ratio).encode(family.encode_family(&Kind { kind: job.kind })?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watchable_operations_are_jobs() {
        assert_eq!(kind_of(&Request::Scrub), Some("scrub"));
        assert_eq!(kind_of(&Request::Check), Some("check"));
        assert_eq!(kind_of(&Request::Stats), None);
        assert_eq!(kind_of(&Request::Rm { label: "x".into() }), None);
    }

    #[test]
    fn an_attached_job_is_recorded_and_its_progress_reaches_the_caller() {
        struct Seen(Mutex<Vec<u64>>);
        impl Progress for Seen {
            fn step(&self, _: &str, done: u64, _: u64) {
                self.0.lock().push(done);
            }
        }
        let jobs = Jobs::default();
        let seen = Seen(Mutex::new(Vec::new()));
        let out = jobs.attached(&Request::Scrub, &seen, |p| {
            p.step("containers", 3, 10);
            assert_eq!(jobs.list()[0].step.as_ref().unwrap().done, 3);
            assert_eq!(jobs.list()[0].by, "command");
            Err(ServiceError::NoStream)
        });
        assert!(out.is_err());
        assert_eq!(*seen.0.lock(), vec![3]);
        let list = jobs.list();
        assert_eq!((list[0].kind, list[0].state), ("scrub", "failed"));
        assert!(list[0]
            .error
            .as_deref()
            .unwrap()
            .contains("file descriptor"));
        assert_eq!(jobs.state.lock().counts[&("scrub", "failed")], 1);
        // Not a job's request: run as is, not recorded.
        let out = jobs.attached(&Request::Stats, &seen, |_| Err(ServiceError::NotAJob));
        assert!(out.is_err());
        assert_eq!(jobs.list().len(), 1);
    }

    #[test]
    fn answered_requests_are_counted_by_kind_and_outcome() {
        let jobs = Arc::new(Jobs::default());
        jobs.answered("stats", true);
        jobs.answered("stats", true);
        jobs.answered("put", false);
        let mut registry = Registry::default();
        jobs.register_metrics(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("cairn_control_requests_total{kind=\"stats\",state=\"done\"} 2"),
            "{text}"
        );
        assert!(text.contains("cairn_control_requests_total{kind=\"put\",state=\"failed\"} 1"));
    }

    #[test]
    fn a_refused_request_is_a_refused_job_not_a_failed_one() {
        let jobs = Jobs::default();
        let gc = Request::Gc {
            threshold: 7.0,
            max_garbage: 0.1,
            dry_run: false,
            peer_wait: 1,
        };
        let out = jobs.attached(&gc, &crate::Silent, |_| {
            Err(ServiceError::from(gc::GcError::BadThreshold(7.0)))
        });
        assert!(out.is_err());
        let list = jobs.list();
        assert_eq!((list[0].kind, list[0].state), ("gc", "refused"));
        assert!(list[0]
            .error
            .as_deref()
            .unwrap()
            .contains("between 0 and 1"));
        assert_eq!(jobs.state.lock().counts[&("gc", "refused")], 1);
    }

    #[test]
    fn finished_jobs_are_kept_newest_first_up_to_the_bound() {
        let jobs = Jobs::default();
        for _ in 0..KEPT + 5 {
            let id = jobs.state.lock().begin("gc", "command");
            jobs.finish(id, Err(&ServiceError::NoStream));
        }
        let list = jobs.list();
        assert_eq!(list.len(), KEPT);
        assert_eq!(list[0].id, (KEPT + 5) as u64);
        assert_eq!(
            jobs.state.lock().counts[&("gc", "failed")],
            (KEPT + 5) as u64
        );
    }
}

//! The dashboard's routes: the page's files, `api/overview` (everything
//! the page shows, in one document), `api/jobs` (GET: the jobs; POST
//! `{"kind": "scrub" | "gc" | "check" | "snapshot", "name": ...}`: start
//! one, for an operator only).

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fs::history::{SnapshotInfo, VersionInfo};
use fs::space::SpaceReport;
use gateway::console::{Answer, Call, Console};
use http::{Method, StatusCode};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use service::control::Served;
use service::jobs::JobView;
use service::{BranchLine, PolicyShare, Request};

use crate::assets;
use crate::trend::{Point, Trend};

/// How long a computed overview is shown before it is computed again.
pub const OVERVIEW_MAX_AGE: Duration = Duration::from_secs(10);
/// How often the trend is sampled with no page open.
const SAMPLE_EVERY: Duration = Duration::from_secs(300);

/// The figures an overview computes (cached).
#[derive(Debug, Serialize)]
struct Figures {
    /// Seconds since the Unix epoch.
    computed: u64,
    stats: SpaceReport,
    branches: Vec<BranchLine>,
    policies: Vec<PolicyShare>,
    snapshots: Vec<SnapshotInfo>,
    /// The automatic versions, oldest first, each with until when it is
    /// kept: what holds deleted data, and until when.
    versions: Vec<VersionInfo>,
    /// What the default policy can still store (as `df` says); `None`
    /// when the branches do not say.
    available_bytes: Option<u64>,
}

/// What `api/overview` answers.
#[derive(Serialize)]
struct Overview<'a> {
    #[serde(flatten)]
    figures: &'a Figures,
    trend: Vec<Point>,
    jobs: Vec<JobView>,
    /// Whether the request came with an operator's key: actions allowed.
    operator: bool,
}

#[derive(Deserialize)]
struct Start {
    kind: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Serialize)]
struct Problem<'a> {
    error: &'a str,
}

struct Inner {
    served: Arc<Served>,
    root: PathBuf,
    cached: Mutex<Option<(Instant, Arc<Figures>)>>,
    trend: Mutex<Trend>,
    /// Held while an overview is computed: callers arriving meanwhile wait
    /// for it rather than computing their own.
    computing: Mutex<()>,
}

/// The dashboard of one mounted file system; its sampler stops on drop.
pub struct Dashboard {
    inner: Arc<Inner>,
    sampler: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn json(status: StatusCode, value: &impl Serialize) -> Answer {
    Answer {
        status,
        content_type: "application/json",
        body: Bytes::from(serde_json::to_vec(value).expect("plain data")),
    }
}

fn problem(status: StatusCode, error: &str) -> Answer {
    if status.is_server_error() {
        tracing::error!(%status, error, "the dashboard could not answer");
    } else {
        tracing::info!(%status, error, "the dashboard refused a request");
    }
    json(status, &Problem { error })
}

impl Dashboard {
    /// The dashboard of `served` (the repository at `root`), with a
    /// thread sampling the trend every few minutes.
    pub fn start(root: PathBuf, served: Arc<Served>) -> Dashboard {
        let inner = Arc::new(Inner {
            served,
            root,
            cached: Mutex::new(None),
            trend: Mutex::new(Trend::default()),
            computing: Mutex::new(()),
        });
        let (tx, rx) = mpsc::channel::<()>();
        let sampled = inner.clone();
        let sampler = std::thread::Builder::new()
            .name("dashboard-trend".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(SAMPLE_EVERY) {
                    if let Err(e) = sampled.compute() {
                        tracing::warn!(error = %e, "the dashboard could not sample the store's figures");
                    }
                }
            });
        let sampler = match sampler {
            Ok(t) => Some((tx, t)),
            Err(e) => {
                tracing::warn!(error = %e, "no thread for the dashboard's trend; it is sampled when the page is open");
                None
            }
        };
        Dashboard { inner, sampler }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        if let Some((tx, t)) = self.sampler.take() {
            drop(tx);
            let _ = t.join();
        }
    }
}

impl Inner {
    /// Computes the figures now, records them in the trend, and caches them.
    fn compute(&self) -> service::Result<Arc<Figures>> {
        let target = self.served.target(&self.root);
        let run = |req: Request| service::exec(&target, &req, None, &service::Silent);
        let stats = run(Request::Stats)?.into_stats()?;
        let figures = Arc::new(Figures {
            computed: unix_now(),
            branches: run(Request::Status)?.into_status()?,
            policies: service::policy_mix(self.served.fs.store())?,
            snapshots: run(Request::SnapshotList { unique: false })?.into_snapshot_list()?,
            versions: run(Request::VersionList)?.into_version_list()?,
            available_bytes: self
                .served
                .fs
                .space()
                .map_err(service::ServiceError::from)?
                .map(|s| s.available),
            stats,
        });
        self.trend.lock().record(Point {
            t: figures.computed,
            logical: figures.stats.logical_bytes,
            unique: figures.stats.unique_bytes,
            stored: figures.stats.stored_bytes,
        });
        *self.cached.lock() = Some((Instant::now(), figures.clone()));
        Ok(figures)
    }

    /// The cached figures, computed again once older than
    /// [`OVERVIEW_MAX_AGE`] or than a job that finished at `changed`
    /// (seconds since the epoch).
    fn figures(&self, changed: Option<u64>) -> service::Result<Arc<Figures>> {
        let fresh = |c: &Option<(Instant, Arc<Figures>)>| {
            c.as_ref()
                .filter(|(at, f)| {
                    at.elapsed() < OVERVIEW_MAX_AGE && changed.is_none_or(|t| f.computed > t)
                })
                .map(|(_, f)| f.clone())
        };
        if let Some(f) = fresh(&self.cached.lock()) {
            return Ok(f);
        }
        let _computing = self.computing.lock();
        if let Some(f) = fresh(&self.cached.lock()) {
            return Ok(f);
        }
        self.compute()
    }

    fn overview(&self, operator: bool) -> Answer {
        let jobs = self.served.jobs.list();
        let changed = jobs.iter().filter_map(|j| j.finished).max();
        match self.figures(changed) {
            Ok(figures) => json(
                StatusCode::OK,
                &Overview {
                    figures: &figures,
                    trend: self.trend.lock().points(),
                    jobs,
                    operator,
                },
            ),
            Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        }
    }

    fn start_job(&self, call: &Call) -> Answer {
        if !call.operator {
            return problem(
                StatusCode::FORBIDDEN,
                "starting a job needs an operator's key (a read-write key for every bucket)",
            );
        }
        let start: Start = match serde_json::from_slice(&call.body) {
            Ok(s) => s,
            Err(e) => return problem(StatusCode::BAD_REQUEST, &format!("not a job request: {e}")),
        };
        let request = match start.kind.as_str() {
            "scrub" => Request::Scrub,
            "check" => Request::Check,
            "gc" => Request::Gc {
                threshold: service::GC_THRESHOLD,
                max_garbage: service::GC_MAX_GARBAGE,
                dry_run: false,
                peer_wait: service::GC_PEER_WAIT.as_secs(),
            },
            "snapshot" => Request::SnapshotCreate {
                name: start
                    .name
                    .filter(|n| !n.trim().is_empty())
                    .unwrap_or_else(|| format!("dashboard-{}", unix_now())),
            },
            other => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    &format!("no job {other:?}: scrub, gc, check or snapshot"),
                )
            }
        };
        match service::jobs::start(&self.served, &self.root, request) {
            Ok(id) => json(StatusCode::ACCEPTED, &serde_json::json!({ "id": id })),
            Err(e) => problem(StatusCode::CONFLICT, &e.to_string()),
        }
    }
}

impl Console for Dashboard {
    fn answer(&self, call: Call) -> Answer {
        let inner = &self.inner;
        match (&call.method, call.path.as_str()) {
            (&Method::GET, "api/overview") => inner.overview(call.operator),
            (&Method::GET, "api/jobs") => json(StatusCode::OK, &inner.served.jobs.list()),
            (&Method::POST, "api/jobs") => inner.start_job(&call),
            (&Method::GET | &Method::HEAD, path) => match assets::get(path) {
                Some((body, content_type)) => Answer {
                    status: StatusCode::OK,
                    content_type,
                    body: Bytes::from_static(body),
                },
                None => problem(StatusCode::NOT_FOUND, "no such page"),
            },
            _ => problem(StatusCode::METHOD_NOT_ALLOWED, "not a dashboard request"),
        }
    }
}

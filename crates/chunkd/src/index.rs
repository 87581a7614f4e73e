//! The index half: this chunkd's partition of the fingerprint index, in
//! redb at `DIR/.chunkd/index.redb`, answering only for the ranges the
//! range table in etcd gives it at the epoch a request names.
//!
//! [`PartitionCore`] is the handling itself (decode, admit by the view of
//! the table, the entries' operation), synchronous and without HTTP or
//! etcd; the server's handlers wrap it, and the range failover simulation
//! (`crates/repo/tests/chunk_range_failover_simulation.rs`) drives it
//! in-process, choosing when each owner reads the table.
//!
//! The view of the table is read at start, every `refresh`, and at once
//! when a request names an epoch newer than the view. A chunkd that lost
//! a range keeps answering for it until its next read (at most `refresh`):
//! a client that still believes the old epoch may then add entries the new
//! owner never sees (missed dedup), or find entries here that the new
//! owner lacks, or (a range moved back) entries for containers forgotten
//! meanwhile: gc's `forget` reaches the owners the table names now. The
//! client never trusts an entry alone: it probes the container it names
//! (docs/chunkd.md).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use parking_lot::RwLock;

use crate::client::OwnerFailure;
use crate::entries::{Entries, EntriesError};
use crate::ranges::{normalize, Range, RangeStore, RangeTable, RangesError};
use crate::server::Shared;
use crate::wire::{self, IndexOp, Target, WireError};
use crate::{Fingerprint, Location};

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Entries(#[from] EntriesError),
    #[error(transparent)]
    Ranges(#[from] RangesError),
}

/// Where the range table is and who this chunkd is in it.
#[derive(Debug, Clone)]
pub struct PartitionConfig {
    /// etcd endpoints (`http://HOST:PORT`).
    pub etcd: Vec<String>,
    pub fsid: String,
    /// This chunkd's URL as the range table names owners.
    pub advertise: String,
    /// How often the range table is read again.
    pub refresh: Duration,
}

/// An owner's request handling without HTTP or etcd: its entries, its
/// name in the range table and its view of the table. The server wraps it
/// (the view read from etcd at start, every `refresh`, and when a request
/// names a newer epoch); a simulation drives it directly, deciding when
/// the view is read again.
pub struct PartitionCore {
    entries: Entries,
    me: String,
    view: RwLock<Option<RangeTable>>,
}

/// An index request, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexRequest {
    Lookup(Target, Vec<Fingerprint>),
    Add(Target, u64, Vec<(Fingerprint, Location)>),
    Forget(Target, Vec<u64>),
}

impl IndexRequest {
    pub fn decode(op: IndexOp, body: &[u8]) -> Result<Self, Refusal> {
        Ok(match op {
            IndexOp::Lookup => {
                let (t, fps) = wire::decode_lookup(body)?;
                IndexRequest::Lookup(t, fps)
            }
            IndexOp::Add => {
                let (t, container, entries) = wire::decode_add(body)?;
                IndexRequest::Add(t, container, entries)
            }
            IndexOp::Forget => {
                let (t, containers) = wire::decode_forget(body)?;
                IndexRequest::Forget(t, containers)
            }
        })
    }

    pub fn target(&self) -> Target {
        match self {
            IndexRequest::Lookup(t, _)
            | IndexRequest::Add(t, _, _)
            | IndexRequest::Forget(t, _) => *t,
        }
    }
}

/// Why a request is not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not the owner of that range at that epoch (421).
    #[error("{0}")]
    NotHere(String),
    /// A malformed request (400).
    #[error("{0}")]
    Bad(String),
    /// The owner failed (500).
    #[error("{0}")]
    Failed(String),
}

impl Refusal {
    /// The HTTP status the server answers it with.
    pub fn status(&self) -> u16 {
        self.http_status().as_u16()
    }

    fn http_status(&self) -> StatusCode {
        match self {
            Refusal::NotHere(_) => StatusCode::MISDIRECTED_REQUEST,
            Refusal::Bad(_) => StatusCode::BAD_REQUEST,
            Refusal::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// What a client makes of a refusal, as it would of the server's answer.
impl From<Refusal> for OwnerFailure {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NotHere(m) => OwnerFailure::Stale(m),
            r => OwnerFailure::Refused {
                status: r.status(),
                message: r.to_string(),
            },
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        if let Refusal::Failed(m) = &self {
            tracing::error!(error = %m, "chunkd: index request failed");
        }
        (self.http_status(), self.to_string()).into_response()
    }
}

impl From<WireError> for Refusal {
    fn from(e: WireError) -> Self {
        Refusal::Bad(e.to_string())
    }
}

impl From<EntriesError> for Refusal {
    fn from(e: EntriesError) -> Self {
        Refusal::Failed(e.to_string())
    }
}

impl PartitionCore {
    /// Opens (creating) the entries at `file`, for the owner named `me`,
    /// with no view of the table yet (every request is refused until
    /// [`PartitionCore::set_view`]).
    pub fn open(file: &Path, me: &str) -> Result<Self, IndexError> {
        Ok(PartitionCore {
            entries: Entries::open(file)?,
            me: normalize(me),
            view: RwLock::new(None),
        })
    }

    /// This owner's entries for `fps`, whatever its view: to show where
    /// the index has a chunk (diagnostics), never an answer to a client.
    pub fn peek(&self, fps: &[Fingerprint]) -> Result<Vec<Option<Location>>, EntriesError> {
        self.entries.lookup(fps)
    }

    /// The owner's name, as the range table names it.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The range table as this owner last read it.
    pub fn view(&self) -> Option<RangeTable> {
        self.view.read().clone()
    }

    /// Takes `table` as read from where the table is kept.
    pub fn set_view(&self, table: RangeTable) {
        *self.view.write() = Some(table);
    }

    /// Whether `t` names a range this view lacks or an epoch newer than
    /// it holds: the table is then read again before answering.
    pub fn is_behind(&self, t: Target) -> bool {
        self.current(t.start).is_none_or(|r| r.epoch < t.epoch)
    }

    fn current(&self, start: u64) -> Option<Range> {
        self.view.read().as_ref()?.starting_at(start).cloned()
    }

    /// The whole of one request, synchronously: decoded, the table read
    /// again through `read_table` if the request names a newer epoch,
    /// then answered (the body of a success).
    pub fn handle(
        &self,
        op: IndexOp,
        body: &[u8],
        read_table: impl FnOnce() -> Option<RangeTable>,
    ) -> Result<Vec<u8>, Refusal> {
        let request = IndexRequest::decode(op, body)?;
        if self.is_behind(request.target()) {
            if let Some(table) = read_table() {
                self.set_view(table);
            }
        }
        self.answer(request)
    }

    /// Answers `request` by the current view: admitted, then looked up,
    /// added (committed durably; an empty body) or forgotten (the count
    /// removed).
    pub fn answer(&self, request: IndexRequest) -> Result<Vec<u8>, Refusal> {
        match request {
            IndexRequest::Lookup(t, fps) => {
                self.admit(t, fps.iter())?;
                Ok(wire::encode_found(&self.entries.lookup(&fps)?))
            }
            IndexRequest::Add(t, container, entries) => {
                self.admit(t, entries.iter().map(|(fp, _)| fp))?;
                self.entries.add(container, &entries)?;
                Ok(Vec::new())
            }
            IndexRequest::Forget(t, containers) => {
                let range = self.admit(t, std::iter::empty())?;
                let n = self.entries.forget(&range, &containers)?;
                Ok(n.to_be_bytes().to_vec())
            }
        }
    }

    /// The range, if this owner holds it in its view at the epoch the
    /// client believes and every fingerprint lies in it.
    fn admit<'a>(
        &self,
        t: Target,
        mut fps: impl Iterator<Item = &'a Fingerprint>,
    ) -> Result<Range, Refusal> {
        let Some(range) = self.current(t.start) else {
            return Err(Refusal::NotHere(format!(
                "no range starts at {:016x}",
                t.start
            )));
        };
        if range.epoch != t.epoch {
            return Err(Refusal::NotHere(format!(
                "range {:016x} is at epoch {}, not {}",
                range.start, range.epoch, t.epoch
            )));
        }
        if range.owner != self.me {
            return Err(Refusal::NotHere(format!(
                "range {:016x} is owned by {}, not {}",
                range.start, range.owner, self.me
            )));
        }
        if let Some(fp) = fps.find(|fp| !range.holds(fp)) {
            return Err(Refusal::Bad(format!(
                "fingerprint {fp} is outside range {:016x}-{:016x}",
                range.start, range.end
            )));
        }
        Ok(range)
    }
}

/// The server's partition: the core, and the table in etcd.
pub(crate) struct Partition {
    core: Arc<PartitionCore>,
    store: RangeStore,
}

impl Partition {
    /// Opens the database and reads the range table once (a table not yet
    /// set, or etcd not answering, leaves every range refused until a
    /// later read succeeds). Starts the periodic re-read on `runtime`.
    pub(crate) fn open(
        dir: &Path,
        config: &PartitionConfig,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Arc<Self>, crate::ChunkdError> {
        let sub = dir.join(".chunkd");
        std::fs::create_dir_all(&sub).map_err(|source| branch::BranchError::Io {
            op: "create directory",
            path: sub.clone(),
            source,
        })?;
        let core = Arc::new(PartitionCore::open(
            &sub.join("index.redb"),
            &config.advertise,
        )?);
        let store = runtime
            .block_on(RangeStore::connect(
                &config.etcd,
                &config.fsid,
                Duration::from_secs(5),
            ))
            .map_err(IndexError::from)?;
        let partition = Arc::new(Partition { core, store });
        runtime.block_on(partition.refresh());
        let weak = Arc::downgrade(&partition);
        let every = config.refresh;
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(p) = weak.upgrade() else { return };
                p.refresh().await;
            }
        });
        Ok(partition)
    }

    async fn refresh(&self) {
        match self.store.read().await {
            Ok(Some((table, _))) => self.core.set_view(table),
            Ok(None) => {
                tracing::warn!("chunkd: no range table in etcd yet; index requests are refused")
            }
            Err(e) => {
                tracing::warn!(error = %e, "chunkd: cannot read the range table; keeping the last one")
            }
        }
    }

    /// [`PartitionCore::handle`] with the table read from etcd, and the
    /// database's work off the async threads.
    async fn handle(&self, op: IndexOp, body: &[u8]) -> Result<Vec<u8>, Refusal> {
        let request = IndexRequest::decode(op, body)?;
        if self.core.is_behind(request.target()) {
            self.refresh().await;
        }
        let core = self.core.clone();
        tokio::task::spawn_blocking(move || core.answer(request))
            .await
            .map_err(|e| Refusal::Failed(format!("task failed: {e}")))?
    }
}

fn partition(s: &Shared) -> Result<Arc<Partition>, Refusal> {
    s.index.clone().ok_or_else(|| {
        Refusal::NotHere("this chunkd holds no index partition (start it with --etcd)".into())
    })
}

type Shd = State<Arc<Shared>>;

async fn answer(s: &Shared, op: IndexOp, body: &[u8]) -> Response {
    let run = async {
        let p = partition(s)?;
        p.handle(op, body).await
    };
    match (run.await, op) {
        (Ok(_), IndexOp::Add) => StatusCode::NO_CONTENT.into_response(),
        (Ok(b), _) => (StatusCode::OK, b).into_response(),
        (Err(r), _) => r.into_response(),
    }
}

pub(crate) async fn lookup(State(s): Shd, body: Bytes) -> Response {
    answer(&s, IndexOp::Lookup, &body).await
}

pub(crate) async fn add(State(s): Shd, body: Bytes) -> Response {
    answer(&s, IndexOp::Add, &body).await
}

pub(crate) async fn forget(State(s): Shd, body: Bytes) -> Response {
    answer(&s, IndexOp::Forget, &body).await
}

pub(crate) async fn view(State(s): Shd) -> Response {
    match partition(&s) {
        Ok(p) => match p.core.view() {
            Some(t) => Json(t).into_response(),
            None => (StatusCode::SERVICE_UNAVAILABLE, "no range table read yet").into_response(),
        },
        Err(r) => r.into_response(),
    }
}

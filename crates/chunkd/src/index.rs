//! The index half: this chunkd's partition of the fingerprint index, in
//! redb at `DIR/.chunkd/index.redb`, answering only for the ranges the
//! range table in etcd gives it at the epoch a request names.
//!
//! The view of the table is read at start, every `refresh`, and at once
//! when a request names an epoch newer than the view. A chunkd that lost
//! a range keeps answering for it until its next read (at most `refresh`):
//! a client that still believes the old epoch may then add entries the new
//! owner never sees (missed dedup, never lost data), or find entries here
//! that the new owner lacks. The second is safe only while the container
//! still exists: gc's `forget` reaches the owners the table names now, not
//! a demoted one, so gc must wait longer than the owners' `refresh` after a
//! reassignment before it deletes containers (docs/chunkd.md).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use parking_lot::RwLock;

use crate::entries::{Entries, EntriesError};
use crate::ranges::{normalize, Range, RangeStore, RangeTable, RangesError};
use crate::server::Shared;
use crate::wire::{self, Target, WireError};
use crate::Fingerprint;

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

pub(crate) struct Partition {
    entries: Entries,
    me: String,
    store: RangeStore,
    view: RwLock<Option<RangeTable>>,
}

/// Why a request is not answered.
pub(crate) enum Refusal {
    NotHere(String),
    Bad(String),
    Failed(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::NotHere(m) => (StatusCode::MISDIRECTED_REQUEST, m),
            Refusal::Bad(m) => (StatusCode::BAD_REQUEST, m),
            Refusal::Failed(m) => {
                tracing::error!(error = %m, "chunkd: index request failed");
                (StatusCode::INTERNAL_SERVER_ERROR, m)
            }
        }
        .into_response()
    }
}

impl From<WireError> for Refusal {
    fn from(e: WireError) -> Self {
        Refusal::Bad(e.to_string())
    }
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
        let entries = Entries::open(&sub.join("index.redb")).map_err(IndexError::from)?;
        let store = runtime
            .block_on(RangeStore::connect(
                &config.etcd,
                &config.fsid,
                Duration::from_secs(5),
            ))
            .map_err(IndexError::from)?;
        let partition = Arc::new(Partition {
            entries,
            me: normalize(&config.advertise),
            store,
            view: RwLock::new(None),
        });
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
            Ok(Some((table, _))) => *self.view.write() = Some(table),
            Ok(None) => {
                tracing::warn!("chunkd: no range table in etcd yet; index requests are refused")
            }
            Err(e) => {
                tracing::warn!(error = %e, "chunkd: cannot read the range table; keeping the last one")
            }
        }
    }

    fn current(&self, start: u64) -> Option<Range> {
        self.view.read().as_ref()?.starting_at(start).cloned()
    }

    /// The range, if this chunkd owns it at the epoch the client believes
    /// and every fingerprint lies in it.
    async fn admit<'a>(
        &self,
        t: Target,
        mut fps: impl Iterator<Item = &'a Fingerprint>,
    ) -> Result<Range, Refusal> {
        let mut range = self.current(t.start);
        if range.as_ref().is_none_or(|r| r.epoch < t.epoch) {
            self.refresh().await;
            range = self.current(t.start);
        }
        let Some(range) = range else {
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

fn partition(s: &Shared) -> Result<Arc<Partition>, Refusal> {
    s.index.clone().ok_or_else(|| {
        Refusal::NotHere("this chunkd holds no index partition (start it with --etcd)".into())
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EntriesError> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Refusal::Failed(format!("task failed: {e}")))?
        .map_err(|e| Refusal::Failed(e.to_string()))
}

type Shd = State<Arc<Shared>>;

pub(crate) async fn lookup(State(s): Shd, body: Bytes) -> Response {
    let run = async {
        let p = partition(&s)?;
        let (t, fps) = wire::decode_lookup(&body)?;
        p.admit(t, fps.iter()).await?;
        let found = blocking(move || p.entries.lookup(&fps)).await?;
        Ok::<_, Refusal>(wire::encode_found(&found))
    };
    match run.await {
        Ok(b) => (StatusCode::OK, b).into_response(),
        Err(r) => r.into_response(),
    }
}

pub(crate) async fn add(State(s): Shd, body: Bytes) -> Response {
    let run = async {
        let p = partition(&s)?;
        let (t, container, entries) = wire::decode_add(&body)?;
        p.admit(t, entries.iter().map(|(fp, _)| fp)).await?;
        blocking(move || p.entries.add(container, &entries)).await
    };
    match run.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => r.into_response(),
    }
}

pub(crate) async fn forget(State(s): Shd, body: Bytes) -> Response {
    let run = async {
        let p = partition(&s)?;
        let (t, containers) = wire::decode_forget(&body)?;
        let range = p.admit(t, std::iter::empty()).await?;
        blocking(move || p.entries.forget(&range, &containers)).await
    };
    match run.await {
        Ok(n) => (StatusCode::OK, n.to_be_bytes().to_vec()).into_response(),
        Err(r) => r.into_response(),
    }
}

pub(crate) async fn view(State(s): Shd) -> Response {
    match partition(&s) {
        Ok(p) => match p.view.read().clone() {
            Some(t) => Json(t).into_response(),
            None => (StatusCode::SERVICE_UNAVAILABLE, "no range table read yet").into_response(),
        },
        Err(r) => r.into_response(),
    }
}

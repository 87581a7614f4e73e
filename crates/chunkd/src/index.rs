//! The index half: this chunkd's partition of the fingerprint index, in
//! redb at `DIR/.chunkd/index.redb`, answering only for the ranges the
//! range table in etcd gives it at the epoch a request names.
//!
//! The view of the table is read at start, every `refresh`, and at once
//! when a request names an epoch newer than the view. A chunkd that lost
//! a range keeps answering for it until its next read (at most `refresh`):
//! a client that still believes the old epoch may then find entries here
//! that the new owner lacks (harmless: an entry is added only once its
//! container is durable, and gc forgets a container's entries before it
//! deletes the container), or add entries the new owner never sees
//! (missed dedup, never lost data).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use parking_lot::RwLock;
use redb::{
    Database, MultimapTableDefinition, ReadableDatabase, ReadableMultimapTable, ReadableTable,
    TableDefinition,
};

use crate::ranges::{normalize, Range, RangeStore, RangeTable, RangesError};
use crate::server::Shared;
use crate::wire::{self, Target, WireError};
use crate::{Fingerprint, Location};

/// Fingerprint -> container (8 bytes, big-endian) then location.
const ENTRIES: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("entries");
/// Container -> its fingerprints, for `forget`.
const BY_CONTAINER: MultimapTableDefinition<u64, &[u8; 32]> =
    MultimapTableDefinition::new("by_container");

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index database {path}: {source}")]
    Db {
        path: String,
        #[source]
        source: Box<redb::Error>,
    },
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
    db: Database,
    path: String,
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
        let file = sub.join("index.redb");
        let path = file.display().to_string();
        let db_err = |e: redb::Error| IndexError::Db {
            path: path.clone(),
            source: Box::new(e),
        };
        let db = Database::create(&file).map_err(|e| db_err(e.into()))?;
        let tx = db.begin_write().map_err(|e| db_err(e.into()))?;
        tx.open_table(ENTRIES).map_err(|e| db_err(e.into()))?;
        tx.open_multimap_table(BY_CONTAINER)
            .map_err(|e| db_err(e.into()))?;
        tx.commit().map_err(|e| db_err(e.into()))?;
        let store = runtime
            .block_on(RangeStore::connect(
                &config.etcd,
                &config.fsid,
                Duration::from_secs(5),
            ))
            .map_err(IndexError::from)?;
        let partition = Arc::new(Partition {
            db,
            path,
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

    fn failed(&self, e: impl Into<redb::Error>) -> Refusal {
        Refusal::Failed(format!("index database {}: {}", self.path, e.into()))
    }

    fn lookup(&self, fps: &[Fingerprint]) -> Result<Vec<Option<Location>>, Refusal> {
        let tx = self.db.begin_read().map_err(|e| self.failed(e))?;
        let table = tx.open_table(ENTRIES).map_err(|e| self.failed(e))?;
        fps.iter()
            .map(|fp| {
                let v = table.get(fp.as_bytes()).map_err(|e| self.failed(e))?;
                Ok(
                    v.map(|v| {
                        Location::new(v.value()[8..].to_vec()).expect("stored locations fit")
                    }),
                )
            })
            .collect()
    }

    /// Adds each entry not present yet; an entry already present keeps its
    /// container. Durable on return (redb's default durability).
    fn add(&self, container: u64, entries: &[(Fingerprint, Location)]) -> Result<(), Refusal> {
        let tx = self.db.begin_write().map_err(|e| self.failed(e))?;
        {
            let mut table = tx.open_table(ENTRIES).map_err(|e| self.failed(e))?;
            let mut by = tx
                .open_multimap_table(BY_CONTAINER)
                .map_err(|e| self.failed(e))?;
            for (fp, loc) in entries {
                if table
                    .get(fp.as_bytes())
                    .map_err(|e| self.failed(e))?
                    .is_some()
                {
                    continue;
                }
                let mut v = container.to_be_bytes().to_vec();
                v.extend_from_slice(loc.as_bytes());
                table
                    .insert(fp.as_bytes(), v.as_slice())
                    .map_err(|e| self.failed(e))?;
                by.insert(container, fp.as_bytes())
                    .map_err(|e| self.failed(e))?;
            }
        }
        tx.commit().map_err(|e| self.failed(e))
    }

    /// Removes the containers' entries that lie in `range`.
    fn forget(&self, range: &Range, containers: &[u64]) -> Result<u64, Refusal> {
        let tx = self.db.begin_write().map_err(|e| self.failed(e))?;
        let mut removed = 0;
        {
            let mut table = tx.open_table(ENTRIES).map_err(|e| self.failed(e))?;
            let mut by = tx
                .open_multimap_table(BY_CONTAINER)
                .map_err(|e| self.failed(e))?;
            for &c in containers {
                let fps: Vec<[u8; 32]> = by
                    .get(c)
                    .map_err(|e| self.failed(e))?
                    .map(|v| v.map(|v| *v.value()))
                    .collect::<Result<_, _>>()
                    .map_err(|e| self.failed(e))?;
                for fp in fps
                    .into_iter()
                    .filter(|fp| range.holds(&Fingerprint::new(*fp)))
                {
                    let owned_by_c = table
                        .get(&fp)
                        .map_err(|e| self.failed(e))?
                        .is_some_and(|v| v.value()[..8] == c.to_be_bytes());
                    if owned_by_c {
                        table.remove(&fp).map_err(|e| self.failed(e))?;
                        removed += 1;
                    }
                    by.remove(c, &fp).map_err(|e| self.failed(e))?;
                }
            }
        }
        tx.commit().map_err(|e| self.failed(e))?;
        Ok(removed)
    }
}

fn partition(s: &Shared) -> Result<Arc<Partition>, Refusal> {
    s.index.clone().ok_or_else(|| {
        Refusal::NotHere("this chunkd holds no index partition (start it with --etcd)".into())
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Refusal::Failed(format!("task failed: {e}")))?
}

type Shd = State<Arc<Shared>>;

pub(crate) async fn lookup(State(s): Shd, body: Bytes) -> Response {
    let run = async {
        let p = partition(&s)?;
        let (t, fps) = wire::decode_lookup(&body)?;
        p.admit(t, fps.iter()).await?;
        let found = blocking(move || p.lookup(&fps)).await?;
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
        blocking(move || p.add(container, &entries)).await
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
        blocking(move || p.forget(&range, &containers)).await
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

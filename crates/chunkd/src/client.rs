//! [`IndexClient`]: the fingerprint index as one thing, over every chunkd
//! that owns part of it. A batch is split by range, the parts go to their
//! owners at once, and a part refused for a stale epoch is sent again
//! after the range table is read again.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use reqwest::StatusCode;

use crate::ranges::{Range, RangeStore, RangeTable, RangesError};
use crate::wire::{self, IndexOp, Target};
use crate::{Fingerprint, Location};

/// Rounds of "refused for a stale epoch, read the table, send again".
const ROUNDS: usize = 3;

/// Why one owner did not answer a part of a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnerFailure {
    #[error("cannot reach it: {0}")]
    Unreachable(String),
    #[error("refused with HTTP {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("answered garbage: {0}")]
    Garbage(String),
    /// Still not the owner at the epoch after the table was read again.
    #[error("not the owner at the epoch the range table names: {0}")]
    Stale(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Ranges(#[from] RangesError),
    #[error("{op} on chunkd {owner}: {failure}")]
    Owner {
        op: &'static str,
        owner: String,
        #[source]
        failure: OwnerFailure,
    },
    #[error("token file {}: {source}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("a location of {0} bytes; at most {max} are allowed", max = Location::MAX)]
    LongLocation(usize),
    #[error("cannot start the index client: {0}")]
    Start(String),
}

/// How to reach the index.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// etcd endpoints holding the range table.
    pub etcd: Vec<String>,
    pub fsid: String,
    /// The file holding the chunkds' shared secret.
    pub token_file: PathBuf,
    pub connect_timeout: Duration,
    /// Time allowed for one request to one owner.
    pub request_timeout: Duration,
}

impl ClientConfig {
    /// 2 s to connect, 30 s a request.
    pub fn new(etcd: Vec<String>, fsid: impl Into<String>, token_file: impl Into<PathBuf>) -> Self {
        ClientConfig {
            etcd,
            fsid: fsid.into(),
            token_file: token_file.into(),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// One per fingerprint asked, in order.
    pub locations: Vec<Option<Location>>,
    /// Owners whose part went unanswered, and why: their fingerprints are
    /// reported absent (missed dedup, never lost data).
    pub unavailable: Vec<(String, OwnerFailure)>,
}

/// How an [`IndexClient`] reaches the owners and the range table: over
/// HTTP and etcd ([`IndexClient::connect`]), or in-process
/// ([`IndexClient::with_transport`], for a simulation).
pub trait IndexTransport: Send + Sync {
    /// Sends each part (an owner's URL and a request body of `op`) at
    /// once; one answer per part, in order: the body of a success, or
    /// why not (a stale epoch is [`OwnerFailure::Stale`]).
    fn send(
        &self,
        op: IndexOp,
        parts: Vec<(String, Vec<u8>)>,
    ) -> Vec<Result<Vec<u8>, OwnerFailure>>;

    /// The range table as it is kept now; it must be set.
    fn read_table(&self) -> Result<RangeTable, RangesError>;
}

/// The partitioned index, from one client's side. Its calls block (over
/// HTTP they run on a small runtime of the client's own, waited on through
/// a channel, so they work from any thread).
pub struct IndexClient {
    transport: Arc<dyn IndexTransport>,
    table: RwLock<RangeTable>,
    stale: AtomicU64,
}

/// Parts of a batch: the range and the positions in the batch it holds.
type Parts = Vec<(Range, Vec<usize>)>;

/// A part of a batch and its owner's answer.
type Answered = (Range, Vec<usize>, Result<Vec<u8>, OwnerFailure>);

/// The owners over HTTP, the table in etcd.
struct HttpTransport {
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    store: RangeStore,
    token: String,
}

impl IndexTransport for HttpTransport {
    fn send(
        &self,
        op: IndexOp,
        parts: Vec<(String, Vec<u8>)>,
    ) -> Vec<Result<Vec<u8>, OwnerFailure>> {
        let requests: Vec<_> = parts
            .into_iter()
            .map(|(owner, body)| {
                post(
                    self.http.clone(),
                    self.token.clone(),
                    owner,
                    op.path(),
                    body,
                )
            })
            .collect();
        wait(&self.runtime, futures_util::future::join_all(requests))
    }

    fn read_table(&self) -> Result<RangeTable, RangesError> {
        let store = self.store.clone();
        let (table, _) = wait(&self.runtime, async move { store.require().await })?;
        Ok(table)
    }
}

impl IndexClient {
    /// Connects to etcd and reads the range table, which must be set.
    pub fn connect(config: &ClientConfig) -> Result<Self, ClientError> {
        let token =
            branch::read_token(&config.token_file).map_err(|source| ClientError::Token {
                path: config.token_file.clone(),
                source,
            })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("chunkd-index")
            .enable_all()
            .build()
            .map_err(|e| ClientError::Start(e.to_string()))?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .build()
            .map_err(|e| ClientError::Start(e.to_string()))?;
        let (etcd, fsid) = (config.etcd.clone(), config.fsid.clone());
        let store = wait(&runtime, async move {
            RangeStore::connect(&etcd, &fsid, Duration::from_secs(5)).await
        })?;
        Self::with_transport(Arc::new(HttpTransport {
            runtime,
            http,
            store,
            token,
        }))
    }

    /// The index reached through `transport`; reads the range table, which
    /// must be set.
    pub fn with_transport(transport: Arc<dyn IndexTransport>) -> Result<Self, ClientError> {
        let table = transport.read_table()?;
        Ok(IndexClient {
            transport,
            table: RwLock::new(table),
            stale: AtomicU64::new(0),
        })
    }

    /// The range table as this client last read it.
    pub fn table(&self) -> RangeTable {
        self.table.read().clone()
    }

    /// Parts refused for a stale epoch so far (each one made the client
    /// read the table again).
    pub fn stale_refusals(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Reads the range table again.
    pub fn refresh(&self) -> Result<(), ClientError> {
        *self.table.write() = self.transport.read_table()?;
        Ok(())
    }

    /// Groups positions by the range their fingerprint falls in, each
    /// group at most [`wire::MAX_BATCH`] long.
    fn split(&self, fps: &[Fingerprint], positions: &[usize]) -> Parts {
        let table = self.table.read();
        let mut by: BTreeMap<u64, (Range, Vec<usize>)> = BTreeMap::new();
        for &i in positions {
            let r = table.range_of(&fps[i]);
            by.entry(r.start)
                .or_insert_with(|| (r.clone(), Vec::new()))
                .1
                .push(i);
        }
        by.into_values()
            .flat_map(|(r, pos)| {
                pos.chunks(wire::MAX_BATCH)
                    .map(|c| (r.clone(), c.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Sends `parts` in rounds: what is refused for a stale epoch is split
    /// again after the table is read again. Returns each part's answer,
    /// by the positions it held.
    fn rounds(
        &self,
        op: IndexOp,
        positions: Vec<usize>,
        fps: &[Fingerprint],
        encode: impl Fn(Target, &[usize]) -> Vec<u8>,
    ) -> Vec<Answered> {
        let mut done = Vec::new();
        let mut pending = positions;
        for round in 0..ROUNDS {
            if pending.is_empty() {
                break;
            }
            if round > 0 && self.refresh().is_err() {
                tracing::warn!("chunkd index: cannot read the range table again");
            }
            let parts = self.split(fps, &pending);
            let bodies = parts
                .iter()
                .map(|(r, pos)| {
                    let t = Target {
                        start: r.start,
                        epoch: r.epoch,
                    };
                    (r.owner.clone(), encode(t, pos))
                })
                .collect();
            pending = Vec::new();
            let answers = self.transport.send(op, bodies);
            assert_eq!(answers.len(), parts.len(), "one answer per part");
            for ((range, pos), answer) in parts.into_iter().zip(answers) {
                match answer {
                    Err(OwnerFailure::Stale(why)) if round + 1 < ROUNDS => {
                        self.stale.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(owner = %range.owner, %why, "chunkd index: stale epoch; reading the ranges again");
                        pending.extend(pos);
                    }
                    other => done.push((range, pos, other)),
                }
            }
        }
        done
    }

    /// Where each fingerprint's chunk is, if the index has it. An owner
    /// that does not answer costs only its part: those fingerprints are
    /// reported absent and the owner named in [`Lookup::unavailable`].
    pub fn lookup(&self, fps: &[Fingerprint]) -> Lookup {
        let mut locations = vec![None; fps.len()];
        let mut unavailable = Vec::new();
        let encode = |t, pos: &[usize]| {
            let part: Vec<Fingerprint> = pos.iter().map(|&i| fps[i]).collect();
            wire::encode_lookup(t, &part)
        };
        for (range, pos, answer) in
            self.rounds(IndexOp::Lookup, (0..fps.len()).collect(), fps, encode)
        {
            let found = answer.and_then(|body| {
                wire::decode_found(&body, pos.len())
                    .map_err(|e| OwnerFailure::Garbage(e.to_string()))
            });
            match found {
                Ok(found) => {
                    for (i, f) in pos.into_iter().zip(found) {
                        locations[i] = f;
                    }
                }
                Err(failure) => {
                    tracing::debug!(owner = %range.owner, error = %failure, "chunkd index: lookup part unanswered; treated as not found");
                    if !unavailable.iter().any(|(o, _)| *o == range.owner) {
                        unavailable.push((range.owner, failure));
                    }
                }
            }
        }
        Lookup {
            locations,
            unavailable,
        }
    }

    /// Records that `container`, which the caller has made durable, holds
    /// these chunks. Each owner commits durably before it answers. On an
    /// error some owners may have added their part: adding is idempotent
    /// (an entry already present is kept), so the caller retries the whole
    /// batch later; until then those chunks are only missed dedup.
    pub fn add(
        &self,
        container: u64,
        entries: &[(Fingerprint, Location)],
    ) -> Result<(), ClientError> {
        let fps: Vec<Fingerprint> = entries.iter().map(|(fp, _)| *fp).collect();
        let encode = |t, pos: &[usize]| {
            let part: Vec<(Fingerprint, Location)> =
                pos.iter().map(|&i| entries[i].clone()).collect();
            wire::encode_add(t, container, &part)
        };
        let mut first_error = None;
        for (range, _, answer) in self.rounds(IndexOp::Add, (0..fps.len()).collect(), &fps, encode)
        {
            if let Err(failure) = answer {
                tracing::debug!(owner = %range.owner, error = %failure, "chunkd index: add part failed");
                first_error.get_or_insert(ClientError::Owner {
                    op: "add",
                    owner: range.owner,
                    failure,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Removes every entry of these containers (gc, before it deletes
    /// them), from every range; returns how many were removed. Fails if an
    /// owner does not answer: the caller must not delete the containers
    /// then, or that owner could report chunks that are gone.
    pub fn forget(&self, containers: &[u64]) -> Result<u64, ClientError> {
        let mut removed = 0;
        for batch in containers.chunks(wire::MAX_BATCH) {
            // One "fingerprint" per range, at its start, so that the
            // rounds send one part to each range.
            let starts: Vec<Fingerprint> = self
                .table
                .read()
                .ranges
                .iter()
                .map(|r| Fingerprint::at_prefix(r.start))
                .collect();
            let encode = |t, _: &[usize]| wire::encode_forget(t, batch);
            for (range, _, answer) in self.rounds(
                IndexOp::Forget,
                (0..starts.len()).collect(),
                &starts,
                encode,
            ) {
                let n = answer.and_then(|b| {
                    <[u8; 8]>::try_from(b.as_slice())
                        .map(u64::from_be_bytes)
                        .map_err(|_| {
                            OwnerFailure::Garbage(format!("{} bytes for a count", b.len()))
                        })
                });
                match n {
                    Ok(n) => removed += n,
                    Err(failure) => {
                        return Err(ClientError::Owner {
                            op: "forget",
                            owner: range.owner,
                            failure,
                        })
                    }
                }
            }
        }
        Ok(removed)
    }
}

/// Runs `f` on `runtime` and waits for it on a channel.
fn wait<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    f: impl Future<Output = T> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv().expect("the runtime runs every task it was given")
}

async fn post(
    http: reqwest::Client,
    token: String,
    owner: String,
    path: &'static str,
    body: Vec<u8>,
) -> Result<Vec<u8>, OwnerFailure> {
    answer(
        http.post(format!("{owner}{path}"))
            .bearer_auth(token)
            .body(body),
    )
    .await
}

/// Sends `request` and takes its answer: the body of a success; a stale
/// epoch (421) or any other refusal with the first 500 characters the
/// owner said.
async fn answer(request: reqwest::RequestBuilder) -> Result<Vec<u8>, OwnerFailure> {
    let resp = request
        .send()
        .await
        .map_err(|e| OwnerFailure::Unreachable(chain(&e)))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| OwnerFailure::Unreachable(chain(&e)))?;
    let text = || {
        String::from_utf8_lossy(&body)
            .chars()
            .take(500)
            .collect::<String>()
    };
    match status {
        s if s.is_success() => Ok(body.into()),
        StatusCode::MISDIRECTED_REQUEST => Err(OwnerFailure::Stale(text())),
        s => Err(OwnerFailure::Refused {
            status: s.as_u16(),
            message: text(),
        }),
    }
}

/// The range table as the chunkd at `url` sees it (`cairn chunkd ranges
/// show` asks every owner, to show which ones answer and what they hold).
pub fn fetch_view(url: &str, token: &str, timeout: Duration) -> Result<RangeTable, OwnerFailure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| OwnerFailure::Unreachable(e.to_string()))?;
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| OwnerFailure::Unreachable(chain(&e)))?;
    let url = format!("{}{}", crate::ranges::normalize(url), wire::VIEW);
    runtime.block_on(async {
        let body = answer(http.get(url).bearer_auth(token)).await?;
        serde_json::from_slice(&body).map_err(|e| OwnerFailure::Garbage(e.to_string()))
    })
}

/// An error and its causes on one line ("connection refused" is often
/// only in a source).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

//! A branch served by another machine's `cairn chunkd` over HTTP.
//!
//! [`wire`] is the protocol both sides use (the server is the `chunkd`
//! crate); [`ChunkdBranch`] is the client. Every request carries the shared
//! secret as a bearer token, read from a file so it never appears on a
//! command line or in a log.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{header, Method, StatusCode};
use tokio::runtime::Runtime;

use crate::{BlobKey, Branch, BranchError, RemoteFailure, Result, Space};

/// The HTTP protocol between [`ChunkdBranch`] and `cairn chunkd`.
///
/// - `PUT {BLOB}KEY` with the blob as body: 201 once it is durable; 409 if
///   the key exists; 507 (a [`NoSpaceReply`]) if the disk is full.
/// - `GET {BLOB}KEY`, optionally with `Range: bytes=A-B`: 200 or 206; 416
///   with [`SIZE_HEADER`] when the range passes the blob's end.
/// - `HEAD {BLOB}KEY`: 200 with [`SIZE_HEADER`]. `DELETE {BLOB}KEY`: 204.
/// - `GET {LIST}?prefix=P&after=K`: a [`ListPage`] of at most [`LIST_PAGE`]
///   keys after `K`, sorted.
/// - `GET {SPACE}`: a [`SpaceReply`].
///
/// Missing blobs answer 404; a missing token 401, a wrong one 403; a body
/// over the server's limit 413 before it is read; other failures 500 with
/// the reason as text.
pub mod wire {
    use serde::{Deserialize, Serialize};

    pub const BLOB: &str = "/v1/blob/";
    pub const LIST: &str = "/v1/list";
    pub const SPACE: &str = "/v1/space";
    /// A blob's size in bytes, on HEAD and on a 416.
    pub const SIZE_HEADER: &str = "x-cairn-blob-size";
    /// Keys per listing page.
    pub const LIST_PAGE: usize = 1000;

    #[derive(Debug, Serialize, Deserialize)]
    pub struct ListPage {
        pub keys: Vec<String>,
        /// More keys follow the last one of this page.
        pub more: bool,
    }

    #[derive(Debug, Serialize, Deserialize)]
    pub struct SpaceReply {
        pub total: u64,
        pub available: u64,
    }

    #[derive(Debug, Serialize, Deserialize)]
    pub struct NoSpaceReply {
        pub wanted: u64,
        pub free: u64,
        pub reserve: u64,
    }
}

/// Why a request to a chunkd failed ([`RemoteFailure::Chunkd`]).
#[derive(Debug, thiserror::Error)]
pub enum ChunkdFailure {
    /// No answer: nothing listens, the connection broke, or the time ran out.
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The server answered with an error status.
    #[error("refused with HTTP {status}: {message}")]
    Refused { status: u16, message: String },
    /// The server answered something that is not the protocol.
    #[error("answered garbage: {0}")]
    Garbage(String),
}

/// Where a chunkd branch is and how to talk to it.
#[derive(Clone)]
pub struct ChunkdConfig {
    /// `http://HOST:PORT` of the `cairn chunkd`.
    pub url: String,
    /// The file holding the shared secret (its first line).
    pub token_file: PathBuf,
    pub connect_timeout: Duration,
    /// Time allowed for one whole request, body included.
    pub request_timeout: Duration,
    /// Time the reachability check in [`ChunkdBranch::open`] may take.
    pub open_timeout: Duration,
}

impl ChunkdConfig {
    /// 5 s to connect, 60 s a request, 5 s to open.
    pub fn new(url: impl Into<String>, token_file: impl Into<PathBuf>) -> Self {
        ChunkdConfig {
            url: url.into(),
            token_file: token_file.into(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            open_timeout: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for ChunkdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkdConfig")
            .field("url", &self.url)
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

/// Reads a token file: its first line, trimmed; an empty one is refused.
pub fn read_token(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the token file is empty",
        ));
    }
    Ok(token)
}

/// Blobs on a `cairn chunkd`, key for key.
///
/// The server makes a put durable (file and directory synced) before it
/// answers, so `put` has [`crate::LocalDir`]'s guarantees on the server's
/// disk. Requests run on a small runtime the branch owns; callers wait on a
/// channel, which works from any thread, also one inside another runtime.
pub struct ChunkdBranch {
    name: String,
    base: url::Url,
    token: String,
    client: reqwest::Client,
    runtime: Runtime,
}

/// Puts in one `put_many` that are in flight at once.
const PUT_CONCURRENCY: usize = 8;

impl ChunkdBranch {
    /// Connects and asks the server for its space, so that a wrong URL or
    /// token is refused before anything is written.
    pub fn open(name: impl Into<String>, config: &ChunkdConfig) -> Result<Self> {
        let branch = Self::open_unprobed(name, config)?;
        let probe = branch.call(
            branch
                .request(Method::GET, wire::SPACE)
                .timeout(config.open_timeout),
        );
        match probe {
            Ok(resp) if resp.status == StatusCode::OK => Ok(branch),
            Ok(resp) => Err(branch.unreachable(
                config,
                format!("HTTP {}: {}", resp.status.as_u16(), resp.message()),
            )),
            Err(reason) => Err(branch.unreachable(config, reason.to_string())),
        }
    }

    /// Connects without asking the server anything: every operation fails
    /// until it answers.
    pub fn open_unprobed(name: impl Into<String>, config: &ChunkdConfig) -> Result<Self> {
        let name = name.into();
        let config_err = |reason: String| BranchError::Config {
            branch: name.clone(),
            reason,
        };
        let base = url::Url::parse(&config.url)
            .ok()
            .filter(|u| u.scheme() == "http" && u.host().is_some())
            .ok_or_else(|| config_err(format!("url {:?} is not http://HOST:PORT", config.url)))?;
        let token = read_token(&config.token_file)
            .map_err(|e| config_err(format!("token file {}: {e}", config.token_file.display())))?;
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .build()
            .map_err(|e| config_err(crate::s3::chain(&e)))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("chunkd-{name}"))
            .enable_all()
            .build()
            .map_err(|source| BranchError::Io {
                op: "start runtime for chunkd branch",
                path: name.clone().into(),
                source,
            })?;
        Ok(ChunkdBranch {
            name,
            base,
            token,
            client,
            runtime,
        })
    }

    fn unreachable(&self, config: &ChunkdConfig, reason: String) -> BranchError {
        BranchError::ChunkdUnreachable {
            branch: self.name.clone(),
            url: config.url.clone(),
            reason,
        }
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut url = self.base.clone();
        url.set_path(path);
        self.client.request(method, url).bearer_auth(&self.token)
    }

    fn blob(&self, method: Method, key: &BlobKey) -> reqwest::RequestBuilder {
        self.request(method, &format!("{}{}", wire::BLOB, key.as_str()))
    }

    /// Sends on the branch's runtime and waits for the whole answer.
    fn call(&self, req: reqwest::RequestBuilder) -> std::result::Result<Answer, ChunkdFailure> {
        self.wait(send(req, self.base.to_string()))
    }

    fn wait<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = tx.send(f.await);
        });
        rx.recv().expect("the runtime runs every task it was given")
    }

    fn remote(&self, op: &'static str, key: &str, failure: ChunkdFailure) -> BranchError {
        BranchError::Remote {
            branch: self.name.clone(),
            op,
            key: key.to_string(),
            source: RemoteFailure::Chunkd(failure),
        }
    }

    /// The error an answer other than the expected one means.
    fn refused(&self, op: &'static str, key: &BlobKey, a: Answer) -> BranchError {
        match a.status {
            StatusCode::NOT_FOUND => BranchError::NotFound {
                branch: self.name.clone(),
                key: key.clone(),
            },
            StatusCode::CONFLICT => BranchError::Exists {
                branch: self.name.clone(),
                key: key.clone(),
            },
            StatusCode::INSUFFICIENT_STORAGE => {
                match serde_json::from_slice::<wire::NoSpaceReply>(&a.body) {
                    Ok(r) => BranchError::NoSpace {
                        branch: self.name.clone(),
                        wanted: r.wanted,
                        free: r.free,
                        reserve: r.reserve,
                    },
                    Err(e) => self.remote(op, key.as_str(), ChunkdFailure::Garbage(e.to_string())),
                }
            }
            // A success other than the one asked for is not the protocol.
            status if status.is_success() => self.remote(
                op,
                key.as_str(),
                ChunkdFailure::Garbage(format!("unexpected HTTP {status}")),
            ),
            status => self.remote(
                op,
                key.as_str(),
                ChunkdFailure::Refused {
                    status: status.as_u16(),
                    message: a.message(),
                },
            ),
        }
    }

    fn put_one(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        match self.call(self.blob(Method::PUT, key).body(data.to_vec())) {
            Ok(a) if a.status == StatusCode::CREATED => Ok(()),
            Ok(a) => Err(self.refused("put", key, a)),
            Err(f) => Err(self.remote("put", key.as_str(), f)),
        }
    }

    fn size_header(&self, op: &'static str, key: &BlobKey, a: &Answer) -> Result<u64> {
        a.size.ok_or_else(|| {
            self.remote(
                op,
                key.as_str(),
                ChunkdFailure::Garbage(format!("no {} header", wire::SIZE_HEADER)),
            )
        })
    }
}

/// A whole answer: its status, the size header if any, and the body.
struct Answer {
    status: StatusCode,
    size: Option<u64>,
    body: Vec<u8>,
}

impl Answer {
    /// The server's reason, for an error status.
    fn message(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        if text.is_empty() {
            self.status.to_string()
        } else {
            text.chars().take(500).collect()
        }
    }
}

async fn send(
    req: reqwest::RequestBuilder,
    url: String,
) -> std::result::Result<Answer, ChunkdFailure> {
    let resp = req.send().await.map_err(|e| ChunkdFailure::Unreachable {
        url: url.clone(),
        reason: crate::s3::chain(&e),
    })?;
    let status = resp.status();
    let size = match resp.headers().get(wire::SIZE_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| {
                    ChunkdFailure::Garbage(format!("{} is not a number", wire::SIZE_HEADER))
                })?,
        ),
    };
    let body = resp.bytes().await.map_err(|e| ChunkdFailure::Unreachable {
        url,
        reason: crate::s3::chain(&e),
    })?;
    Ok(Answer {
        status,
        size,
        body: body.into(),
    })
}

impl Branch for ChunkdBranch {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        self.put_one(key, data)
    }

    /// Overlaps the round trips of several puts.
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        let requests: Vec<_> = blobs
            .iter()
            .map(|(key, data)| {
                let req = self.blob(Method::PUT, key).body(data.to_vec());
                send(req, self.base.to_string())
            })
            .collect();
        let answers: Vec<_> = self.wait(
            futures_util::stream::iter(requests)
                .buffered(PUT_CONCURRENCY)
                .collect::<Vec<_>>(),
        );
        answers
            .into_iter()
            .zip(blobs)
            .map(|(answer, (key, _))| match answer {
                Ok(a) if a.status == StatusCode::CREATED => Ok(()),
                Ok(a) => Err(self.refused("put", key, a)),
                Err(f) => Err(self.remote("put", key.as_str(), f)),
            })
            .collect()
    }

    fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        match self.call(self.blob(Method::GET, key)) {
            Ok(a) if a.status == StatusCode::OK => Ok(a.body),
            Ok(a) => Err(self.refused("get", key, a)),
            Err(f) => Err(self.remote("get", key.as_str(), f)),
        }
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        if len == 0 {
            // An empty range is not a valid HTTP range; the blob must still exist.
            return self.size(key).map(|_| Vec::new());
        }
        let last = offset.saturating_add(len as u64 - 1);
        let req = self
            .blob(Method::GET, key)
            .header(header::RANGE, format!("bytes={offset}-{last}"));
        match self.call(req) {
            Ok(a) if a.status == StatusCode::PARTIAL_CONTENT && a.body.len() == len => Ok(a.body),
            Ok(a) if a.status == StatusCode::PARTIAL_CONTENT => Err(self.remote(
                "read",
                key.as_str(),
                ChunkdFailure::Garbage(format!(
                    "asked for {len} bytes at {offset}, got {}",
                    a.body.len()
                )),
            )),
            Ok(a) if a.status == StatusCode::RANGE_NOT_SATISFIABLE => Err(BranchError::Truncated {
                branch: self.name.clone(),
                key: key.clone(),
                offset,
                wanted: len,
                size: self.size_header("read", key, &a)?,
            }),
            Ok(a) => Err(self.refused("read", key, a)),
            Err(f) => Err(self.remote("read", key.as_str(), f)),
        }
    }

    fn size(&self, key: &BlobKey) -> Result<u64> {
        match self.call(self.blob(Method::HEAD, key)) {
            Ok(a) if a.status == StatusCode::OK => self.size_header("stat", key, &a),
            Ok(a) => Err(self.refused("stat", key, a)),
            Err(f) => Err(self.remote("stat", key.as_str(), f)),
        }
    }

    /// Page by page, each after the last key of the one before.
    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        let mut keys = Vec::new();
        let mut after = String::new();
        loop {
            let mut url = self.base.clone();
            url.set_path(wire::LIST);
            url.query_pairs_mut()
                .append_pair("prefix", prefix)
                .append_pair("after", &after);
            let req = self.client.get(url).bearer_auth(&self.token);
            let fail = |f| self.remote("list", prefix, f);
            let a = self.call(req).map_err(fail)?;
            if a.status != StatusCode::OK {
                return Err(fail(ChunkdFailure::Refused {
                    status: a.status.as_u16(),
                    message: a.message(),
                }));
            }
            let page: wire::ListPage = serde_json::from_slice(&a.body)
                .map_err(|e| fail(ChunkdFailure::Garbage(e.to_string())))?;
            for k in page.keys {
                // Each page must continue after the last: a server that
                // repeats itself would otherwise list forever.
                if k <= after || !k.starts_with(prefix) {
                    return Err(fail(ChunkdFailure::Garbage(format!(
                        "listed {k:?} out of order"
                    ))));
                }
                after = k.clone();
                keys.push(
                    BlobKey::new(k).map_err(|e| fail(ChunkdFailure::Garbage(e.to_string())))?,
                );
            }
            if !page.more {
                return Ok(keys);
            }
        }
    }

    fn delete(&self, key: &BlobKey) -> Result<()> {
        match self.call(self.blob(Method::DELETE, key)) {
            Ok(a) if a.status.is_success() || a.status == StatusCode::NOT_FOUND => Ok(()),
            Ok(a) => Err(self.refused("delete", key, a)),
            Err(f) => Err(self.remote("delete", key.as_str(), f)),
        }
    }

    fn space(&self) -> Result<Option<Space>> {
        let fail = |f| self.remote("space", "", f);
        let a = self
            .call(self.request(Method::GET, wire::SPACE))
            .map_err(fail)?;
        if a.status != StatusCode::OK {
            return Err(fail(ChunkdFailure::Refused {
                status: a.status.as_u16(),
                message: a.message(),
            }));
        }
        let r: wire::SpaceReply = serde_json::from_slice(&a.body)
            .map_err(|e| fail(ChunkdFailure::Garbage(e.to_string())))?;
        Ok(Some(Space {
            total: r.total,
            available: r.available,
        }))
    }
}

//! The branch half: a [`LocalDir`] over HTTP, in the protocol of
//! [`branch::wire`]. Every call into the directory runs on tokio's
//! blocking pool; a put answers only once `LocalDir` has synced the blob
//! and its directory.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use branch::{wire, BlobKey, Branch, BranchError};
use serde::Deserialize;

use crate::server::Shared;

type Shd = State<Arc<Shared>>;

/// Why a blob request is not answered as asked.
pub(crate) enum Failure {
    BadRequest(String),
    Branch(BranchError),
    Task(String),
}

impl From<BranchError> for Failure {
    fn from(e: BranchError) -> Self {
        Failure::Branch(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Failure::BadRequest(m) => (StatusCode::BAD_REQUEST, m).into_response(),
            Failure::Task(m) => {
                tracing::error!(error = %m, "chunkd: request task failed");
                (StatusCode::INTERNAL_SERVER_ERROR, m).into_response()
            }
            Failure::Branch(e) => branch_error(e),
        }
    }
}

/// Runs a call into the directory off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BranchError> + Send + 'static,
) -> Result<T, Failure> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => Ok(r?),
        Err(e) => Err(Failure::Task(format!("task failed: {e}"))),
    }
}

fn key(raw: &str) -> Result<BlobKey, Failure> {
    BlobKey::new(raw).map_err(|e| Failure::BadRequest(e.to_string()))
}

fn size_header(size: u64) -> [(&'static str, HeaderValue); 1] {
    [(wire::SIZE_HEADER, HeaderValue::from(size))]
}

/// The answer a branch error means on the wire.
fn branch_error(e: BranchError) -> Response {
    let status = match &e {
        BranchError::NotFound { .. } => StatusCode::NOT_FOUND,
        BranchError::Exists { .. } => StatusCode::CONFLICT,
        BranchError::Truncated { size, .. } => {
            return (
                StatusCode::RANGE_NOT_SATISFIABLE,
                size_header(*size),
                e.to_string(),
            )
                .into_response()
        }
        BranchError::NoSpace {
            wanted,
            free,
            reserve,
            ..
        } => {
            let reply = wire::NoSpaceReply {
                wanted: *wanted,
                free: *free,
                reserve: *reserve,
            };
            return (StatusCode::INSUFFICIENT_STORAGE, Json(reply)).into_response();
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(error = %e, "chunkd: branch operation failed");
    }
    (status, e.to_string()).into_response()
}

pub(crate) async fn put(
    State(s): Shd,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Failure> {
    let key = key(&raw)?;
    blocking(move || s.dir.put(&key, &body)).await?;
    Ok(StatusCode::CREATED)
}

/// `bytes=A-B`, the one form the client sends.
fn parse_range(v: &HeaderValue) -> Option<(u64, u64)> {
    let (a, b) = v.to_str().ok()?.strip_prefix("bytes=")?.split_once('-')?;
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    (a <= b && b - a < usize::MAX as u64).then_some((a, b))
}

pub(crate) async fn get(
    State(s): Shd,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let key = key(&raw)?;
    let Some(v) = headers.get(header::RANGE) else {
        let data = blocking(move || s.dir.get(&key)).await?;
        return Ok((StatusCode::OK, data).into_response());
    };
    let (first, last) =
        parse_range(v).ok_or_else(|| Failure::BadRequest("range must be bytes=A-B".into()))?;
    let len = (last - first + 1) as usize;
    let data = blocking(move || s.dir.read_range(&key, first, len)).await?;
    Ok((StatusCode::PARTIAL_CONTENT, data).into_response())
}

pub(crate) async fn head(State(s): Shd, Path(raw): Path<String>) -> Result<Response, Failure> {
    let key = key(&raw)?;
    let size = blocking(move || s.dir.size(&key)).await?;
    Ok((StatusCode::OK, size_header(size)).into_response())
}

pub(crate) async fn delete(State(s): Shd, Path(raw): Path<String>) -> Result<StatusCode, Failure> {
    let key = key(&raw)?;
    blocking(move || s.dir.delete(&key)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    after: String,
}

/// One page. The directory is listed whole for each page (a `LocalDir`
/// cannot start a listing in the middle): a listing costs pages × keys.
pub(crate) async fn list(
    State(s): Shd,
    Query(q): Query<ListQuery>,
) -> Result<Json<wire::ListPage>, Failure> {
    let page = blocking(move || {
        s.dir.list(&q.prefix).map(|keys| {
            let mut rest = keys
                .into_iter()
                .map(|k| k.as_str().to_string())
                .filter(|k| *k > q.after);
            let keys: Vec<String> = rest.by_ref().take(wire::LIST_PAGE).collect();
            let more = rest.next().is_some();
            wire::ListPage { keys, more }
        })
    })
    .await?;
    Ok(Json(page))
}

pub(crate) async fn space(State(s): Shd) -> Result<Json<wire::SpaceReply>, Failure> {
    let space = blocking(move || s.dir.space())
        .await?
        .unwrap_or(branch::Space {
            total: 0,
            available: 0,
        });
    Ok(Json(wire::SpaceReply {
        total: space.total,
        available: space.available,
    }))
}

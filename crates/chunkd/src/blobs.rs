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

/// Runs a call into the directory off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("task failed: {e}"),
        )
    })
}

fn error_response(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}

fn key(raw: &str) -> Result<BlobKey, Response> {
    BlobKey::new(raw).map_err(|e| error_response(StatusCode::BAD_REQUEST, e.to_string()))
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
    error_response(status, e.to_string())
}

fn answer<T>(
    r: Result<Result<T, BranchError>, Response>,
    ok: impl FnOnce(T) -> Response,
) -> Response {
    match r {
        Ok(Ok(v)) => ok(v),
        Ok(Err(e)) => branch_error(e),
        Err(resp) => resp,
    }
}

pub(crate) async fn put(State(s): Shd, Path(raw): Path<String>, body: Bytes) -> Response {
    let key = match key(&raw) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let r = blocking(move || s.dir.put(&key, &body)).await;
    answer(r, |()| StatusCode::CREATED.into_response())
}

/// `bytes=A-B`, the one form the client sends.
fn parse_range(v: &HeaderValue) -> Option<(u64, u64)> {
    let (a, b) = v.to_str().ok()?.strip_prefix("bytes=")?.split_once('-')?;
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    (a <= b && b - a < usize::MAX as u64).then_some((a, b))
}

pub(crate) async fn get(State(s): Shd, Path(raw): Path<String>, headers: HeaderMap) -> Response {
    let key = match key(&raw) {
        Ok(k) => k,
        Err(r) => return r,
    };
    match headers.get(header::RANGE) {
        None => answer(blocking(move || s.dir.get(&key)).await, |data| {
            (StatusCode::OK, data).into_response()
        }),
        Some(v) => {
            let Some((first, last)) = parse_range(v) else {
                return error_response(StatusCode::BAD_REQUEST, "range must be bytes=A-B".into());
            };
            let len = (last - first + 1) as usize;
            let r = blocking(move || s.dir.read_range(&key, first, len)).await;
            answer(r, |data| {
                (StatusCode::PARTIAL_CONTENT, data).into_response()
            })
        }
    }
}

pub(crate) async fn head(State(s): Shd, Path(raw): Path<String>) -> Response {
    let key = match key(&raw) {
        Ok(k) => k,
        Err(r) => return r,
    };
    answer(blocking(move || s.dir.size(&key)).await, |size| {
        (StatusCode::OK, size_header(size)).into_response()
    })
}

pub(crate) async fn delete(State(s): Shd, Path(raw): Path<String>) -> Response {
    let key = match key(&raw) {
        Ok(k) => k,
        Err(r) => return r,
    };
    answer(blocking(move || s.dir.delete(&key)).await, |()| {
        StatusCode::NO_CONTENT.into_response()
    })
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
pub(crate) async fn list(State(s): Shd, Query(q): Query<ListQuery>) -> Response {
    let r = blocking(move || {
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
    .await;
    answer(r, |page| Json(page).into_response())
}

pub(crate) async fn space(State(s): Shd) -> Response {
    answer(blocking(move || s.dir.space()).await, |space| {
        let space = space.unwrap_or(branch::Space {
            total: 0,
            available: 0,
        });
        Json(wire::SpaceReply {
            total: space.total,
            available: space.available,
        })
        .into_response()
    })
}

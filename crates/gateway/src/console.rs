//! Requests under `/-/` go to a [`Console`] (the web dashboard) instead of
//! S3: no bucket name starts with `-`, so none is taken from S3 clients.
//!
//! The gateway reads the request's small body (at most [`BODY_MAX`]) and
//! says whether it comes from an *operator*: a header `Authorization:
//! Cairn KEY_ID:SECRET` naming a read-write key of the repository that is
//! not limited to some buckets. Everything else is read-only.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use subtle::ConstantTimeEq;

use crate::keys::Keyring;

/// The largest body a console request may carry.
pub const BODY_MAX: usize = 64 << 10;

/// A console request.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: http::Method,
    /// The path after `/-/` (`""` for the page itself).
    pub path: String,
    pub body: Bytes,
    /// Whether the request named an operator's key (see the module doc).
    pub operator: bool,
}

/// A console answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: http::StatusCode,
    pub content_type: &'static str,
    pub body: Bytes,
}

/// What serves `/-/`; called on a blocking thread (it may walk the file
/// system or start jobs).
pub trait Console: Send + Sync + 'static {
    fn answer(&self, call: Call) -> Answer;
}

pub(crate) fn is_console<B>(req: &http::Request<B>) -> bool {
    req.uri().path() == "/-" || req.uri().path().starts_with("/-/")
}

/// Whether `header` names an operator's key with its right secret.
pub(crate) fn is_operator(keys: &Keyring, header: Option<&http::HeaderValue>) -> bool {
    let Some((id, secret)) = header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Cairn "))
        .and_then(|v| v.split_once(':'))
    else {
        return false;
    };
    keys.grant(id).is_some_and(|g| {
        bool::from(g.secret.as_bytes().ct_eq(secret.as_bytes()))
            && !g.read_only
            && g.buckets.is_empty()
    })
}

/// The request as a [`Call`]; `None` (answered 413) for a body over
/// [`BODY_MAX`] or one cut off.
pub(crate) async fn call(
    req: http::Request<hyper::body::Incoming>,
    keys: &Keyring,
) -> Option<Call> {
    let operator = is_operator(keys, req.headers().get(http::header::AUTHORIZATION));
    let (parts, body) = req.into_parts();
    let body = Limited::new(body, BODY_MAX)
        .collect()
        .await
        .ok()?
        .to_bytes();
    let path = parts.uri.path();
    Some(Call {
        method: parts.method.clone(),
        path: path.strip_prefix("/-/").unwrap_or("").to_owned(),
        body,
        operator,
    })
}

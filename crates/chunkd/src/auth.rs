//! The shared secret: every request carries it as `Authorization: Bearer
//! TOKEN`; a request without one is answered 401, a wrong one 403, before
//! anything else is looked at (also the body's length).

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::server::Shared;

/// Tokens shorter than this are refused at start: a secret that can be
/// guessed is none.
pub const MIN_TOKEN: usize = 16;

pub(crate) async fn check(
    State(shared): State<std::sync::Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(given) = given else {
        return (StatusCode::UNAUTHORIZED, "a bearer token is needed").into_response();
    };
    if !bool::from(given.as_bytes().ct_eq(shared.token.as_bytes())) {
        return (StatusCode::FORBIDDEN, "wrong token").into_response();
    }
    // Refused by its announced length, before a byte of it is read; a body
    // without one is cut off at the limit as it is read.
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|len| len > shared.max_body) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("bodies are limited to {} bytes", shared.max_body),
        )
            .into_response();
    }
    next.run(req).await
}

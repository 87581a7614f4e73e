//! The gateway's errors, and how a file-system error becomes an S3 one.

use std::path::PathBuf;

use s3s::{S3Error, S3ErrorCode};

pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot read or write the access keys at {}: {}", .0.display(), .1)]
    Keys(PathBuf, #[source] std::io::Error),
    #[error("the access keys at {} do not parse: {reason}", file.display())]
    KeysMalformed { file: PathBuf, reason: String },
    #[error("no access key {0}")]
    NoSuchKey(String),
    #[error("a repository keeps at most {0} access keys")]
    TooManyKeys(usize),
    #[error("{0:?} is not a valid bucket name (3-63 lowercase letters, digits, dots and hyphens)")]
    BadBucketName(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the gateway's threads: {0}")]
    Runtime(#[source] std::io::Error),
}

/// The S3 error for a file-system error met while serving `what` (a
/// bucket or key): missing names are the caller's `missing` code, a
/// non-directory on the way is `missing` too, anything unexpected is an
/// internal error, logged.
pub(crate) fn s3_from_fs(e: fs::FsError, missing: S3ErrorCode, what: &str) -> S3Error {
    match e.errno() {
        libc::ENOENT | libc::ENOTDIR => S3Error::new(missing),
        libc::ENOSPC => S3Error::with_message(
            S3ErrorCode::Custom("InsufficientStorage".into()),
            "the repository is full",
        ),
        _ => {
            tracing::error!(object = %what, error = %e, "the gateway met a file-system error");
            S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
        }
    }
}

/// An internal error for a blocking task that did not finish (a panic).
pub(crate) fn s3_from_join(e: tokio::task::JoinError) -> S3Error {
    tracing::error!(error = %e, "a gateway task failed");
    S3Error::with_message(S3ErrorCode::InternalError, "a gateway task failed")
}

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

/// An S3 error with S3's own message for its code. An error without a
/// message makes clients print "Unknown" (botocore, the AWS CLI).
pub(crate) fn refused(code: S3ErrorCode) -> S3Error {
    let message = standard_message(&code);
    S3Error::with_message(code, message)
}

/// S3's documented message for `code`, for the codes the gateway and s3s
/// answer with; any other code names itself.
fn standard_message(code: &S3ErrorCode) -> String {
    use S3ErrorCode as C;
    let text = match code {
        C::AccessDenied => "Access Denied.",
        C::BadDigest => "The Content-MD5 or checksum value that you specified did not match what the server received.",
        C::BucketAlreadyOwnedByYou => "The bucket that you tried to create already exists, and you own it.",
        C::BucketNotEmpty => "The bucket that you tried to delete is not empty.",
        C::EntityTooLarge => "Your proposed upload exceeds the maximum allowed object size.",
        C::IncompleteBody => "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        C::InternalError => "An internal error occurred; the server's log names it. Try again.",
        C::InvalidAccessKeyId => "The access key ID that you provided does not exist in the gateway's records.",
        C::InvalidArgument => "Invalid argument.",
        C::InvalidBucketName => "The specified bucket is not valid.",
        C::InvalidPart => "One or more of the specified parts could not be found, or a part's ETag did not match.",
        C::InvalidPartOrder => "The list of parts was not in ascending order by part number.",
        C::InvalidRange => "The requested range cannot be satisfied.",
        C::InvalidRequest => "Invalid request.",
        C::InvalidURI => "The specified URI could not be parsed.",
        C::KeyTooLongError => "Your key is too long.",
        C::MalformedXML => "The XML that you provided was not well formed or did not validate against the S3 schema.",
        C::MethodNotAllowed => "The specified method is not allowed against this resource.",
        C::MissingContentLength => "You must provide the Content-Length HTTP header.",
        C::NoSuchBucket => "The specified bucket does not exist.",
        C::NoSuchKey => "The specified key does not exist.",
        C::NoSuchUpload => "The specified multipart upload does not exist: its ID is wrong, or it was aborted or completed.",
        C::NotImplemented => "The gateway does not implement this functionality.",
        C::NotModified => "Not modified.",
        C::PreconditionFailed => "At least one of the preconditions that you specified did not hold.",
        C::RequestTimeTooSkewed => "The difference between the request time and the server's time is too large.",
        C::SignatureDoesNotMatch => "The request signature that the gateway calculated does not match the signature that you provided. Check your secret access key and signing method.",
        other => return format!("The request was refused: {}.", other.as_str()),
    };
    text.to_string()
}

/// An S3 error body (`<Error><Code>..</Code>..`) without a `<Message>`,
/// with S3's message for its code added; `None` for any other body.
/// s3s answers some refusals of its own (a bad signature, XML it cannot
/// parse) without a message.
pub(crate) fn with_message(body: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Error><Code>")? + "<Error><Code>".len();
    let end = start + text.get(start..)?.find("</Code>")?;
    if text.contains("<Message>") {
        return None;
    }
    let code: S3ErrorCode = text.get(start..end)?.parse().ok()?;
    let message = standard_message(&code)
        .replace('&', "&amp;")
        .replace('<', "&lt;");
    let at = end + "</Code>".len();
    Some(format!("{}<Message>{message}</Message>{}", &text[..at], &text[at..]).into_bytes())
}

/// The S3 error for a file-system error met while serving `what` (a
/// bucket or key): missing names are the caller's `missing` code, a
/// non-directory on the way is `missing` too, anything unexpected is an
/// internal error, logged.
pub(crate) fn s3_from_fs(e: fs::FsError, missing: S3ErrorCode, what: &str) -> S3Error {
    match e.errno() {
        libc::ENOENT | libc::ENOTDIR => refused(missing),
        libc::ENOSPC => {
            // Not one of S3's codes (S3 is never full): HTTP's own.
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InsufficientStorage".into()),
                "The repository is full: free space on its branches (delete, then cairn gc).",
            );
            e.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            e
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn body(inner: &str) -> Vec<u8> {
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error>{inner}</Error>").into_bytes()
    }

    #[test]
    fn a_body_without_a_message_gets_s3s_one() {
        let filled = with_message(&body("<Code>SignatureDoesNotMatch</Code>")).unwrap();
        let text = String::from_utf8(filled).unwrap();
        assert!(
            text.ends_with("<Code>SignatureDoesNotMatch</Code><Message>The request signature that the gateway calculated does not match the signature that you provided. Check your secret access key and signing method.</Message></Error>"),
            "{text}"
        );
        let custom = String::from_utf8(with_message(&body("<Code>Odd</Code>")).unwrap()).unwrap();
        assert!(
            custom.contains("<Message>The request was refused: Odd.</Message>"),
            "{custom}"
        );
    }

    #[test]
    fn a_body_with_a_message_or_no_error_is_left_alone() {
        assert_eq!(
            with_message(&body("<Code>NoSuchKey</Code><Message>m</Message>")),
            None
        );
        assert_eq!(with_message(b"<ListBucketResult></ListBucketResult>"), None);
        assert_eq!(with_message(&[0xff, 0xfe]), None);
    }

    #[test]
    fn every_refusal_carries_a_message() {
        for code in [S3ErrorCode::NoSuchKey, S3ErrorCode::Custom("X".into())] {
            let e = refused(code);
            assert!(e.message().is_some_and(|m| !m.is_empty()));
        }
    }
}

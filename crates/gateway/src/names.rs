//! Object keys as paths: where S3's flat keys and POSIX names disagree
//! (`docs/gateway.md`, "Keys and paths").

use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::error::refused;

/// S3's limit on a key, in bytes.
pub const KEY_MAX: usize = 1024;
/// Files a PUT is writing: hidden from listings, never a key.
pub const UPLOAD_PREFIX: &str = ".cairn-put.";

/// A key split into path components.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyPath<'a> {
    /// The directories above the object, then its own name.
    pub parts: Vec<&'a str>,
    /// The key ends in `/`: a directory marker, not a file.
    pub dir: bool,
}

fn invalid(msg: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, msg.to_string())
}

/// Splits `key` into path components, refusing what has no path: an empty
/// key or component (`a//b`), `.` or `..`, a NUL byte, a name a PUT uses
/// for its temporary file, and keys longer than S3 allows.
pub fn split(key: &str) -> S3Result<KeyPath<'_>> {
    if key.len() > KEY_MAX {
        return Err(refused(S3ErrorCode::KeyTooLongError));
    }
    let (body, dir) = match key.strip_suffix('/') {
        Some(b) => (b, true),
        None => (key, false),
    };
    if body.is_empty() {
        return Err(invalid(
            "an object key names a path: it cannot be empty or /",
        ));
    }
    let parts: Vec<&str> = body.split('/').collect();
    for p in &parts {
        if p.is_empty() {
            return Err(invalid(
                "an object key cannot hold an empty path component (//)",
            ));
        }
        if *p == "." || *p == ".." {
            return Err(invalid(
                "an object key cannot hold . or .. as a path component",
            ));
        }
        if p.contains('\0') {
            return Err(invalid("an object key cannot hold a NUL byte"));
        }
        if p.starts_with(UPLOAD_PREFIX) {
            return Err(invalid("names starting .cairn-put. are the gateway's own"));
        }
        if p.len() > 255 {
            return Err(refused(S3ErrorCode::KeyTooLongError));
        }
    }
    Ok(KeyPath { parts, dir })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_into_components() {
        assert_eq!(
            split("a/b c/ü+%.txt").unwrap(),
            KeyPath {
                parts: vec!["a", "b c", "ü+%.txt"],
                dir: false
            }
        );
        assert_eq!(
            split("dir/").unwrap(),
            KeyPath {
                parts: vec!["dir"],
                dir: true
            }
        );
    }

    #[test]
    fn keys_without_a_path_are_refused() {
        for key in ["", "/", "a//b", "./a", "a/../b", "a/.", "x/.cairn-put.1"] {
            assert_eq!(
                split(key).unwrap_err().code(),
                &S3ErrorCode::InvalidArgument,
                "{key}"
            );
        }
        let long = "k".repeat(KEY_MAX + 1);
        assert_eq!(
            split(&long).unwrap_err().code(),
            &S3ErrorCode::KeyTooLongError
        );
    }
}

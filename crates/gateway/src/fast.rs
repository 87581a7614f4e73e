//! GET and HEAD find an object by the hash of its path: the metadata
//! engine's path index (hashFS, [`fs::Fs::lookup_path`]) answers a file
//! whose entry it trusts in one metadata read, instead of one lookup per
//! path component, with its xattrs (ETag, Content-Type, user metadata)
//! when they are small. Anything else (a directory marker, a missing key, any
//! error) is left to the walk in `tree`, which gives the S3 answer: this
//! path only ever shortens the way to the same inode.

use fs::Fs;
use meta::{FileKind, PathFound};

use crate::names::KeyPath;

/// The file `key` names in `bucket`, when the path index finds one.
pub fn object(fs: &Fs, bucket: &str, key: &KeyPath<'_>) -> Option<PathFound> {
    if key.dir || key.parts.is_empty() {
        return None;
    }
    let len = bucket.len() + key.parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut path = Vec::with_capacity(len);
    path.extend_from_slice(bucket.as_bytes());
    for part in &key.parts {
        path.push(b'/');
        path.extend_from_slice(part.as_bytes());
    }
    match fs.lookup_path(&path) {
        Ok(found) if found.inode.attr.kind == FileKind::File => Some(found),
        Ok(_) => None,
        Err(e) => {
            if !matches!(e.errno(), libc::ENOENT | libc::ENOTDIR) {
                tracing::debug!(error = %e, bucket, "the path index failed; walking the key");
            }
            None
        }
    }
}

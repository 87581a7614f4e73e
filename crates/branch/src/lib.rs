//! Storage branches: places that hold named, immutable blobs.
//!
//! **Owns:** moving bytes to and from one place (a local directory today; S3
//! buckets and remote nodes behind the same trait later), and making a blob
//! durable and atomically visible. [`FaultyBranch`] wraps any branch to
//! inject failures, slowness or corruption in tests.
//!
//! **Never:** interprets a blob. A branch does not know what a chunk or a
//! container is; `cas` decides what the blobs mean and what they are called.
//!
//! **Invariants:**
//! - `put` returns only when the blob is durable, and a reader sees either the
//!   whole blob or none of it (never a half-written one, even after `kill -9`).
//! - A short read is an error naming the blob, never silently fewer bytes.

mod aligned;
mod fault;
mod key;
mod local;

pub use fault::{Fault, FaultControl, FaultyBranch};
pub use key::{BlobKey, KeyError};
pub use local::LocalDir;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BranchError {
    #[error("blob {key} not found on branch {branch}")]
    NotFound { branch: String, key: BlobKey },
    #[error("blob {key} already exists on branch {branch}; blobs are never replaced")]
    Exists { branch: String, key: BlobKey },
    #[error(
        "blob {key} on branch {branch} is truncated: wanted {wanted} bytes at offset {offset}, \
         it holds {size}"
    )]
    Truncated {
        branch: String,
        key: BlobKey,
        offset: u64,
        wanted: usize,
        size: u64,
    },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = BranchError> = std::result::Result<T, E>;

/// A place that holds immutable blobs by key.
pub trait Branch: Send + Sync {
    /// A short human name, used in messages.
    fn name(&self) -> &str;
    /// Stores `data` under `key`, replacing nothing: durable and whole on return.
    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()>;
    /// Stores several blobs, each as [`Branch::put`] would, with one result
    /// per blob; a branch may overlap their writes and share their syncs.
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        blobs.iter().map(|(k, d)| self.put(k, d)).collect()
    }
    /// The whole blob.
    fn get(&self, key: &BlobKey) -> Result<Vec<u8>>;
    /// Exactly `len` bytes at `offset`.
    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// A hint that `len` bytes at `offset` will be read soon; a branch may
    /// start fetching them in the background. Never fails.
    fn prefetch(&self, _key: &BlobKey, _offset: u64, _len: u64) {}
    /// The blob's size in bytes.
    fn size(&self, key: &BlobKey) -> Result<u64>;
    /// Every blob whose key starts with `prefix`, sorted by key.
    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>>;
    /// Removes the blob; removing a missing blob is not an error.
    fn delete(&self, key: &BlobKey) -> Result<()>;
}

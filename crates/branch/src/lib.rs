//! Storage branches: places that hold named, immutable blobs.
//!
//! **Owns:** moving bytes to and from one place — a local directory
//! ([`LocalDir`]), an S3 bucket ([`S3Bucket`]), a directory another machine
//! serves with `cairn chunkd` ([`ChunkdBranch`], protocol in [`wire`]) —
//! behind one [`Branch`] trait,
//! and making a blob durable and atomically visible there. [`FaultyBranch`]
//! wraps any branch to inject failures, slowness or corruption in tests
//! (slowness on a [`Clock`]: a [`VirtualClock`] makes it cost no real time);
//! [`crash`] (behind the `testing` feature) simulates power loss, for
//! branches and for redb's storage backend, with one switch for both.
//!
//! **Never:** interprets a blob. A branch does not know what a chunk or a
//! container is; `cas` decides what the blobs mean and what they are called.
//! A branch never hides a failure behind partial or substitute data.
//!
//! **Invariants** (every implementation passes the same conformance suite,
//! `testing::conformance`, behind the `testing` feature):
//! - `put` returns only when the blob is durable, and a reader sees either the
//!   whole blob or none of it (never a half-written one, even after `kill -9`).
//! - `put` never replaces: a key already present gives [`BranchError::Exists`].
//! - A short read is an error naming the blob, never silently fewer bytes.
//! - Every error names the blob (or file) and the operation it is about.
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).
//!
//! S3 goes through the `object_store` crate rather than hand-written HTTP:
//! request signing, retries with backoff, timeouts and the S3 error and
//! listing formats are each easy to get subtly wrong, and that crate is
//! maintained against real S3 and its look-alikes. A chunkd branch goes
//! through `reqwest`, the HTTP client object_store itself is built on.

mod aligned;
mod clock;
#[cfg(feature = "testing")]
pub mod crash;
mod fault;
mod key;
mod local;
mod remote;
mod s3;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;

pub use clock::{Clock, SystemClock, VirtualClock};
pub use fault::{Fault, FaultControl, FaultyBranch};
pub use key::{BlobKey, KeyError};
pub use local::{reserve, LocalDir};
pub use remote::{read_token, wire, ChunkdBranch, ChunkdConfig, ChunkdFailure};
pub use s3::{S3Bucket, S3Config};

use std::path::PathBuf;

/// Why a request to a remote store failed ([`BranchError::Remote`]).
#[derive(Debug, thiserror::Error)]
pub enum RemoteFailure {
    /// The store's client answered with an error. Boxed: it is large and
    /// rare. Its message names its causes too, as the transport's own words
    /// ("connection refused") are often only in a source.
    #[error("{}", s3::chain(.0.as_ref()))]
    Store(#[source] Box<object_store::Error>),
    /// A ranged read answered with fewer bytes than the blob holds there.
    #[error("asked for {wanted} bytes at offset {offset}, got fewer")]
    ShortRead { wanted: usize, offset: u64 },
    /// A `cairn chunkd` could not be reached, refused, or answered garbage.
    #[error(transparent)]
    Chunkd(ChunkdFailure),
}

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
    /// A remote store answered with an error, or could not be reached,
    /// after the configured retries.
    #[error("{op} {key} on branch {branch}: {source}")]
    Remote {
        branch: String,
        op: &'static str,
        /// The blob, or for a listing the prefix.
        key: String,
        #[source]
        source: RemoteFailure,
    },
    /// A remote branch could not be used when it was opened: nothing listens
    /// at the endpoint, the bucket does not exist, or the credentials are
    /// refused.
    #[error("branch {branch}: cannot use bucket {bucket:?} at {endpoint}: {reason}")]
    Unreachable {
        branch: String,
        endpoint: String,
        bucket: String,
        reason: String,
    },
    /// A chunkd branch could not be used when it was opened: nothing
    /// listens at the URL, or the token is refused.
    #[error("branch {branch}: cannot use the chunkd at {url}: {reason}")]
    ChunkdUnreachable {
        branch: String,
        url: String,
        reason: String,
    },
    /// A branch's configuration is malformed.
    #[error("branch {branch}: invalid configuration: {reason}")]
    Config { branch: String, reason: String },
    /// Storing would eat into the space kept free on the branch's disk for
    /// the metadata engines (see [`LocalDir`]): nothing was written.
    #[error(
        "no space left on branch {branch}: {wanted} bytes to store, {free} bytes free, \
         {reserve} of them kept for metadata"
    )]
    NoSpace {
        branch: String,
        wanted: u64,
        free: u64,
        reserve: u64,
    },
}

impl BranchError {
    /// Whether the error means the branch is full (and writing may work
    /// again once space is freed), rather than damaged or unreachable.
    pub fn is_no_space(&self) -> bool {
        match self {
            BranchError::NoSpace { .. } => true,
            BranchError::Io { source, .. } => is_no_space_io(source),
            _ => false,
        }
    }
}

/// ENOSPC or EDQUOT: the disk, or the user's quota on it, is full.
pub fn is_no_space_io(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// How much a branch holds and can still take, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// The size of the storage under the branch.
    pub total: u64,
    /// What the branch can still store: free space less what it keeps in
    /// reserve.
    pub available: u64,
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
    /// How much the branch holds and can still take; `None` when it cannot
    /// tell (an object store has no fixed size).
    fn space(&self) -> Result<Option<Space>> {
        Ok(None)
    }
}

//! `cairn chunkd`: a directory on one machine served to others as a
//! branch, and a partition of the fingerprint index shared by every client
//! of one file system (`docs/chunkd.md`).
//!
//! **Owns:** the chunkd server ([`start`]): the branch protocol
//! ([`branch::wire`]) over a [`branch::LocalDir`], and the index protocol
//! ([`wire`]) over a redb table fingerprint -> (container, location) for
//! the ranges of the fingerprint space it owns; the range table in etcd
//! ([`ranges`]: who owns which range at which epoch, changed in one etcd
//! transaction); and the index's client ([`IndexClient`]), which splits a
//! batch by owner and sends the parts at once. The branch's client is
//! [`branch::ChunkdBranch`].
//!
//! **Seams:** an owner's request handling is [`PartitionCore`] (admit by
//! owner, epoch and range, then the entries' operation), synchronous and
//! free of HTTP and etcd: the server wraps it, reading its view of the
//! table from etcd. The client reaches owners and the table through an
//! [`IndexTransport`]: HTTP and etcd ([`IndexClient::connect`]), or one a
//! simulation provides ([`IndexClient::with_transport`]; the range
//! failover simulation, `crates/repo/tests/chunk_range_failover_simulation.rs`,
//! joins the two in-process).
//!
//! **Never:** interprets a blob or a location (both are opaque bytes);
//! decides when a chunk may be indexed (the caller adds only after its
//! container is durable) or when a container may go (gc forgets first);
//! logs, prints or returns the token.
//!
//! **Invariants:**
//! - A put is answered only once the blob and its directory are synced;
//!   an add only once its redb transaction is committed durably.
//! - A request without the token is answered 401, with a wrong one 403,
//!   and changes nothing; a body announced over the limit is refused (413)
//!   before it is read, one without a length once it passes the limit.
//! - A chunkd answers an index request only for a range it owns at the
//!   epoch the request names (421 otherwise); it learns of a newer epoch
//!   from etcd at least every `refresh` and at once when a request names
//!   one (see [`index`] for what the window between costs).
//! - A lookup never fails for an owner that does not answer: its part is
//!   "not found" (missed dedup, never data); an add or a forget does.
//! - Every request answered with an error is logged (method, path,
//!   status; never headers).

mod admin;
mod auth;
mod blobs;
mod client;
mod entries;
mod error;
pub mod index;
pub mod ranges;
mod server;
pub mod wire;

pub use admin::{assign_range, init_ranges, owner_status, read_ranges, OwnerStatus};
pub use auth::MIN_TOKEN;
pub use client::{
    fetch_view, ClientConfig, ClientError, IndexClient, IndexTransport, Lookup, OwnerFailure,
};
pub use entries::EntriesError;
pub use error::ChunkdError;
pub use index::{IndexError, IndexRequest, PartitionConfig, PartitionCore, Refusal};
pub use server::{start, Config, Running};
pub use wire::IndexOp;

use std::fmt;

/// A chunk's fingerprint: 32 bytes (cairn's keyed BLAKE3 chunk id).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn new(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 8 bytes, big-endian: what ranges are cut by.
    pub fn prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }

    /// The smallest fingerprint with this prefix.
    pub fn at_prefix(prefix: u64) -> Self {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(&prefix.to_be_bytes());
        Fingerprint(b)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Where a chunk is, as the caller encodes it (cas's `ChunkLocation` is 28
/// bytes): opaque to chunkd, at most [`Location::MAX`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location(Vec<u8>);

#[derive(Debug, thiserror::Error)]
#[error("a location of {0} bytes; at most {max} are allowed", max = Location::MAX)]
pub struct LocationTooLong(pub usize);

impl Location {
    pub const MAX: usize = 64;

    pub fn new(bytes: Vec<u8>) -> Result<Self, LocationTooLong> {
        if bytes.len() > Self::MAX {
            return Err(LocationTooLong(bytes.len()));
        }
        Ok(Location(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

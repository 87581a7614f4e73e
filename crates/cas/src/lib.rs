//! The content-addressed chunk store.
//!
//! **Owns:** chunk ids (keyed BLAKE3-256), containers (append-only in memory,
//! a few MiB, made of zstd/lz4/raw compression regions (of the store's
//! region size, or smaller where a stream asks: `write_batch_in`; a read
//! never assumes a size), sealed by a
//! checksummed footer), the fingerprint index (redb, plus a compact in-RAM set
//! of 4-byte short fingerprints), named retention roots, the write pipeline
//! (parallel hashing and compression under a memory budget, one open
//! container per stream) and integrity checking and index rebuild. Each
//! stream's containers are stored under the stream's [`Protection`] (policy
//! and allowed branches), and the index records each container's policy.
//! It re-exports the ids and policy types its callers need ([`ChunkId`]
//! from `ids`; [`Policy`], [`PolicyError`], [`BranchId`] from
//! `redundancy`), so `fs` depends on neither of those crates.
//! Several stores (the *clients* of one file system, each with its own
//! index) may share branches: each makes containers in its own id range
//! ([`ClientNo`] in the top bits of [`ContainerId`]) and keeps its roots
//! under its own prefix; a chunk its index does not know is asked of a
//! [`SharedIndex`] ([`CatchUp`] indexes the other clients' containers
//! found on the branches; `repo` has one over the chunkd index service),
//! and a collection over shared branches deletes only the collecting
//! client's containers, after every other client stopped deduplicating
//! against them (`peers.rs`; the protocol is `gc`'s `peers`;
//! `docs/cluster.md`).
//! A caller may remember a chunk's location and read it there without the
//! index ([`Store::read_hinted`]; a stale hint falls back to the normal
//! read). Every read of storage is counted: containers and root blobs
//! ([`Store::storage_reads`]), the index's and roots' redb files
//! ([`Store::index_reads`]).
//!
//! **One path into storage.** Every container and root blob is written,
//! read, listed and deleted through the [`redundancy::Redundant`] layer
//! (the private `storage` module, where the layer's errors become the
//! store's, once). A repository without `[[branch]]` entries is `single`
//! on one branch: [`Store::open`] gives it a layer in the *plain layout*
//! ([`redundancy::Redundant::plain`]), which stores each container as the
//! raw blob `containers/<dir>/<id>` it always was, with no shard header, so
//! existing repositories keep their bytes and nothing is converted. A
//! container that is gone (on no branch, or its shards lost beyond its
//! policy) is [`CasError::ContainerLost`] on every path, plain or not.
//!
//! **Never:** knows a path or a file name, or how chunks form a file (that is
//! `recipe`'s and `fs`'s business); chooses a policy (callers do); touches
//! storage except through the redundancy layer.
//!
//! **Invariants:**
//! 1. A chunk's id is the keyed BLAKE3 of its plaintext; every read verifies
//!    it, and a mismatch is an error naming container and chunk.
//! 2. A container is durable on its branch before any index entry points at
//!    it; [`StreamWriter::flush`] returns only when every chunk the stream
//!    wrote or deduplicated against is durable and indexed. The write
//!    path's index commits are not synced (a file sync costs the branch's
//!    sync, not the index's too): every container the metadata may
//!    reference is either in the durable index or at or above its durable
//!    *indexed mark*, and [`Store::open`] indexes those from their footers
//!    before anything trusts the index (`index.rs` has the details).
//! 3. The index can be rebuilt from the containers alone
//!    ([`Store::rebuild_index`]), and the roots from their blobs on the
//!    branch ([`Store::recover_roots`]): the branch alone holds everything.
//!    An index that does not match the containers (empty, lost, older than
//!    them) is detected ([`Store::verify_index`]) rather than trusted.
//! 8. Checking, rebuilding and collecting go on past a container that
//!    cannot be read (gone, or its shards lost beyond its policy) and report
//!    it; only [`Store::drop_damaged`], asked for by name, deletes what is
//!    left of a damaged container.
//! 4. A chunk that is already stored is not stored again by the same stream,
//!    nor by another stream once it is sealed, unless that stream asks for
//!    a strictly stronger policy than the stored copy has: then it is stored
//!    again and its index entry moves to the stronger container (never to a
//!    weaker one). (Two streams that write the same new chunk at the same
//!    moment, before either seals its container, may both store it; the
//!    index keeps the first copy of equal strength.)
//! 5. Garbage collection never deletes a chunk that is marked or that a
//!    writer deduplicated against while it ran (the protocol is in `gc.rs`).
//! 6. A chunk a read returns keeps alive little more memory than itself, so
//!    callers may cache it as it is: it shares its buffer (the span read, or
//!    the region decompressed) only with chunks returned by the same read
//!    that together use at least 7/8 of it; otherwise it is copied out.
//!    (A random read of a raw region reads only its chunks' bytes,
//!    [`Store::read_around`], which its chunks then use whole.)
//! 7. A sealed container is never dropped because a branch is full: it is
//!    parked in memory, readable, and retried until stored (`stall`), and
//!    [`Store::waiting_for_space`] tells callers not to make anything that
//!    points at it durable meanwhile. Only garbage collection drops a
//!    parked container, and only one that holds no marked chunk.
//! 8. A stored copy of a chunk that failed verification is recorded as
//!    damaged and never deduplicated against again: the same data written
//!    again is stored anew and its index entry moves to the good copy.
//!    A container whose footer is damaged gives up every chunk its region
//!    records name and that verifies ([`container::recover`]); garbage
//!    collection rewrites every container recorded as damaged.
//! 10. A container is never deleted or judged by a store of another
//!     client: a collection's candidates are its own client's containers
//!     ([`Store::begin_collection_among_clients`]; the plain
//!     [`Store::begin_collection`] is refused with more than one client);
//!     a container another client deleted is forgotten, not reported as
//!     damage, when a read or a check finds it gone; and orphan
//!     removal and the index's id mark look only at the store's own range.
//!     A shared index hears of a container only once it is durable and
//!     indexed ([`SharedIndex::publish`]), and is told to forget a
//!     container before a collection deletes it; if it cannot, nothing is
//!     deleted ([`SharedIndex::forget`]). A container a shared index
//!     names is indexed only from its own footer, found by its own key
//!     (never trusted from the answer alone, never by listing every
//!     container); one that cannot be read is ignored (missed dedup).
//! 9. Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!    does not spread to later callers (`docs/engineering.md`). A dead I/O
//!    thread is [`CasError::IoThreadDead`] for every writer and every reader
//!    waiting on a pending chunk, never a panic or a hang.
//!
//! The container format and the compact index are written by hand because
//! they are what makes cairn cairn (DDFS's container and short-fingerprint
//! designs); hashing, compression, the persistent B-tree and thread pools are
//! well-kept crates.

mod budget;
mod check;
mod compact;
pub mod container;
mod gc;
mod hinted;
mod id;
mod index;
mod le;
mod peers;
mod protection;
pub mod qos;
mod read;
pub mod region;
mod salvage;
mod shared;
mod stall;
mod storage;
mod store;
mod writer;

use std::path::PathBuf;

pub use branch::Space;
pub use budget::{Budget, Permit};
pub use check::{CheckProgress, CheckReport, Dropped, Problem, RebuildReport};
pub use container::{ChunkLocation, ContainerError};
pub use gc::{Assessment, Collection, Prepared, Reclaimed};
pub use id::{ChunkId, ClientNo, ContainerId, RepoKey, ShortFp};
pub use index::{Compaction, ContainerInfo};
pub use protection::{needs_restore, BranchId, Policy, PolicyError, Protection};
pub use read::{Around, Fetched};
pub use region::{Compression, RegionError};
pub use shared::{CatchUp, IdLedger, LedgerError, SharedIndex};
pub use store::{registered_clients, Store, StoreSettings, StoreStats, INDEX_FILE, ROOTS_FILE};
pub use writer::{Durable, StreamWriter, WriteStats};

#[derive(Debug, thiserror::Error)]
pub enum CasError {
    #[error("chunk {0} is not in the store")]
    UnknownChunk(ChunkId),
    #[error("chunk {id} in container {container} is corrupt: {reason}")]
    CorruptChunk {
        id: ChunkId,
        container: ContainerId,
        reason: String,
    },
    #[error("container {container} is corrupt: {source}")]
    CorruptContainer {
        container: ContainerId,
        #[source]
        source: ContainerError,
    },
    #[error("container {container} failed to be written: {source}")]
    WriteFailed {
        container: ContainerId,
        /// Shared: every flush waiting for the container gets it.
        #[source]
        source: std::sync::Arc<WriteFailure>,
    },
    /// A branch had no room for the container: it is kept in memory, its
    /// chunks readable, and written as soon as space is freed.
    #[error(
        "no space left to store container {container} ({reason}); it is kept in memory and \
         written once space is freed (delete files, then run `cairn gc`)"
    )]
    NoSpace {
        container: ContainerId,
        reason: String,
    },
    /// The container is on no branch, or its shards are lost beyond its
    /// policy: the same error whether a read, a check, a collection or a
    /// repair met it, on a plain repository or a redundant one. `source`
    /// says which ([`CasError::is_not_found`]) and names the faults.
    #[error("{source}")]
    ContainerLost {
        container: ContainerId,
        #[source]
        source: Box<redundancy::Error>,
    },
    #[error(
        "the fingerprint index at {} cannot be opened: {source} \
         (it is derived data: `cairn repair --rebuild-index` recreates it)",
        path.display()
    )]
    IndexOpen {
        path: PathBuf,
        #[source]
        source: redb::Error,
    },
    /// The index opened but does not describe the containers on the
    /// branches (an empty, lost or old `index.redb`): reads of what it
    /// does not know would fail, and a collection would take the unknown
    /// containers for orphans.
    #[error(
        "the fingerprint index does not match the store: {reason} \
         (it is derived data: `cairn repair --rebuild-index` rebuilds it from the containers)"
    )]
    IndexMismatch { reason: String },
    #[error("fingerprint index: {0}")]
    Index(#[from] redb::Error),
    #[error("the store at {} is in use by another cairn process", .0.display())]
    Busy(PathBuf),
    #[error("invalid root label {0:?}: use 1-255 bytes without control characters")]
    BadLabel(String),
    #[error("no root named {0:?}")]
    NoSuchRoot(String),
    /// The thread that makes containers durable died (a bug): what was
    /// written since the last flush is not durable; restart cairn.
    #[error(
        "the chunk store's I/O thread stopped (a bug, see the log): new data cannot be made \
         durable until cairn is restarted"
    )]
    IoThreadDead,
    #[error("a garbage collection is already running on this store")]
    CollectionRunning,
    /// Every container id of this client's range is used (2^48 of them).
    #[error("client {0} has used every container id of its range")]
    ContainerIdsExhausted(ClientNo),
    /// The id ledger did not record this store's reservation of container
    /// ids (see [`IdLedger`]): refused (another repository with this
    /// client number reserved them, and nothing more is written; `None`
    /// once refused before) or not reachable.
    #[error("container ids not recorded: {}", .0.as_ref().map_or("refused before; nothing more is written".to_string(), |e| e.to_string()))]
    IdsRefused(Option<crate::shared::LedgerError>),
    /// Garbage collection on branches several clients write: one client
    /// cannot see the chunks the others wrote and have not yet recorded.
    #[error(
        "{clients} clients share this file system's branches: garbage collection is refused \
         until collection across clients exists (a collection here could not see the chunks \
         another client wrote, and would delete them; see docs/cluster.md)"
    )]
    SharedBranches { clients: usize },
    /// A blob two clients exchange during a collection is damaged.
    #[error("a collection's note on the branches is damaged: {0}")]
    BadNote(String),
    /// The client number is registered on the branches already.
    #[error("client number {0} is already registered on the branches")]
    ClientTaken(ClientNo),
    /// The shared chunk index could not forget containers a collection
    /// was about to delete: none were deleted.
    #[error("the shared chunk index could not forget {containers} containers, so none were deleted: {source}")]
    SharedIndexForget {
        containers: usize,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    /// Boxed, as every wrapped error below a layer's own: errors nest
    /// (repo > fs > cas > redundancy), and each layer would otherwise
    /// carry the sum of the sizes below it in every `Result`.
    Redundancy(Box<redundancy::Error>),
    #[error("the index records an unreadable policy for container {container}: {reason}")]
    BadPolicyRow {
        container: ContainerId,
        reason: String,
    },
}

impl From<redundancy::Error> for CasError {
    fn from(e: redundancy::Error) -> Self {
        CasError::Redundancy(Box::new(e))
    }
}

impl CasError {
    /// Whether the error means storage is full (and may work once space is
    /// freed), which a file system reports as ENOSPC rather than EIO.
    pub fn is_no_space(&self) -> bool {
        match self {
            CasError::NoSpace { .. } => true,
            CasError::Redundancy(e) => e.is_no_space(),
            CasError::Index(redb::Error::Io(e)) => branch::is_no_space_io(e),
            _ => false,
        }
    }

    /// Whether the error says a blob (a container) is on no branch.
    pub fn is_not_found(&self) -> bool {
        match self {
            CasError::ContainerLost { source, .. } | CasError::Redundancy(source) => {
                matches!(**source, redundancy::Error::NotFound(_))
            }
            _ => false,
        }
    }

    /// Whether the error says a container is gone: on no branch, or every
    /// shard of it the read looked for missing (a layer that had mapped it
    /// before another client deleted it).
    pub fn is_gone(&self) -> bool {
        if self.is_not_found() {
            return true;
        }
        match self {
            CasError::ContainerLost { source, .. } | CasError::Redundancy(source) => matches!(
                &**source,
                redundancy::Error::Unrecoverable { lost, .. }
                    if !lost.is_empty() && lost.iter().all(|f| f.kind == redundancy::FaultKind::Missing)
            ),
            _ => false,
        }
    }

    /// Whether the error means the stored copy itself cannot give the data
    /// back (corrupt, its blob gone, its shards lost beyond the policy),
    /// as opposed to the store failing as a whole: such a copy must not be
    /// deduplicated against. A branch that is only unreachable counts too
    /// when the redundancy layer cannot tell; that costs one more copy of
    /// data written again meanwhile, never a lost one.
    pub fn loses_data(&self) -> bool {
        fn lost(e: &redundancy::Error) -> bool {
            match e {
                redundancy::Error::Unrecoverable { .. } | redundancy::Error::NotFound(_) => true,
                // A blob shorter than it says (a put a power cut tore).
                redundancy::Error::Branch { source, .. } => {
                    matches!(**source, branch::BranchError::Truncated { .. })
                }
                _ => false,
            }
        }
        match self {
            CasError::CorruptChunk { .. }
            | CasError::CorruptContainer { .. }
            | CasError::ContainerLost { .. } => true,
            CasError::Redundancy(e) => lost(e),
            _ => false,
        }
    }
}

/// Why a container could not be written ([`CasError::WriteFailed`]). The
/// errors are boxed: large, and rare.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailure {
    /// The redundancy layer could not place it as its policy asks.
    #[error(transparent)]
    Redundancy(Box<redundancy::Error>),
    /// It was written, but the index could not record it.
    #[error("indexing: {0}")]
    Index(#[source] Box<CasError>),
}

pub type Result<T, E = CasError> = std::result::Result<T, E>;

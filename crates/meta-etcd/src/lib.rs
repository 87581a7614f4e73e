//! The metadata engine over etcd: [`EtcdMeta`], a [`meta::MetaStore`]
//! whose every operation is one etcd transaction, so that several cairn
//! processes (clients) can share one file system's namespace (issue 18;
//! `docs/metadata-on-etcd.md`); on one etcd cluster, or sharded over
//! several data clusters with a control cluster (RFS placement).
//!
//! **Owns:** the key layout of a file system in etcd, the optimistic
//! transaction of each operation (reads at one revision, then one `Txn`
//! comparing every key read), its bounded retries, result records for
//! retries after an unknown outcome, inode-number reservations, clients'
//! registrations; over several clusters also the shard map and its
//! fences (`shard`, `route`), the intents of operations across clusters
//! and their settling (`intent`), the coordinator that settles them
//! (`coord`), and shard moves (`cluster`).
//!
//! **Never:** holds an etcd lock or lease to fence (a compare inside the
//! transaction fences, as Jepsen found etcd's locks unsafe; an intent's
//! "lock" is a value in a fence that every transaction compares, not an
//! etcd lock); splits an operation whose keys are in one cluster over two
//! transactions (`purge_orphans` is many operations, one per orphan);
//! stores file data or recipes (they stay in the chunk store); replicates
//! anything itself (etcd does); elects beyond the coordinator's one
//! compare-and-put under a lease (`coord`), which only saves duplicate
//! work and fences nothing.
//!
//! **Key layout** (every key under `/<fsid>/`; numbers are 8-byte
//! big-endian so keys sort by number):
//! - `i/<ino>`: the inode record: attributes with link count, the parent
//!   pointer, a directory's number of entries, the content (inline bytes
//!   or the recipe id).
//! - `d/<parent>/<name>`: a directory entry -> inode (8, little-endian)
//!   and kind (1). One directory's entries are one contiguous range in
//!   name order, so a readdir page is one range read from `after`.
//! - `x/<ino>/<name>`: an extended attribute's value.
//! - `o/<ino>/<client>`: an orphan mark (an inode with no name kept for
//!   a handle of that client).
//! - `c/<client>`: a client's registration, under a lease the client
//!   renews ([`EtcdOptions::client_ttl`]) and revokes when it closes (in
//!   the control cluster over several clusters).
//! - `g`: the garbage collection across clients running now, `ga/<client>`
//!   each client's answer to its phase, `u/<client>` each mounted client's
//!   mark, by chunk-store client number, none under a lease (`board`;
//!   in the control cluster over several clusters).
//! - `k/<ino>`: a directory mark, counted by `counts` (files are the
//!   inodes that are not directories).
//! - `n`: the first inode number no client has reserved.
//! - `r/<client>/<seq>`: the result of operation `seq` of a client,
//!   written by the operation's own transaction under a lease (120 s).
//! - Over several clusters: `e/<shard>` in each data cluster (the fence
//!   of a shard it owns: epoch, intent lock, moved); `m` (the shard map),
//!   `n`, `t/<id>` (intents) and `coord/leader` (who coordinates, under
//!   its lease: [`Coordinator`]) in the control cluster. Inode numbers
//!   carry their shard in their top 16 bits ([`SHARD_SHIFT`]); every key
//!   above but `n`, `r/` and `c/` starts with one, so routes by it.
//!
//! **Invariants** (besides `meta`'s, which every operation keeps):
//! - Every mutation is exactly one etcd transaction. It compares the
//!   `mod_revision` of every key it read (0 for a key it found absent) and
//!   that its result record is absent; on a failed compare it reads again
//!   (at most [`MAX_CONFLICTS`] times, then [`EtcdError::Contended`]).
//! - A directory's entry count and link count are in its own record, which
//!   every create, link, unlink, rmdir and rename in it reads and writes:
//!   an rmdir and a create in the directory always conflict.
//! - A rename of a directory reads every ancestor of its target up to the
//!   root, so its transaction compares them all: two crossing renames
//!   cannot both commit, and no loop is ever made. A target more than
//!   [`MAX_ANCESTORS`] levels deep is refused ([`EtcdError::TooDeep`]).
//! - A retry after an unknown outcome (the reply was lost) first reads its
//!   result record, and returns the first result when it is there; its
//!   own transaction cannot apply twice (it compares the record absent).
//! - `purge_orphans` drops only the orphans of its own client and of
//!   clients not registered (`c/<client>` in the control cluster, or the
//!   one data cluster): never one of a client whose registration lives.
//! - Inode numbers come from reservations of [`INO_BATCH`] numbers (one
//!   transaction on `n` per batch), never reused; a client's unused
//!   reservation is skipped, not handed out again.
//! - Limits: at most 128 compares and 128 operations per transaction and
//!   1.5 MiB per request (etcd's defaults). The largest operations are a
//!   create with xattrs (at most [`MAX_OP_XATTRS`] of at most 64 KiB, and
//!   at most [`MAX_INLINE`] bytes inline, held twice: in the record and in
//!   the result record; about 1.3 MB) and a directory
//!   rename (10 compares plus one per ancestor); a transaction that would
//!   pass a limit is refused before it is sent ([`EtcdError::TooBig`]).
//! - Over several clusters: every read of a shard checks its fence and
//!   every transaction compares it, so a stale shard map never reads from
//!   nor writes to a cluster the shard left ([`EtcdError::Stale`], then
//!   the map is reloaded). An operation over several clusters is an
//!   intent: locked in every cluster (compares, never waits), committed
//!   by one compare in the control cluster, applied by idempotent
//!   transactions, inode records created first and deleted last (no
//!   reader meets a dangling name); anyone settles an unfinished one.
//!   Reads and answers stay linearizable: a read settles the lock of a
//!   committed intent before it reads, and an answer read from several
//!   clusters (each at its own time) is checked still to hold, else
//!   read again (`Tx::still_holds`, `Reader::strict`).
//! - Every request has a timeout; an unreachable cluster fails an
//!   operation with [`EtcdError::Unavailable`] (as `MetaError::Remote`,
//!   EIO at the file system) after [`EtcdOptions::op_deadline`], never hangs.
//!
//! Every request goes through `rpc`'s [`KvBackend`], in `etcd_model`'s
//! request and response types: a real cluster (`client`: the trait is
//! synchronous and the etcd client async, so each connection owns a tokio
//! runtime of two threads and waits for each request on a channel), or a
//! simulated one ([`sim`], endpoint `sim://NAME`) for deterministic
//! simulations; the engine's code is the same for both.

mod board;
mod client;
mod cluster;
mod coord;
mod intent;
mod keys;
mod mark;
mod mutate;
mod ops;
mod record;
mod register;
mod route;
mod rpc;
mod shard;
pub mod sim;
mod store;
mod tx;
mod view;

pub use cluster::{
    init_cluster, parse_cluster, ClusterHealth, ClusterStatus, IntentInfo, MemberHealth,
    MountedClient,
};
pub use coord::{CoordOptions, Coordinator, Event as CoordEvent, Leader};
pub use ops::{MAX_INLINE, MAX_OP_XATTRS, XATTR_SIZE_MAX};
pub use rpc::{KvBackend, MemberStatus};
pub use shard::{shard_of, ShardMap, DEFAULT_SHARDS, MAX_SHARDS, SHARD_SHIFT};
pub use store::{parse_url, EtcdMeta, EtcdOptions, INO_BATCH, MAX_CONFLICTS};
pub use tx::{MAX_ANCESTORS, MAX_TXN_BYTES, MAX_TXN_OPS};

use std::time::Duration;

use meta::MetaError;

/// What goes wrong between the store and etcd. Reaches callers as
/// [`MetaError::Remote`] (downcast to read it).
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd request failed: {0}")]
    Rpc(#[from] etcd_client::Error),
    #[error("etcd at {endpoints} did not answer within {after:?}")]
    Timeout { endpoints: String, after: Duration },
    #[error("etcd at {0} refused the request (unavailable)")]
    Refused(String),
    #[error("etcd refused the request: {0}")]
    Model(#[from] etcd_model::ModelError),
    #[error("etcd was unreachable for {after:?} (last: {last})")]
    Unavailable { after: Duration, last: String },
    #[error("the reply of a transaction was lost (fault injection)")]
    ReplyLost,
    #[error("gave up after {0} transactions that conflicted with other clients")]
    Contended(u32),
    #[error(
        "one transaction would carry {compares} compares, {ops} operations, {bytes} bytes: over etcd's limits"
    )]
    TooBig {
        compares: usize,
        ops: usize,
        bytes: usize,
    },
    #[error("the target is more than {0} directories deep: a rename there cannot be checked in one transaction")]
    TooDeep(usize),
    #[error("inode record {ino} is damaged: {why}")]
    Corrupt { ino: u64, why: &'static str },
    #[error("a damaged directory entry")]
    BadEntry,
    #[error("a damaged result record")]
    BadOutcome,
    #[error("etcd answered {got} reads of a transaction that asked for {asked}")]
    ShortAnswer { asked: usize, got: usize },
    #[error("the inode-number counter is damaged")]
    BadCounter,
    #[error("a directory entry names inode {0}, which does not exist")]
    DanglingEntry(u64),
    #[error("a parent-pointer cycle above inode {0}")]
    ParentCycle(u64),
    #[error("file system id {0:?}: use 1 to 64 letters, digits, `-` or `_`")]
    BadFsid(String),
    #[error("{0:?} is not an etcd URL: use etcd://HOST:PORT[,HOST:PORT...]/FSID")]
    BadUrl(String),
    #[error("starting the etcd client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("the shard map is stale for shard {0} (it moved, or is moving)")]
    Stale(u32),
    #[error("shard {shard} is locked by unfinished intent {intent:016x}")]
    Locked { shard: u32, intent: u64 },
    #[error("a key without an inode number cannot be routed to a shard")]
    Unrouted,
    #[error("the file system is on one etcd cluster, not over several")]
    NotSharded,
    #[error(
        "the control cluster holds no shard map for this file system: run `cairn cluster init`"
    )]
    NoMap,
    #[error("the control cluster already holds a shard map for this file system")]
    AlreadyInitialized,
    #[error("a damaged shard map")]
    BadMap,
    #[error("a damaged shard fence")]
    BadFence,
    #[error("a damaged intent record")]
    BadIntent,
    #[error("a damaged coordinator leader record")]
    BadLeader,
    #[error("no shard {0} in the shard map")]
    NoSuchShard(u32),
    #[error("no data cluster {0} in the shard map")]
    NoSuchCluster(usize),
    #[error("{0}")]
    BadClusterSpec(&'static str),
    #[error("client {client} is mounted by another process ({holder}) that is still registered in etcd: one process per client number at a time (if that process is gone, its registration lapses within its TTL, 60 s by default: mount again then)")]
    MountedElsewhere { client: u64, holder: String },
    #[error(
        "client {client}'s repositories recorded container ids up to {recorded}, but this one \
         knows only ids below {ours}: another repository with this client number (a copy of \
         this one, used since it was copied) handed out the ids this one would hand out again. \
         Nothing was written. Use the repository that was used last; remove this one, or join \
         the file system again with a number of its own (`cairn init --join`)"
    )]
    IdsBehind {
        client: u64,
        recorded: u64,
        ours: u64,
    },
    #[error("this client ({0}) was forgotten by another (`cairn cluster forget-client`) while its registration in etcd had lapsed: it writes nothing more; unmount it and mount it again")]
    Forgotten(u64),
    #[error("a damaged record of the collection across clients")]
    BadCollection,
    #[error("a damaged container-id mark")]
    BadIdMark,
    #[error(
        "collection {0:016x} is no longer the one recorded (its record was replaced or ended)"
    )]
    CollectionGone(u64),
    #[error("stopped after the first part of an intent (fault injection)")]
    Injected,
}

/// Whether `e` is an etcd error matching `f`.
pub(crate) fn is(e: &MetaError, f: impl Fn(&EtcdError) -> bool) -> bool {
    matches!(e, MetaError::Remote(src) if src.downcast_ref::<EtcdError>().is_some_and(f))
}

impl From<EtcdError> for MetaError {
    fn from(e: EtcdError) -> Self {
        MetaError::Remote(Box::new(e))
    }
}

//! What can be asked ([`Request`]) and what each answer is ([`Reply`]):
//! plain serde types, the same in this process and over the control socket.

use fs::history::{Change, CopyReport, PruneReport, SnapshotInfo, VersionInfo, VersionReport};
use fs::space::SpaceReport;
use gc::GcReport;
use serde::{Deserialize, Serialize};

use crate::{Applied, BranchLine, CheckOut, MoveOut, PolicyShow, Result, ScrubOut, ServiceError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Stats,
    Check,
    Roots,
    Rm {
        label: String,
    },
    /// Stores the stream sent with the request under `name`.
    Put {
        name: String,
        replace: bool,
    },
    /// Writes what `label` holds to the stream sent with the request.
    Get {
        label: String,
    },
    Version,
    VersionList,
    /// Drops every automatic version but the newest `keep`.
    VersionPrune {
        keep: u64,
        dry_run: bool,
    },
    SnapshotCreate {
        name: String,
    },
    SnapshotList {
        unique: bool,
    },
    SnapshotDelete {
        name: String,
    },
    SnapshotDiff {
        a: String,
        b: String,
    },
    /// Brings `path` back from snapshot or version `name`: to `to` inside
    /// the file system (default: `path` itself), or, with `out`, into that
    /// host directory (absolute; `to` is not taken with it).
    Restore {
        name: String,
        path: String,
        to: Option<String>,
        overwrite: bool,
        /// Absent from a client of an older cairn: restored inside.
        #[serde(default)]
        out: Option<String>,
    },
    Clone {
        src: String,
        dst: String,
    },
    Gc {
        threshold: f64,
        /// Absent from a client of an older cairn: the default then.
        #[serde(default = "default_max_garbage")]
        max_garbage: f64,
        dry_run: bool,
        /// Seconds; absent from a client of an older cairn: the default.
        #[serde(default = "default_peer_wait")]
        peer_wait: u64,
    },
    PolicyShow {
        path: String,
    },
    Status,
    Scrub,
    /// Applies cairn.toml as edited by hand: its rules, and branches added;
    /// refused if it leaves out a branch in use.
    Reload,
    /// Makes `config` (cairn.toml with branch `name` added) the
    /// configuration and opens the branch; refused if cairn.toml is no
    /// longer `base`, the text the edit was made from.
    BranchAdd {
        name: String,
        base: String,
        config: String,
    },
    /// Moves the shards of `old` onto `new`, then makes `config` (cairn.toml
    /// without `old`) the configuration.
    BranchReplace {
        old: String,
        new: String,
        config: String,
    },
    /// Moves the shards of `name` onto the other branches, then makes
    /// `config` (cairn.toml without `name`) the configuration.
    BranchDrain {
        name: String,
        config: String,
    },
    /// The reads the mounted file system has made of its storage so far,
    /// by what was read (exact; a benchmark's storage reads per GET).
    StorageReads,
}

impl Request {
    /// The request's kind, as its `op` on the wire (`stats`,
    /// `snapshot_create`, ...): a label of `/metrics`.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Stats => "stats",
            Request::Check => "check",
            Request::Roots => "roots",
            Request::Rm { .. } => "rm",
            Request::Put { .. } => "put",
            Request::Get { .. } => "get",
            Request::Version => "version",
            Request::VersionList => "version_list",
            Request::VersionPrune { .. } => "version_prune",
            Request::SnapshotCreate { .. } => "snapshot_create",
            Request::SnapshotList { .. } => "snapshot_list",
            Request::SnapshotDelete { .. } => "snapshot_delete",
            Request::SnapshotDiff { .. } => "snapshot_diff",
            Request::Restore { .. } => "restore",
            Request::Clone { .. } => "clone",
            Request::Gc { .. } => "gc",
            Request::PolicyShow { .. } => "policy_show",
            Request::Status => "status",
            Request::Scrub => "scrub",
            Request::Reload => "reload",
            Request::BranchAdd { .. } => "branch_add",
            Request::BranchReplace { .. } => "branch_replace",
            Request::BranchDrain { .. } => "branch_drain",
            Request::StorageReads => "storage_reads",
        }
    }

    /// Whether the request can change the repository: refused by the
    /// daemon of a read-only mount. `check` without repair, listings,
    /// `stats`, `status`, `policy show` and a gc dry run only read.
    pub fn writes(&self) -> bool {
        match self {
            Request::Gc { dry_run, .. } | Request::VersionPrune { dry_run, .. } => !dry_run,
            // Into a host directory: the repository only is read.
            Request::Restore { out, .. } => out.is_none(),
            Request::Stats
            | Request::Check
            | Request::Roots
            | Request::Get { .. }
            | Request::SnapshotList { .. }
            | Request::VersionList
            | Request::SnapshotDiff { .. }
            | Request::PolicyShow { .. }
            | Request::Status
            | Request::StorageReads => false,
            Request::Rm { .. }
            | Request::Put { .. }
            | Request::Version
            | Request::SnapshotCreate { .. }
            | Request::SnapshotDelete { .. }
            | Request::Clone { .. }
            | Request::Scrub
            | Request::Reload
            | Request::BranchAdd { .. }
            | Request::BranchReplace { .. }
            | Request::BranchDrain { .. } => true,
        }
    }

    /// Whether the request needs the file system, not just the store.
    pub fn needs_fs(&self) -> bool {
        !matches!(
            self,
            Request::Stats
                | Request::Check
                | Request::Roots
                | Request::Rm { .. }
                | Request::Put { .. }
                | Request::Get { .. }
                | Request::BranchAdd { .. }
        )
    }
}

/// What `put` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutOut {
    pub len: u64,
    pub chunks: u64,
    pub new_chunks: u64,
    pub new_bytes: u64,
    pub stored_bytes: u64,
}

/// What `get` reports: the bytes written, or that the reader went away
/// (a closed pipe: `cairn get L | head`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetOut {
    pub bytes: u64,
    pub closed: bool,
}

/// One root: its label, its id, and the size of what it holds (or why
/// that cannot be read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootLine {
    pub label: String,
    pub root: String,
    pub bytes: Option<u64>,
    pub error: Option<String>,
    /// Absent from a daemon of an older cairn: read from the label.
    #[serde(default)]
    pub kind: RootKind,
    /// When a version or snapshot was written (seconds since the Unix
    /// epoch); null for a stored file, or a record that cannot be read.
    #[serde(default)]
    pub created: Option<i64>,
}

/// What a root holds: a file stored by `put` (a stream `get` writes back),
/// or the whole file system's tree, kept by the user (`snapshot/<name>`) or
/// written on its own and aged out by retention (`version/<n>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootKind {
    #[default]
    Stream,
    Snapshot,
    Version,
}

impl RootKind {
    /// The kind of the root labelled `label`.
    pub fn of(label: &str) -> RootKind {
        if label.starts_with(fs::history::VERSION_PREFIX) {
            RootKind::Version
        } else if label.starts_with(fs::history::SNAPSHOT_PREFIX) {
            RootKind::Snapshot
        } else {
            RootKind::Stream
        }
    }
}

/// What `storage_reads` reports: reads since the mount started, each an
/// exact count of requests to one kind of storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageReads {
    /// Of the metadata engine's redb file (`meta.redb`).
    pub meta: u64,
    /// Of the chunk index's and the roots' redb files.
    pub index: u64,
    /// Of containers and root blobs, asked of the redundancy layer.
    pub containers: u64,
}

/// The label `rm` removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub removed: String,
}

/// The snapshot `snapshot delete` deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: String,
}

/// Generates [`Reply`], its variant names, and one accessor per variant
/// that turns a reply of another kind into [`ServiceError::UnexpectedReply`].
macro_rules! replies {
    ($($variant:ident($t:ty) => $into:ident),* $(,)?) => {
        /// The answer to a [`Request`], one variant per operation.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(tag = "op", content = "reply", rename_all = "snake_case")]
        pub enum Reply {
            $($variant($t),)*
        }

        impl Reply {
            /// The operation this answers.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Reply::$variant(_) => stringify!($variant),)*
                }
            }

            $(
                #[doc = concat!("The answer of a `", stringify!($variant), "` request.")]
                pub fn $into(self) -> Result<$t> {
                    match self {
                        Reply::$variant(v) => Ok(v),
                        other => Err(ServiceError::UnexpectedReply {
                            expected: stringify!($variant),
                            got: other.name(),
                        }),
                    }
                }
            )*
        }
    };
}

replies! {
    Stats(SpaceReport) => into_stats,
    Check(CheckOut) => into_check,
    Roots(Vec<RootLine>) => into_roots,
    Rm(Removed) => into_rm,
    Put(PutOut) => into_put,
    Get(GetOut) => into_get,
    Version(VersionReport) => into_version,
    VersionList(Vec<VersionInfo>) => into_version_list,
    VersionPrune(PruneReport) => into_version_prune,
    SnapshotCreate(SnapshotInfo) => into_snapshot_create,
    SnapshotList(Vec<SnapshotInfo>) => into_snapshot_list,
    SnapshotDelete(Deleted) => into_snapshot_delete,
    SnapshotDiff(Vec<Change>) => into_snapshot_diff,
    Restore(CopyReport) => into_restore,
    Clone(CopyReport) => into_clone,
    Gc(GcReport) => into_gc,
    PolicyShow(PolicyShow) => into_policy_show,
    Status(Vec<BranchLine>) => into_status,
    Scrub(ScrubOut) => into_scrub,
    Reload(Applied) => into_reload,
    BranchAdd(Applied) => into_branch_add,
    BranchReplace(MoveOut) => into_branch_replace,
    BranchDrain(MoveOut) => into_branch_drain,
    StorageReads(StorageReads) => into_storage_reads,
}

fn default_peer_wait() -> u64 {
    gc::PEER_WAIT.as_secs()
}

fn default_max_garbage() -> f64 {
    gc::MAX_GARBAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_another_kind_is_a_typed_error() {
        let reply = Reply::Rm(Removed {
            removed: "x".into(),
        });
        match reply.clone().into_put() {
            Err(ServiceError::UnexpectedReply { expected, got }) => {
                assert_eq!((expected, got), ("Put", "Rm"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reply.into_rm().unwrap().removed, "x");
    }

    #[test]
    fn replies_and_requests_keep_their_shape_on_the_wire() {
        let line = serde_json::to_string(&Reply::Rm(Removed {
            removed: "x".into(),
        }))
        .unwrap();
        assert_eq!(line, r#"{"op":"rm","reply":{"removed":"x"}}"#);
        let req: Request =
            serde_json::from_str(r#"{"op":"put","name":"n","replace":true}"#).unwrap();
        assert_eq!(
            req,
            Request::Put {
                name: "n".into(),
                replace: true
            }
        );
        assert!(!req.needs_fs());
        assert!(Request::Scrub.needs_fs());
    }

    #[test]
    fn a_requests_kind_is_its_op_on_the_wire() {
        let s = String::new;
        for req in [
            Request::Stats,
            Request::Rm { label: s() },
            Request::SnapshotCreate { name: s() },
            Request::SnapshotDiff { a: s(), b: s() },
            Request::PolicyShow { path: s() },
            Request::Gc {
                threshold: 0.5,
                max_garbage: 0.5,
                dry_run: true,
                peer_wait: 3,
            },
            Request::BranchReplace {
                old: s(),
                new: s(),
                config: s(),
            },
            Request::StorageReads,
        ] {
            let wire = serde_json::to_value(&req).unwrap();
            assert_eq!(wire["op"], req.op(), "{req:?}");
        }
    }
}

//! Every operation a user or operator can ask of a cairn repository:
//! stats, check and repair, scrub, status, recover, snapshots, restore,
//! clone, versions, gc, policies, put/get/roots/rm, branch changes,
//! reload, and `doctor` (what stands between the machine and a healthy
//! cairn: FUSE, permissions, config, key, free space, clock, dead mounts).
//!
//! **Owns:** the typed [`Request`] and its typed [`Reply`], their execution
//! ([`exec`]) against a mounted file system or a repository opened by the
//! caller, the control socket (server and client, [`control`]) through
//! which a command reaches a mounted file system, and the work behind each
//! operation that is not a single call into a lower layer (recover's
//! import, scrub's reconciliation with the index, the files a loss
//! touches, per-branch usage, the branch add/replace configuration dance).
//! The CLI, the daemon's control socket, and the coming gateway and
//! dashboard call these same functions and get the same types back.
//!
//! **Never:** parses command-line arguments, prints, or decides exit codes
//! (that is the `cli`'s); stores or reads a byte itself (that is `fs`,
//! `cas`, `recipe` and `redundancy`'s); keeps state between requests,
//! but for a daemon's list of the jobs it runs for callers that do not
//! wait ([`jobs`]: the dashboard's scrub, gc, check and snapshots) and its
//! count of the requests the control socket answered, by kind.
//!
//! **Invariants:**
//! - One computation per answer: `stats` is [`fs::space::report`] over the
//!   live file system's metadata, whether it is mounted (through its
//!   daemon) or opened here.
//! - Long operations report through [`Progress`]; a `put` whose caller is
//!   gone ([`Progress::cancelled`]) records no label for what may be a
//!   stream cut short.
//! - Every request line on the control socket carries [`control::PROTOCOL`];
//!   a mismatch is refused with both versions named, never guessed at.
//! - `doctor` only looks: it takes no lock and writes nothing, so it runs
//!   beside a mount and on a repository nothing else can open.
//! - A read-only mount's daemon refuses every request that would change
//!   the repository ([`Request::writes`]).
//! - Errors are typed ([`ServiceError`]); the messages are for people, the
//!   variants for code.

pub mod autogc;
mod branches;
mod check;
pub mod control;
mod doctor;
mod error;
mod exec;
pub mod jobs;
mod open;
mod progress;
mod recover;
mod redundancy;
mod request;
mod text;

pub use branches::{
    config_with_branch, config_without_branch, parse_config, Applied, NewBranch, NewPlace,
};
pub use check::{check_repo, rebuild_index, CheckOut, Repair, Repaired};
pub use doctor::{
    doctor, record_key_export, CairnMount, DoctorOptions, DoctorReport, Finding, FuseFacts,
    IndexTable, Severity,
};
pub use error::{Result, ServiceError};
pub use exec::{call, exec, open_fs, open_fs_on_etcd, open_fs_on_etcd_cluster, Caller, Target};
/// The live fraction under which `cairn gc` reclaims a container by
/// default.
pub const GC_THRESHOLD: f64 = 0.5;

/// What a user asks of a collection ([`Request::Gc`]).
#[derive(Debug, Clone, Copy)]
pub struct GcAsk {
    pub threshold: f64,
    pub max_garbage: f64,
    pub dry_run: bool,
    /// Seconds to wait for each mounted client's answer, across clients.
    pub peer_wait: u64,
}
pub use gc::peers::forget_client;
/// A mount or gateway over a shared namespace takes part in the other
/// clients' collections (call before it serves anything).
pub use gc::peers::participate as participate_in_collections;

/// A mount over a shared namespace ends (after `Fs::shutdown`): it takes
/// its mounted mark away (once a collection running now has ended, at
/// most 30 s) and gives up its registration, so that the other clients
/// neither wait for it nor for its registration to lapse.
pub fn leave_shared_namespace(fs: &fs::Fs) {
    gc::peers::leave(fs);
    fs.close_namespace();
}
/// The garbage `cairn gc` leaves at most by default (see `gc::GcOptions`).
pub use gc::MAX_GARBAGE as GC_MAX_GARBAGE;
/// How long `cairn gc` waits for each mounted client by default.
pub use gc::PEER_WAIT as GC_PEER_WAIT;
pub use open::{init, join, open, open_for_rebuild, open_to_check};
pub use progress::{Progress, Silent, Step};
pub use recover::{recover, RecoverFrom, Recovered};
pub use redundancy::{
    policy_mix, BranchLine, ContainerPlace, MoveOut, PolicyShare, PolicyShow, ScrubOut,
};
pub use request::{
    Deleted, GetOut, PutOut, Removed, Reply, Request, RootKind, RootLine, StorageReads,
};
pub use text::human_bytes;

//! A cairn repository on disk.
//!
//! **Owns:** the layout (`cairn.toml`, `key`, `meta/`, `branches/`), parsing
//! and validating `cairn.toml` into each layer's settings (including the
//! `[[branch]]` and `[[rule]]` sections, refused with a message naming the
//! culprit before anything is written), creating a repository and opening
//! its store: over one plain local branch, or over the redundancy layer of
//! the configured branches; applying a changed branch list to a store in
//! use ([`reconfigure`]); the repository lock (`run/lock`, see `lock.rs`),
//! which every open takes before it touches anything; the repository's
//! record of its own configuration (`meta/repository.toml` and a marker
//! blob on each branch, see [`record`]), against which every config is
//! checked, and from which a lost `cairn.toml` is written back
//! ([`recover_config`]); the key file and its export and import
//! ([`keyfile`]); client repositories of a file system shared by several
//! mounts ([`Repo::join`], `join.rs`: the key and config copied, a client
//! number in `meta/client`, registered on the branches); the shared
//! fingerprint index a mount with `--meta` uses (`[shared_index]`:
//! [`ChunkdIndex`] over `chunkd::IndexClient`, in `shared_index.rs`, since
//! neither `cas` nor `chunkd` may know the other; without it `cas::CatchUp`).
//!
//! **Never:** stores or reads chunks itself; that is `cas`, reached through
//! the [`Repo::store`] it opens.
//!
//! **Invariants:** a repository is created complete or not at all (the
//! config is written last, and its presence is what makes a directory a
//! repository); the key file is never rewritten once created, except by
//! `key import` of the key the record's check value names; a process
//! that does not hold the repository's lock changes nothing on disk (it is
//! turned away with [`RepoError::Locked`], naming the holder, before any
//! partial cleanup, index open or config write), and an open [`Repo`] holds
//! the lock until its store is closed; a `cairn.toml` that disagrees with
//! the record (a recorded branch missing or moved, no branches over a
//! branch repository, a branch of another repository) or a key that is not
//! the repository's is refused with [`RepoError::Disagrees`] or
//! [`RepoError::WrongKey`] before any branch, index or record is written;
//! the record changes only when a config is accepted, and never forgets a
//! branch that still holds shards (only `branch remove|replace`, through
//! [`write_config`], drop one); while the store holds versions, a
//! file-system metadata engine that is missing, empty, damaged or whose
//! namespace is empty while the newest version is not, is refused before
//! anything is written to it ([`Repo::open_meta`], naming `cairn recover`).

mod config;
mod join;
pub mod keyfile;
mod layout;
mod lock;
mod reconfigure;
pub mod record;
mod shared_index;

pub use config::{
    AutoGc, BranchProblem, BranchSpec, ChunkdLocation, ChunkingRuleProblem, ChunkingRuleSpec,
    Config, ConfigError, ConfigProblem, KeyProblem, Location, RedundancyConfig, RuleProblem,
    RuleSpec, S3Location, SharedIndexConfig,
};
pub use join::JoinProblem;
pub use layout::{default_location, IndexSetAside, Repo, RepoError};
pub use lock::{holder_of, is_locked, last_unmount, Holder, Unmounted};
pub use reconfigure::{reconfigure, Reconfigured};
pub use record::{recover_config, write_config, Disagreement, RecoveredConfig};
pub use shared_index::ChunkdIndex;

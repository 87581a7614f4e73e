//! A cairn repository on disk.
//!
//! **Owns:** the layout (`cairn.toml`, `key`, `meta/`, `branches/`), parsing
//! and validating `cairn.toml` into each layer's settings (including the
//! `[[branch]]` and `[[rule]]` sections, refused with a message naming the
//! culprit before anything is written), creating a repository and opening
//! its store: over one plain local branch, or over the redundancy layer of
//! the configured branches; applying a changed branch list to a store in
//! use ([`reconfigure`]); and the repository lock (`run/lock`, see
//! `lock.rs`), which every open takes before it touches anything.
//!
//! **Never:** stores or reads chunks itself; that is `cas`, reached through
//! the [`Repo::store`] it opens.
//!
//! **Invariants:** a repository is created complete or not at all (the
//! config is written last, and its presence is what makes a directory a
//! repository); the key file is never rewritten once created; a process
//! that does not hold the repository's lock changes nothing on disk (it is
//! turned away with [`RepoError::Locked`], naming the holder, before any
//! partial cleanup, index open or config write), and an open [`Repo`] holds
//! the lock until its store is closed; while the store holds versions, a
//! file-system metadata engine that is missing, empty, damaged or whose
//! namespace is empty while the newest version is not, is refused before
//! anything is written to it ([`Repo::open_meta`], naming `cairn recover`).

mod config;
mod layout;
mod lock;
mod reconfigure;

pub use config::{
    BranchSpec, Config, ConfigError, Location, RedundancyConfig, RuleSpec, S3Location,
};
pub use layout::{default_location, IndexSetAside, Repo, RepoError};
pub use lock::{holder_of, Holder};
pub use reconfigure::{reconfigure, Reconfigured};

//! A cairn repository on disk.
//!
//! **Owns:** the layout (`cairn.toml`, `key`, `meta/`, `branches/`), parsing
//! and validating `cairn.toml` into each layer's settings, creating a
//! repository and opening its store.
//!
//! **Never:** stores or reads chunks itself; that is `cas`, reached through
//! the [`Repo::store`] it opens.
//!
//! **Invariants:** a repository is created complete or not at all (the
//! config is written last, and its presence is what makes a directory a
//! repository); the key file is never rewritten once created.

mod config;
mod layout;

pub use config::{
    BranchSpec, Config, ConfigError, Location, RedundancyConfig, RuleSpec, S3Location,
};
pub use layout::{default_location, Repo, RepoError};

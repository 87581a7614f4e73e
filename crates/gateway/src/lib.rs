//! The S3 gateway: cairn's file system served over the S3 REST API.
//!
//! **Owns:** the mapping between S3 and the namespace (a bucket is a
//! directory under the root, an object key a path below it; see
//! `docs/gateway.md`), the S3 operations (`s3`, on s3s's `S3` trait,
//! which parses requests, checks SigV4 signatures and decodes aws-chunked
//! bodies), multipart uploads (`multipart`: a hidden directory per
//! upload in the bucket), the sweep removing abandoned uploads and
//! temporary files (`sweep`), the HTTP server ([`start`]) and the
//! repository's S3 access keys ([`keys`], in `REPO/gateway/keys.toml`).
//! GET and HEAD find a file by the metadata engine's path index first
//! (`fast`), the walk only on a miss; a small object stored in chunks is
//! read where its entry says the chunks are ([`fs::Fs::read_small`]). The
//! same port answers an unsigned `GET /metrics` from the registry `serve`
//! built, and records each request's latency there ([`Metrics`]);
//! [`serve_metrics`] answers `/metrics` alone on a port of its own (a
//! mount without the gateway).
//!
//! **Never:** reaches below `fs` (no chunk store, no metadata engine of its
//! own): it is a client of [`fs::Fs`] like the FUSE mount, and may share
//! the mount's instance. Never logs, prints or returns a secret except
//! once, from [`keys::create`] (and a first key into a file only its owner
//! reads, [`keys::save_first`]).
//!
//! **Invariants:**
//! - A PUT is all or nothing: the body goes to a temporary file in the
//!   key's directory, renamed over the key only once the body is whole and
//!   its length and Content-MD5 checked, and made durable before the reply
//!   (by a commit that started after the rename; PUTs finishing together
//!   share it: `commit`).
//!   A PUT that fails or is cut off leaves no object, no temporary file
//!   and no directory it made for its key.
//! - A body over [`Limits::max_put`] is refused before it is read (by its
//!   announced length) or once it passes the limit (without one).
//! - An ETag shown is the MD5 of the bytes the object holds now: a cached
//!   MD5 is kept with the content (recipe, size, mtime) it was computed
//!   for and used only while the file still has that content.
//! - Names starting `.cairn-put.` (a PUT's temporary file, an upload's
//!   directory) are never keys: listings leave them out and keys holding
//!   one are refused.
//! - Every file-system call runs on a bounded pool of blocking threads;
//!   bodies move in pieces of at most 1 MiB (`pieces`), never whole in
//!   memory (a GET reads at most two pieces ahead of the socket).
//! - An unsigned request, a bad signature, an unknown or revoked key, or a
//!   key without the right to the bucket or the operation, changes nothing.

mod auth;
mod checksum;
mod commit;
pub mod console;
mod error;
mod fast;
pub mod keys;
mod list;
mod md5_hash;
mod metrics;
mod multipart;
mod names;
mod pieces;
mod s3;
mod scrape;
mod server;
mod sweep;
mod tree;

pub use error::{GatewayError, Result};
pub use metrics::{Metrics, RequestFigures};
pub use scrape::{serve_metrics, Scrapes};
pub use server::{start, Limits, Options, Running};
pub use tree::NameChanged;

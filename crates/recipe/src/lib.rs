//! File recipes: a file's content as a balanced, high-fanout tree of chunk ids.
//!
//! **Owns:** turning a byte stream into chunks and a recipe tree (the write
//! pipeline: a chunking thread feeding the store's parallel hashing and
//! compression), and reading any byte range back by descending the tree.
//!
//! **Never:** knows names, directories or attributes (that is `fs`), nor
//! where chunks live (that is `cas`).
//!
//! **Invariants:**
//! - A recipe node is itself a chunk: `"CRCP"`, version, level, entry count,
//!   then per entry the cumulative end offset (u64) and the child's id. Level 0
//!   entries are data chunks, level k entries are level k-1 nodes, so every
//!   leaf is at the same depth and reading offset X reads one node per level,
//!   never scanning the file.
//! - A recipe's root chunk is durable (with everything under it) before
//!   [`store_stream`] returns.

mod node;
mod read;
mod write;

pub use node::{Node, FANOUT};
pub use read::Recipe;
pub use write::{store_stream, Stored};

use cas::ChunkId;

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error(transparent)]
    Store(#[from] cas::CasError),
    #[error("reading the input: {0}")]
    Input(#[source] std::io::Error),
    #[error("writing the output: {0}")]
    Output(#[source] std::io::Error),
    #[error("chunk {id} is not a valid recipe node: {reason}")]
    Malformed { id: ChunkId, reason: String },
    #[error("invalid chunking parameters: {0}")]
    Params(#[from] chunking::ParamsError),
}

pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

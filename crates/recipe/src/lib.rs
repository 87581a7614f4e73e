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
//! - Where a node ends is chosen by its children's ids (at most [`FANOUT`]
//!   children), so two trees of one file that differ in a few children
//!   share every other node; readers never depend on where nodes end (trees
//!   stored before this rule, with full nodes, read the same).
//! - A recipe's root chunk is durable (with everything under it) before
//!   [`store_stream`] returns.
//! - Leaf entries with id [`HOLE`] read as zeros and refer to no chunk.
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).

mod memo;
mod node;
mod read;
mod write;

pub use memo::NodeMemo;
pub use node::{Node, FANOUT};
pub use read::{Extent, Recipe};
pub use write::{store_stream, store_tree, store_tree_changed, Stored};

use cas::ChunkId;

/// A leaf entry with this id is a run of zeros of its length, stored as
/// nothing: sparse files and truncates that grow a file cost no data. (An
/// all-zero BLAKE3 output is not a chunk id anyone will meet.) This is the
/// node format's encoding of a hole and the all-zero id's only meaning:
/// nothing uses it for "no id yet", and above the node format a hole is an
/// [`Extent`] whose `chunk` is `None`. Only walkers of raw [`Node`]s (gc's
/// marking) meet this value.
pub const HOLE: ChunkId = ChunkId::from_bytes([0; 32]);

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

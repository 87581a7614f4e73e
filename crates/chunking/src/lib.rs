//! Splitting byte streams into chunks.
//!
//! **Owns:** the choice of cut points. Content-defined chunking (FastCDC 2020,
//! normalisation level 1, from the `fastcdc` crate) finds cut points from the
//! content itself, so an insert near the start of a file moves only the chunks
//! around it; fixed-size chunking cuts every `size` bytes, which suits
//! block-aligned files such as VM images and databases.
//!
//! **Never:** hashes, stores or compresses anything; holds more than one read
//! buffer of a stream in memory.
//!
//! **Invariants:**
//! - Cut points are part of the on-disk format (they decide which chunk ids a
//!   file produces and so what deduplicates). The `fastcdc` version is pinned
//!   exactly in the workspace and the golden tests pin the cut points.
//! - Chunking a stream in pieces gives exactly the cut points of chunking it
//!   whole: a cut is only decided once `max` bytes past the chunk start are
//!   buffered, or at end of stream.
//! - Every chunk is non-empty and at most `max` bytes; only the last chunk of
//!   a stream may be shorter than `min`.

mod params;
mod stream;

pub use params::{ChunkerParams, ParamsError};
pub use stream::{cut_points, decided_cuts, first_cut, Batch, Chunker};

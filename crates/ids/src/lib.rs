//! Ids several layers share, so that a layer can name a thing without
//! linking the layer that makes it.
//!
//! **Owns:** [`ChunkId`], the name of a chunk: what `meta` records for a
//! file's recipe, `recipe` writes into its nodes and `cas` stores under.
//! `meta` needs to hold chunk ids but nothing of the store (containers,
//! object stores, thread pools), so the id lives here and `cas` re-exports
//! it.
//!
//! **Never:** computes an id (keyed hashing is `cas`'s, with the
//! repository's key) or gives one a meaning beyond its bytes.
//!
//! **What is not here, and why:** `ContainerId` names a blob on a branch
//! and only `cas` and its callers use it, so it stays in `cas`. `BranchId`
//! is a position in the redundancy layer's member list (`redundancy`), and
//! `InodeId` a key of the metadata engine (`meta`): each has one owner and
//! no second layer below the owner needs it.
//!
//! **Invariants:** an id is 32 bytes, shown as 64 lowercase hex digits
//! (blake3's hex, not a hand-written one). An id always names a chunk:
//! "no id (yet)" is an `Option<ChunkId>` or a type of its own (a region
//! that does not decode names no chunk in `cas`), never a made-up value.
//! The one reserved value is the recipe node format's: `recipe::HOLE`, the
//! all-zero id, encodes a hole in a recipe node, and `recipe::Extent`
//! gives it as a `None` chunk.

use std::fmt;

/// The id of a chunk: the keyed BLAKE3-256 of its plaintext.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId([u8; 32]);

impl ChunkId {
    pub const LEN: usize = 32;

    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        ChunkId(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// An id from its 64 hex digits (either case); `None` for anything
    /// else.
    pub fn from_hex(s: &str) -> Option<Self> {
        blake3::Hash::from_hex(s)
            .ok()
            .map(|h| ChunkId(*h.as_bytes()))
    }
}

/// Text that is not 64 hex digits, given as a [`ChunkId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAChunkId;

impl fmt::Display for NotAChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chunk id is 64 hex digits")
    }
}

impl std::error::Error for NotAChunkId {}

impl std::str::FromStr for ChunkId {
    type Err = NotAChunkId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ChunkId::from_hex(s).ok_or(NotAChunkId)
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({}..)", &self.to_hex()[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_other_text() {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37);
        }
        let id = ChunkId::from_bytes(bytes);
        let hex = id.to_hex();
        assert_eq!(hex.len(), 64);
        assert!(hex.starts_with("00254a6f"), "{hex}");
        assert_eq!(ChunkId::from_hex(&hex), Some(id));
        assert_eq!(ChunkId::from_hex(&hex.to_uppercase()), Some(id));
        assert_eq!(ChunkId::from_hex("zz"), None);
        assert_eq!(hex.parse::<ChunkId>(), Ok(id));
        assert_eq!("zz".parse::<ChunkId>(), Err(NotAChunkId));
        assert_eq!(ChunkId::from_hex(&hex[..62]), None);
        assert_eq!(format!("{id:?}"), "ChunkId(00254a6f94b9..)");
    }
}

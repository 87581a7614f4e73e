use cas::ChunkId;

use crate::{RecipeError, Result};

/// Entries per node: 1024 × 40 bytes keeps a node near 40 KiB, one chunk,
/// and three levels cover 1024³ chunks (64 PiB at 64 KiB chunks).
pub const FANOUT: usize = 1024;

const MAGIC: &[u8; 4] = b"CRCP";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 4 + 1 + 1 + 4;
const ENTRY_LEN: usize = 8 + 32;

/// One node of a recipe tree: children with cumulative end offsets relative
/// to the node's first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub level: u8,
    pub entries: Vec<(u64, ChunkId)>,
}

impl Node {
    /// Bytes of file content under this node.
    pub fn len(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.0)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The child holding byte `offset`, with the offset where it starts.
    pub fn child_at(&self, offset: u64) -> Option<(usize, u64)> {
        let i = self.entries.partition_point(|e| e.0 <= offset);
        (i < self.entries.len()).then(|| (i, if i == 0 { 0 } else { self.entries[i - 1].0 }))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.entries.len() * ENTRY_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(self.level);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (end, id) in &self.entries {
            out.extend_from_slice(&end.to_le_bytes());
            out.extend_from_slice(id.as_bytes());
        }
        out
    }

    pub fn decode(id: ChunkId, bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| RecipeError::Malformed { id, reason };
        if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
            return Err(bad("no recipe header".into()));
        }
        if bytes[4] != VERSION {
            return Err(bad(format!("unknown version {}", bytes[4])));
        }
        let level = bytes[5];
        let count =
            u32::from_le_bytes(array(bytes, 6).ok_or_else(|| bad("short header".into()))?) as usize;
        let body = &bytes[HEADER_LEN..];
        if body.len() != count * ENTRY_LEN || count > FANOUT {
            return Err(bad(format!("{count} entries in {} bytes", body.len())));
        }
        let mut entries = Vec::with_capacity(count);
        let mut prev = 0;
        for e in body.chunks_exact(ENTRY_LEN) {
            let end = u64::from_le_bytes(array(e, 0).ok_or_else(|| bad("short entry".into()))?);
            if end <= prev {
                return Err(bad("offsets do not increase".into()));
            }
            prev = end;
            let child = array(e, 8).ok_or_else(|| bad("short entry".into()))?;
            entries.push((end, ChunkId::from_bytes(child)));
        }
        Ok(Node { level, entries })
    }
}

/// The `N` bytes at `at` of a node, for its little-endian integers and
/// ids; `None` past the end, so a damaged node is an error, not a panic.
fn array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u8) -> ChunkId {
        ChunkId::from_bytes([n; 32])
    }

    #[test]
    fn child_at_finds_the_covering_entry() {
        let n = Node {
            level: 0,
            entries: vec![(10, id(1)), (25, id(2)), (26, id(3))],
        };
        assert_eq!(n.child_at(0), Some((0, 0)));
        assert_eq!(n.child_at(9), Some((0, 0)));
        assert_eq!(n.child_at(10), Some((1, 10)));
        assert_eq!(n.child_at(25), Some((2, 25)));
        assert_eq!(n.child_at(26), None);
    }

    proptest! {
        #[test]
        fn round_trip(lens in proptest::collection::vec(1u64..1_000_000, 0..200), level in 0u8..4) {
            let mut end = 0;
            let entries = lens.iter().enumerate().map(|(i, l)| { end += l; (end, id(i as u8)) }).collect();
            let n = Node { level, entries };
            prop_assert_eq!(Node::decode(id(0), &n.encode()).unwrap(), n);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Node::decode(id(0), &bytes);
        }
    }
}

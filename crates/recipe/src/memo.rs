//! The nodes of the tree last stored for one file, so storing the next
//! tree of that file skips the nodes it shares with it.
//!
//! A file written at random and `fsync`ed often (a database, a VM image)
//! has a recipe of many thousands of chunks of which a commit changes a
//! few. Storing the whole tree again costs every node's hash, index lookup
//! and, for a node found absent, compression: a quarter of the daemon's CPU
//! in the database-like benchmark. With content-defined node boundaries
//! (see [`crate::write`]) an unchanged run of children makes a node equal
//! to one of the last tree, found here by a fingerprint of its encoding
//! (XXH3-128: not a security boundary, the children's ids are keyed BLAKE3
//! outputs nobody chooses, and 128 bits make an accidental match
//! negligible) and reused without touching the store.
//!
//! **Safety against garbage collection:** a reused node is only known to
//! exist because the last tree is reachable. The caller passes a memo only
//! while the file's recorded content is still [`NodeMemo::root`], which
//! garbage collection marks (as an open file's content); a memo of any
//! other tree is dropped, never consulted.

use cas::ChunkId;
use hashbrown::HashMap;

/// The nodes of one stored tree, by fingerprint of their encoding.
#[derive(Debug, Clone)]
pub struct NodeMemo {
    root: ChunkId,
    nodes: HashMap<u128, ChunkId>,
    reused: usize,
}

impl NodeMemo {
    /// The root of the tree these nodes make up.
    pub fn root(&self) -> ChunkId {
        self.root
    }

    /// How many nodes the tree has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many of its nodes were taken from the memo it was stored with.
    pub fn reused(&self) -> usize {
        self.reused
    }
}

/// Collects the nodes of a tree being stored, and looks up those of the
/// last one.
pub(crate) struct Recorder<'a> {
    last: Option<&'a NodeMemo>,
    nodes: HashMap<u128, ChunkId>,
    /// Nodes of the new tree found in the last one.
    reused: usize,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(last: Option<&'a NodeMemo>) -> Self {
        Recorder {
            last,
            nodes: HashMap::new(),
            reused: 0,
        }
    }

    pub(crate) fn fingerprint(encoded: &[u8]) -> u128 {
        twox_hash::XxHash3_128::oneshot(encoded)
    }

    /// The id of a node of the last tree with this fingerprint.
    pub(crate) fn known(&mut self, fp: u128) -> Option<ChunkId> {
        let id = self.last?.nodes.get(&fp).copied()?;
        self.reused += 1;
        Some(id)
    }

    pub(crate) fn note(&mut self, fp: u128, id: ChunkId) {
        self.nodes.insert(fp, id);
    }

    pub(crate) fn finish(self, root: ChunkId) -> NodeMemo {
        NodeMemo {
            root,
            nodes: self.nodes,
            reused: self.reused,
        }
    }
}

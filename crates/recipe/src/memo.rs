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
    /// The leaves in file order (when the tree was stored from extents).
    leaves: Vec<Leaf>,
    reused: usize,
}

/// A leaf of a stored tree: the bytes and the extents it covers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaf {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) count: usize,
    pub(crate) id: ChunkId,
    /// The fingerprint of its encoding.
    pub(crate) fp: u128,
    /// It ended by the boundary rule, not at the end of the file: the same
    /// children from the same start end it at the same place again.
    pub(crate) cut: bool,
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

    /// The leaf starting at byte `at` that no byte range of `changed`
    /// (sorted, disjoint) touches and that ended by the boundary rule.
    pub(crate) fn unchanged_leaf_at(
        &self,
        at: u64,
        changed: &[std::ops::Range<u64>],
    ) -> Option<Leaf> {
        let k = self.leaves.binary_search_by_key(&at, |l| l.start).ok()?;
        let leaf = self.leaves[k];
        let t = changed.partition_point(|r| r.end <= leaf.start);
        let touched = changed.get(t).is_some_and(|r| r.start < leaf.end);
        (leaf.cut && !touched).then_some(leaf)
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
    leaves: Vec<Leaf>,
    /// Nodes of the new tree found in the last one.
    reused: usize,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(last: Option<&'a NodeMemo>) -> Self {
        Recorder {
            last,
            nodes: HashMap::new(),
            leaves: Vec::new(),
            reused: 0,
        }
    }

    pub(crate) fn fingerprint(encoded: &[u8]) -> u128 {
        twox_hash::XxHash3_128::oneshot(encoded)
    }

    pub(crate) fn note_leaf(&mut self, leaf: Leaf) {
        self.leaves.push(leaf);
    }

    pub(crate) fn reuse_leaf(&mut self, leaf: Leaf) {
        self.reused += 1;
        self.nodes.insert(leaf.fp, leaf.id);
        self.leaves.push(leaf);
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
            leaves: self.leaves,
            reused: self.reused,
        }
    }
}

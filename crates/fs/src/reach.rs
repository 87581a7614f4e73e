//! Which chunks a root, a version or the live file system reaches: the mark
//! phase of garbage collection, and the "bytes unique to a snapshot" count.
//!
//! A mark set keeps 8 bytes of each chunk id (a collision can only keep a
//! dead chunk alive, never lose a live one), so memory is a small fixed
//! number of bytes per reachable chunk. Recipe nodes and listings are
//! Merkle trees: a node already in the set had its whole subtree marked, so
//! versions that share most of their tree cost only what differs.

use cas::{ChunkId, Store};
use meta::{Content, MetaView};
use recipe::{Node, HOLE};

use crate::tree::{self, TreeContent};
use crate::Result;

/// A set of chunk ids, 8 bytes each. The prefixes are already uniformly
/// random, so hashbrown's fast default hasher is plenty (std's SipHash was
/// a tenth of a collection's CPU on millions of chunks).
#[derive(Default)]
pub struct MarkSet {
    ids: hashbrown::HashSet<u64>,
    /// Raw bytes of the data chunks marked (as the recipes give them).
    pub data_bytes: u64,
}

fn short(id: &ChunkId) -> u64 {
    u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("8 of 32"))
}

impl MarkSet {
    pub fn contains(&self, id: &ChunkId) -> bool {
        self.ids.contains(&short(id))
    }

    /// Adds `id`; false when it was there already.
    fn insert(&mut self, id: &ChunkId) -> bool {
        self.ids.insert(short(id))
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Marks a recipe tree: its nodes and the data chunks under them.
    pub fn recipe(&mut self, store: &Store, root: &ChunkId) -> Result<()> {
        if *root == HOLE || !self.insert(root) {
            return Ok(());
        }
        let node = Node::decode(*root, &store.read_chunk(root)?)?;
        let mut start = 0;
        for (end, child) in &node.entries {
            if node.level == 0 {
                if *child != HOLE && self.insert(child) {
                    self.data_bytes += end - start;
                }
            } else {
                self.recipe(store, child)?;
            }
            start = *end;
        }
        Ok(())
    }

    /// Marks a stored directory: its listing and everything below it.
    pub fn listing(&mut self, store: &Store, root: &ChunkId) -> Result<()> {
        if self.contains(root) {
            return Ok(());
        }
        let entries = tree::read_listing(store, root)?;
        self.recipe(store, root)?;
        for e in entries {
            match e.content {
                TreeContent::Recipe(id) => self.recipe(store, &id)?,
                TreeContent::Dir(id) => self.listing(store, &id)?,
                TreeContent::Empty | TreeContent::Inline(_) => {}
            }
        }
        Ok(())
    }

    /// Marks what a root points at: a version record and its tree, or a
    /// recipe (a stored file).
    pub fn root(&mut self, store: &Store, id: &ChunkId) -> Result<()> {
        if self.contains(id) {
            return Ok(());
        }
        let bytes = store.read_chunk(id)?;
        if tree::is_record(&bytes) {
            self.insert(id);
            let record = tree::decode_record(&bytes)?;
            if let TreeContent::Dir(listing) = record.root.content {
                self.listing(store, &listing)?;
            }
            Ok(())
        } else {
            self.recipe(store, id)
        }
    }

    /// Marks every file content of a namespace view.
    pub fn namespace(&mut self, store: &Store, view: &dyn MetaView) -> Result<()> {
        let mut roots = Vec::new();
        view.for_each_inode(&mut |inode| {
            if let Content::Recipe(id) = inode.content {
                roots.push(id);
            }
        })?;
        for id in roots {
            self.recipe(store, &id)?;
        }
        Ok(())
    }

    /// Marks data chunks known by id (an open file's extents).
    pub fn chunks(&mut self, ids: impl IntoIterator<Item = ChunkId>) {
        for id in ids {
            if id != HOLE {
                self.insert(&id);
            }
        }
    }
}

/// Raw bytes of the data chunks under `root` (a root as [`MarkSet::root`]
/// takes) that `others` does not hold: what deleting that root alone would
/// free, before compression.
pub fn unique_bytes(store: &Store, root: &ChunkId, others: &MarkSet) -> Result<u64> {
    let mut walk = MarkSet::default();
    let mut unique = 0;
    count_unique(store, root, others, &mut walk, &mut unique)?;
    Ok(unique)
}

/// Walks like [`MarkSet::root`] but skips subtrees `others` holds whole (a
/// node in `others` had all its children marked there).
fn count_unique(
    store: &Store,
    id: &ChunkId,
    others: &MarkSet,
    walk: &mut MarkSet,
    unique: &mut u64,
) -> Result<()> {
    if others.contains(id) || walk.contains(id) {
        return Ok(());
    }
    let bytes = store.read_chunk(id)?;
    walk.insert(id);
    if tree::is_record(&bytes) {
        let record = tree::decode_record(&bytes)?;
        if let TreeContent::Dir(listing) = record.root.content {
            count_listing(store, &listing, others, walk, unique)?;
        }
        return Ok(());
    }
    let node = Node::decode(*id, &bytes)?;
    let mut start = 0;
    for (end, child) in &node.entries {
        if node.level == 0 {
            if *child != HOLE && !others.contains(child) && walk.insert(child) {
                *unique += end - start;
            }
        } else {
            count_unique(store, child, others, walk, unique)?;
        }
        start = *end;
    }
    Ok(())
}

fn count_listing(
    store: &Store,
    root: &ChunkId,
    others: &MarkSet,
    walk: &mut MarkSet,
    unique: &mut u64,
) -> Result<()> {
    if others.contains(root) || walk.contains(root) {
        return Ok(());
    }
    let entries = tree::read_listing(store, root)?;
    count_unique(store, root, others, walk, unique)?;
    for e in entries {
        match e.content {
            TreeContent::Recipe(id) => count_unique(store, &id, others, walk, unique)?,
            TreeContent::Dir(id) => count_listing(store, &id, others, walk, unique)?,
            TreeContent::Empty | TreeContent::Inline(_) => {}
        }
    }
    Ok(())
}

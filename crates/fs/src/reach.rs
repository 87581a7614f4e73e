//! Which chunks a root, a version or the live file system reaches: the mark
//! phase of garbage collection, and the "bytes unique to a snapshot" count.
//!
//! A mark set keeps 8 bytes of each chunk id (a collision can only keep a
//! dead chunk alive, never lose a live one), so memory is a small fixed
//! number of bytes per reachable chunk. Recipe nodes and listings are
//! Merkle trees: a node already in the set had its whole subtree marked, so
//! versions that share most of their tree cost only what differs. The walk
//! keeps what is left to mark in a stack on the heap: a tree can be any
//! depth.
//!
//! A set told to [`MarkSet::tolerate_damage`] goes on past a node it cannot
//! read (garbage collection over a damaged store) and lists it: what lies
//! below that node is unknown, and the caller decides whether that is safe.

use cas::{ChunkId, Store};
use meta::{Content, MetaView};
use recipe::{Node, HOLE};

use crate::tree::{self, TreeContent};
use crate::Result;

/// A set of chunk ids, 8 bytes each. The prefixes are already uniformly
/// random, so hashbrown's fast default hasher is plenty (std's SipHash was
/// a tenth of a collection's CPU on millions of chunks).
#[derive(Default, Clone)]
pub struct MarkSet {
    ids: hashbrown::HashSet<u64>,
    /// Raw bytes of the data chunks marked (as the recipes give them).
    pub data_bytes: u64,
    /// Nodes that could not be read, with why, once damage is tolerated.
    unreadable: Option<Vec<(ChunkId, String)>>,
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

    /// The set as bytes (8 per id, in no order), to hand to another
    /// client's collection.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.ids.len() * 8);
        for id in &self.ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// Adds the ids of [`MarkSet::to_bytes`]; false (nothing added) when
    /// `bytes` is not a whole number of ids.
    pub fn extend_from_bytes(&mut self, bytes: &[u8]) -> bool {
        if !bytes.len().is_multiple_of(8) {
            return false;
        }
        for id in bytes.chunks_exact(8) {
            self.ids
                .insert(u64::from_le_bytes(id.try_into().expect("8 bytes")));
        }
        true
    }

    /// From now on a node that cannot be read is listed (see
    /// [`MarkSet::unreadable`]) and the walk goes on with the rest.
    pub fn tolerate_damage(&mut self) {
        self.unreadable.get_or_insert_with(Vec::new);
    }

    /// The recipe nodes, listings and records that could not be read
    /// (their subtrees are not marked), with why.
    pub fn unreadable(&self) -> &[(ChunkId, String)] {
        self.unreadable.as_deref().unwrap_or_default()
    }

    /// `r` when damage is not tolerated; otherwise its error is listed
    /// against `id` and nothing is returned.
    fn tolerate<T>(&mut self, id: &ChunkId, r: Result<T>) -> Result<Option<T>> {
        match (r, &mut self.unreadable) {
            (Ok(v), _) => Ok(Some(v)),
            (Err(e), Some(list)) => {
                list.push((*id, e.to_string()));
                Ok(None)
            }
            (Err(e), None) => Err(e),
        }
    }

    /// Marks a recipe tree: its nodes and the data chunks under them.
    pub fn recipe(&mut self, store: &Store, root: &ChunkId) -> Result<()> {
        self.walk(store, Todo::Recipe(*root), &|_| false)
    }

    /// Marks a stored directory: its listing and everything below it.
    pub fn listing(&mut self, store: &Store, root: &ChunkId) -> Result<()> {
        self.walk(store, Todo::Listing(*root), &|_| false)
    }

    /// Marks what a root points at: a version record and its tree, or a
    /// recipe (a stored file).
    pub fn root(&mut self, store: &Store, id: &ChunkId) -> Result<()> {
        self.walk(store, Todo::Root(*id), &|_| false)
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
            self.insert(&id);
        }
    }
}

/// Raw bytes of the data chunks under `root` (a root as [`MarkSet::root`]
/// takes) that `others` does not hold: what deleting that root alone would
/// free, before compression.
pub fn unique_bytes(store: &Store, root: &ChunkId, others: &MarkSet) -> Result<u64> {
    let mut walk = MarkSet::default();
    // A node in `others` had its whole subtree marked there.
    walk.walk(store, Todo::Root(*root), &|id| others.contains(id))?;
    Ok(walk.data_bytes)
}

/// What is left to mark.
enum Todo {
    /// A version record or a recipe, told apart by its bytes.
    Root(ChunkId),
    Recipe(ChunkId),
    Listing(ChunkId),
}

impl MarkSet {
    /// Marks everything under `first` except the subtrees whose root
    /// `skip` holds. The work left is a stack on the heap, not the thread's
    /// own: a tree is as deep as its users make it (a nested call per
    /// directory once overflowed the stack at a few thousand levels).
    fn walk(&mut self, store: &Store, first: Todo, skip: &dyn Fn(&ChunkId) -> bool) -> Result<()> {
        let mut todo = vec![first];
        while let Some(next) = todo.pop() {
            match next {
                Todo::Root(id) => {
                    if skip(&id) || self.contains(&id) {
                        continue;
                    }
                    self.insert(&id);
                    let read = store.read_chunk(&id).map_err(Into::into);
                    let Some(bytes) = self.tolerate(&id, read)? else {
                        continue;
                    };
                    if tree::is_record(&bytes) {
                        let Some(record) = self.tolerate(&id, tree::decode_record(&bytes))? else {
                            continue;
                        };
                        if let TreeContent::Dir(listing) = record.root.content {
                            todo.push(Todo::Listing(listing));
                        }
                    } else {
                        let done = self.node(&id, &bytes, &mut todo, skip);
                        self.tolerate(&id, done)?;
                    }
                }
                Todo::Recipe(id) => {
                    if id == HOLE || skip(&id) || !self.insert(&id) {
                        continue;
                    }
                    let read = store.read_chunk(&id).map_err(Into::into);
                    if let Some(bytes) = self.tolerate(&id, read)? {
                        let done = self.node(&id, &bytes, &mut todo, skip);
                        self.tolerate(&id, done)?;
                    }
                }
                Todo::Listing(id) => {
                    if skip(&id) || self.contains(&id) {
                        continue;
                    }
                    let Some(entries) = self.tolerate(&id, tree::read_listing(store, &id))? else {
                        self.insert(&id);
                        continue;
                    };
                    for e in entries.into_iter().rev() {
                        match e.content {
                            TreeContent::Recipe(c) => todo.push(Todo::Recipe(c)),
                            TreeContent::Dir(c) => todo.push(Todo::Listing(c)),
                            TreeContent::Empty | TreeContent::Inline(_) => {}
                        }
                    }
                    // The listing's own chunks come next, so a listing met
                    // again finds itself marked; its entries are on the
                    // stack and marked before the walk ends.
                    todo.push(Todo::Recipe(id));
                }
            }
        }
        Ok(())
    }

    /// Marks the data chunks of a recipe leaf, or queues an inner node's
    /// children.
    fn node(
        &mut self,
        id: &ChunkId,
        bytes: &[u8],
        todo: &mut Vec<Todo>,
        skip: &dyn Fn(&ChunkId) -> bool,
    ) -> Result<()> {
        let node = Node::decode(*id, bytes)?;
        if node.level > 0 {
            todo.extend(node.entries.iter().rev().map(|(_, c)| Todo::Recipe(*c)));
            return Ok(());
        }
        let mut start = 0;
        for (end, child) in &node.entries {
            if *child != HOLE && !skip(child) && self.insert(child) {
                self.data_bytes += end - start;
            }
            start = *end;
        }
        Ok(())
    }
}

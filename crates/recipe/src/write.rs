use std::io::Read;
use std::ops::Range;

use cas::{ChunkId, Store, StreamWriter, WriteStats};
use chunking::{Chunker, ChunkerParams};

use crate::memo::{Leaf, NodeMemo, Recorder};
use crate::node::{Node, FANOUT};
use crate::read::Extent;
use crate::{RecipeError, Result};

/// What [`store_stream`] stored.
#[derive(Debug, Clone, Copy)]
pub struct Stored {
    pub root: ChunkId,
    pub len: u64,
    pub stats: WriteStats,
}

/// Bytes of input chunked per batch: enough regions that both cores stay busy
/// to the end of a batch's compression (4 MiB left a core idle a tenth of
/// the time), few enough that three batches in flight stay small.
const BATCH_BYTES: usize = 16 << 20;

/// Chunks `input`, stores the chunks and a recipe tree over them, and returns
/// the recipe's root once everything is durable. A chunking thread reads and
/// hashes the next batch while the store compresses the previous one; each batch
/// holds a permit from the store's memory budget until it is written, so a
/// slow disk stalls the reader instead of growing memory.
pub fn store_stream<R: Read + Send>(
    store: &Store,
    input: R,
    params: ChunkerParams,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Stored> {
    params.validate()?;
    let mut writer = store.stream();
    let mut tree = TreeBuilder::default();
    let mut len = 0u64;
    std::thread::scope(|s| -> Result<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let budget = store.budget().clone();
        let reader = s.spawn(move || -> Result<()> {
            for batch in Chunker::new(input, params, BATCH_BYTES) {
                let batch = batch.map_err(RecipeError::Input)?;
                let permit = budget.acquire(batch.len_bytes());
                let ids = store.chunk_ids(&batch.chunks);
                if tx.send((batch, ids, permit)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        let written = (|| -> Result<()> {
            for (batch, ids, _permit) in rx.iter() {
                writer.write_hashed(&batch.chunks, &ids)?;
                for (chunk, id) in batch.chunks.iter().zip(ids) {
                    tree.push(&mut writer, 0, chunk.len() as u64, id)?;
                    len += chunk.len() as u64;
                }
                progress(len);
            }
            Ok(())
        })();
        drop(rx);
        let read = reader.join().expect("chunking thread panicked");
        written.and(read)
    })?;
    let root = tree.finish(&mut writer)?;
    writer.flush()?;
    Ok(Stored {
        root,
        len,
        stats: writer.stats(),
    })
}

/// Stores a recipe tree over `children` (each a piece's length and its
/// chunk, `None` for a run of zeros, in file order) and returns its root.
pub fn store_tree(
    writer: &mut StreamWriter,
    children: impl IntoIterator<Item = (u64, Option<ChunkId>)>,
) -> Result<ChunkId> {
    let mut tree = TreeBuilder::default();
    for (len, chunk) in children {
        tree.push(writer, 0, len, chunk.unwrap_or(crate::HOLE))?;
    }
    tree.finish(writer)
}

/// [`store_tree`] over a file's extents (contiguous from offset 0), for a
/// file whose last tree was `last` and of which only the bytes in
/// `changed` (sorted, disjoint; `None`: any) changed since: a leaf of
/// `last` that no changed range touches is taken as it is without looking
/// at its extents, and any other node equal to one of `last` is taken from
/// the memo, not stored again. The cost is the changed leaves', not the
/// file's. Pass `last` only while its tree is still the file's recorded
/// content (see [`NodeMemo`]). Returns the memo of the new tree, whose
/// root is the tree [`store_tree`] stores from the same extents.
pub fn store_tree_changed(
    writer: &mut StreamWriter,
    extents: &[Extent],
    last: Option<&NodeMemo>,
    changed: Option<&[Range<u64>]>,
) -> Result<NodeMemo> {
    let mut tree = TreeBuilder {
        levels: Vec::new(),
        memo: Some(Recorder::new(last)),
    };
    if extents.is_empty() {
        let root = store_node(writer, 0, &[], tree.memo.as_mut())?.1;
        return Ok(tree.memo.expect("made with a recorder").finish(root));
    }
    let mut i = 0;
    while i < extents.len() {
        let at = extents[i].offset;
        let same = last
            .zip(changed)
            .and_then(|(memo, changed)| memo.unchanged_leaf_at(at, changed))
            .filter(|leaf| {
                extents
                    .get(i + leaf.count - 1)
                    .is_some_and(|e| e.offset + e.len == leaf.end)
            });
        let memo = tree.memo.as_mut().expect("made with a recorder");
        if let Some(leaf) = same {
            memo.reuse_leaf(leaf);
            i += leaf.count;
            tree.push(writer, 1, leaf.end - leaf.start, leaf.id)?;
            continue;
        }
        let first = i;
        let mut children = Vec::new();
        let cut = loop {
            let e = &extents[i];
            let id = e.chunk.unwrap_or(crate::HOLE);
            children.push((e.len, id));
            i += 1;
            if ends_node(children.len(), &id) {
                break true;
            }
            if i == extents.len() {
                break false;
            }
        };
        let (len, id, fp) = store_node(writer, 0, &children, Some(memo))?;
        memo.note_leaf(Leaf {
            start: at,
            end: at + len,
            count: i - first,
            id,
            fp: fp.expect("fingerprinted with a recorder"),
            cut,
        });
        tree.push(writer, 1, len, id)?;
    }
    let (root, memo) = tree.finish_with_memo(writer)?;
    Ok(memo.expect("made with a recorder").finish(root))
}

/// A node has at least this many children before a content-defined end.
const MIN_CHILDREN: usize = 16;
/// After [`MIN_CHILDREN`], about one child in this many ends its node.
const CUT_EVERY: u64 = 128;

/// Whether a node with `children` children, the last with id `id`, ends
/// here. Ends chosen by the children's ids (random: keyed BLAKE3) rather
/// than by count keep an insertion or a removal from moving every later
/// node's boundary: two trees of one file that differ in a few places
/// share all their other nodes, which [`store_tree_changed`] skips and the
/// store deduplicates. A run of holes (all one id) or of one repeated
/// chunk ends only when full.
fn ends_node(children: usize, id: &ChunkId) -> bool {
    if children >= FANOUT {
        return true;
    }
    let tail = u64::from_le_bytes(id.as_bytes()[24..].try_into().expect("8 of 32"));
    children >= MIN_CHILDREN && *id != crate::HOLE && tail % CUT_EVERY == 0
}

/// Bulk-loads a recipe tree bottom-up: each level collects entries until a
/// node ends ([`ends_node`]), stores it, and passes (length, id) up one
/// level.
#[derive(Default)]
struct TreeBuilder<'m> {
    levels: Vec<Vec<(u64, ChunkId)>>,
    /// Set when the nodes are to be remembered (and those of the last tree
    /// reused).
    memo: Option<Recorder<'m>>,
}

impl<'m> TreeBuilder<'m> {
    fn push(&mut self, w: &mut StreamWriter, level: usize, len: u64, id: ChunkId) -> Result<()> {
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, Vec::new);
        }
        self.levels[level].push((len, id));
        if ends_node(self.levels[level].len(), &id) {
            self.store_node(w, level)?;
        }
        Ok(())
    }

    fn store_node(&mut self, w: &mut StreamWriter, level: usize) -> Result<()> {
        let children = std::mem::take(&mut self.levels[level]);
        let (len, id, _) = store_node(w, level, &children, self.memo.as_mut())?;
        self.push(w, level + 1, len, id)
    }

    /// Stores the partial nodes left at each level and returns the root.
    fn finish(self, w: &mut StreamWriter) -> Result<ChunkId> {
        Ok(self.finish_with_memo(w)?.0)
    }

    /// [`TreeBuilder::finish`], giving back the recorder too.
    fn finish_with_memo(mut self, w: &mut StreamWriter) -> Result<(ChunkId, Option<Recorder<'m>>)> {
        let mut level = 0;
        loop {
            let top = self.levels.len().saturating_sub(1);
            if level >= top {
                let entries = self.levels.get(level).cloned().unwrap_or_default();
                // A single child above the leaves is already a whole subtree.
                if level > 0 && entries.len() == 1 {
                    return Ok((entries[0].1, self.memo));
                }
                let root = store_node(w, level, &entries, self.memo.as_mut())?.1;
                return Ok((root, self.memo));
            }
            if !self.levels[level].is_empty() {
                self.store_node(w, level)?;
            }
            level += 1;
        }
    }
}

fn store_node(
    w: &mut StreamWriter,
    level: usize,
    children: &[(u64, ChunkId)],
    memo: Option<&mut Recorder<'_>>,
) -> Result<(u64, ChunkId, Option<u128>)> {
    let mut end = 0;
    let entries = children
        .iter()
        .map(|&(len, id)| {
            end += len;
            (end, id)
        })
        .collect();
    let node = Node {
        level: level as u8,
        entries,
    };
    let encoded = node.encode();
    // Four fifths of a node are ids, which do not compress: compressing
    // saved a few percent of its size and cost a sixth of the CPU of a
    // database-like job, which stores nodes at every fsync.
    let Some(memo) = memo else {
        return Ok((end, w.write_chunk_uncompressed(encoded.into())?, None));
    };
    let fp = Recorder::fingerprint(&encoded);
    let id = match memo.known(fp) {
        Some(id) => id,
        None => w.write_chunk_uncompressed(encoded.into())?,
    };
    memo.note(fp, id);
    Ok((end, id, Some(fp)))
}

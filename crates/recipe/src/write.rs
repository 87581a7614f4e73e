use std::io::Read;

use cas::{ChunkId, Store, StreamWriter, WriteStats};
use chunking::{Chunker, ChunkerParams};

use crate::node::{Node, FANOUT};
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

/// Bulk-loads a recipe tree bottom-up: each level collects entries until a
/// node is full, stores it, and passes (length, id) up one level.
#[derive(Default)]
struct TreeBuilder {
    levels: Vec<Vec<(u64, ChunkId)>>,
}

impl TreeBuilder {
    fn push(&mut self, w: &mut StreamWriter, level: usize, len: u64, id: ChunkId) -> Result<()> {
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, Vec::new);
        }
        self.levels[level].push((len, id));
        if self.levels[level].len() == FANOUT {
            self.store_node(w, level)?;
        }
        Ok(())
    }

    fn store_node(&mut self, w: &mut StreamWriter, level: usize) -> Result<()> {
        let children = std::mem::take(&mut self.levels[level]);
        let (len, id) = store_node(w, level, &children)?;
        self.push(w, level + 1, len, id)
    }

    /// Stores the partial nodes left at each level and returns the root.
    fn finish(mut self, w: &mut StreamWriter) -> Result<ChunkId> {
        let mut level = 0;
        loop {
            let top = self.levels.len().saturating_sub(1);
            if level >= top {
                let entries = self.levels.get(level).cloned().unwrap_or_default();
                // A single child above the leaves is already a whole subtree.
                if level > 0 && entries.len() == 1 {
                    return Ok(entries[0].1);
                }
                return Ok(store_node(w, level, &entries)?.1);
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
) -> Result<(u64, ChunkId)> {
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
    let id = w.write_chunk(node.encode().into())?;
    Ok((end, id))
}

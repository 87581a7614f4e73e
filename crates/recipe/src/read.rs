use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use cas::{ChunkId, Store};

use crate::node::Node;
use crate::HOLE;
use crate::{RecipeError, Result};

/// A stored file's content, readable at any offset.
pub struct Recipe {
    store: Store,
    root_id: ChunkId,
    root: Arc<Node>,
    /// Recently read nodes: consecutive reads walk the same path.
    nodes: Mutex<HashMap<ChunkId, Arc<Node>>>,
}

const NODE_CACHE: usize = 64;
/// Bytes fetched per window when streaming a whole file out.
const WINDOW: u64 = 16 << 20;

/// A piece of the file: where it starts, its length and the chunk that
/// holds it, if any: a hole (a run of zeros stored as nothing) has none.
/// The recipe format writes a hole as the id [`HOLE`]; above the format it
/// is only ever `None`, so no id doubles as "no chunk".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
    /// The chunk holding this piece; `None` for a hole.
    pub chunk: Option<ChunkId>,
}

impl Recipe {
    pub fn open(store: &Store, root: ChunkId) -> Result<Self> {
        let node = Node::decode(root, &store.read_chunk(&root)?)?;
        Ok(Recipe {
            store: store.clone(),
            root_id: root,
            root: Arc::new(node),
            nodes: Mutex::new(HashMap::new()),
        })
    }

    pub fn len(&self) -> u64 {
        self.root.len()
    }

    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }

    fn node(&self, id: ChunkId, level: u8) -> Result<Arc<Node>> {
        if let Some(n) = self.nodes.lock().get(&id) {
            return Ok(n.clone());
        }
        let node = Node::decode(id, &self.store.read_chunk(&id)?)?;
        if node.level != level {
            return Err(RecipeError::Malformed {
                id,
                reason: format!("found at level {level} but says level {}", node.level),
            });
        }
        let node = Arc::new(node);
        let mut cache = self.nodes.lock();
        if cache.len() >= NODE_CACHE {
            cache.clear();
        }
        cache.insert(id, node.clone());
        Ok(node)
    }

    /// The data chunks overlapping `start..end`, in order, found by
    /// descending the tree (one node per level per distinct path).
    pub fn extents(&self, start: u64, end: u64) -> Result<Vec<Extent>> {
        let mut out = Vec::new();
        self.collect(self.root.clone(), 0, start, end.min(self.len()), &mut out)?;
        Ok(out)
    }

    /// Recursive, but at most 256 calls deep whatever the file: a node's
    /// level is a byte, and each child is checked to be one level lower.
    fn collect(
        &self,
        node: Arc<Node>,
        base: u64,
        start: u64,
        end: u64,
        out: &mut Vec<Extent>,
    ) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        let Some((mut i, mut child_start)) = node.child_at(start - base) else {
            return Ok(());
        };
        while i < node.entries.len() && base + child_start < end {
            let (child_end, id) = node.entries[i];
            if node.level == 0 {
                out.push(Extent {
                    offset: base + child_start,
                    len: child_end - child_start,
                    chunk: (id != HOLE).then_some(id),
                });
            } else {
                let child = self.node(id, node.level - 1)?;
                self.collect(
                    child,
                    base + child_start,
                    start.max(base + child_start),
                    end,
                    out,
                )?;
            }
            child_start = child_end;
            i += 1;
        }
        Ok(())
    }

    /// Bytes `offset..offset+len` (fewer at end of file).
    pub fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let end = (offset + len).min(self.len());
        let extents = self.extents(offset, end)?;
        let chunks = self.store.read_chunks(&data_ids(&extents))?;
        Ok(copy_range(&extents, chunks, offset, end))
    }

    /// The extents of the window starting at `pos` (a chunk boundary), and
    /// where it ends, so windows never overlap.
    fn window(&self, pos: u64) -> Result<(Vec<Extent>, u64)> {
        let extents = self.extents(pos, (pos + WINDOW).min(self.len()))?;
        let last = extents.last().ok_or_else(|| RecipeError::Malformed {
            id: self.root_id,
            reason: format!("no chunk covers offset {pos} of {}", self.len()),
        })?;
        let end = last.offset + last.len;
        Ok((extents, end))
    }

    /// Streams the whole content to `out` through three stages, one window
    /// each: a fetching thread reads window N+2 from the branch (having hinted
    /// N+3), a decoding thread decompresses and verifies window N+1 on every
    /// core, and this thread writes window N.
    pub fn write_to(&self, out: &mut dyn Write, progress: &(dyn Fn(u64) + Sync)) -> Result<u64> {
        let total = self.len();
        std::thread::scope(|s| -> Result<u64> {
            let (fetched_tx, fetched_rx) =
                crossbeam_channel::bounded::<Result<(Vec<Extent>, cas::Fetched)>>(1);
            let (decoded_tx, decoded_rx) = crossbeam_channel::bounded::<Result<Vec<Bytes>>>(1);
            s.spawn(move || {
                let mut next = (total > 0).then(|| self.window(0));
                while let Some(current) = next.take() {
                    let current = current.and_then(|(extents, end)| {
                        if end < total {
                            next = Some(self.window(end));
                            if let Some(Ok((ahead, _))) = &next {
                                self.store.prefetch(&data_ids(ahead));
                            }
                        }
                        let fetched = self.store.fetch_chunks(&data_ids(&extents))?;
                        Ok((extents, fetched))
                    });
                    let failed = current.is_err();
                    if fetched_tx.send(current).is_err() || failed {
                        return;
                    }
                }
            });
            s.spawn(move || {
                for fetched in fetched_rx.iter() {
                    let decoded = fetched.and_then(|(extents, f)| {
                        Ok(with_holes(&extents, self.store.decode_fetched(f)?))
                    });
                    let failed = decoded.is_err();
                    if decoded_tx.send(decoded).is_err() || failed {
                        return;
                    }
                }
            });
            let mut written = 0u64;
            let result = (|| {
                for window in decoded_rx.iter() {
                    for chunk in window? {
                        out.write_all(&chunk).map_err(RecipeError::Output)?;
                        written += chunk.len() as u64;
                    }
                    progress(written);
                }
                out.flush().map_err(RecipeError::Output)?;
                Ok(written)
            })();
            drop(decoded_rx);
            result
        })
    }
}

/// The ids of the extents that refer to stored chunks (not holes).
fn data_ids(extents: &[Extent]) -> Vec<ChunkId> {
    extents.iter().filter_map(|e| e.chunk).collect()
}

static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// One piece per extent, in order: the chunk read for a data extent, zeros
/// (in shared 1 MiB pieces) for a hole.
fn with_holes(extents: &[Extent], chunks: Vec<Bytes>) -> Vec<Bytes> {
    let mut chunks = chunks.into_iter();
    let mut out = Vec::with_capacity(extents.len());
    for e in extents {
        if e.chunk.is_none() {
            let mut left = e.len as usize;
            while left > 0 {
                let n = left.min(ZEROS.len());
                out.push(Bytes::from_static(&ZEROS[..n]));
                left -= n;
            }
        } else {
            out.push(chunks.next().expect("one chunk per data extent"));
        }
    }
    out
}

/// Copies `offset..end` out of `extents` whose data chunks are `chunks`.
pub(crate) fn copy_range(extents: &[Extent], chunks: Vec<Bytes>, offset: u64, end: u64) -> Vec<u8> {
    let mut chunks = chunks.into_iter();
    let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
    for e in extents {
        let from = offset.saturating_sub(e.offset);
        let to = (end - e.offset).min(e.len);
        if e.chunk.is_none() {
            out.resize(out.len() + (to - from) as usize, 0);
        } else {
            let data = chunks.next().expect("one chunk per data extent");
            out.extend_from_slice(&data[from as usize..to as usize]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hole_has_no_chunk_and_data_has_its_own() {
        let id = ChunkId::from_bytes([5; 32]);
        let data = Extent {
            offset: 0,
            len: 3,
            chunk: Some(id),
        };
        let hole = Extent {
            offset: 3,
            len: 4,
            chunk: None,
        };
        assert_eq!(data_ids(&[data, hole, data]), [id, id]);
        let pieces = with_holes(&[data, hole], vec![Bytes::from_static(b"abc")]);
        assert_eq!(pieces.concat(), b"abc\0\0\0\0");
    }
}

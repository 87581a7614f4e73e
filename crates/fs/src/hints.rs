//! A small file read by where its chunks are (hashFS's one I/O): the
//! metadata engine's path-index entry of a file of at most
//! [`meta::MAX_HINTED_CHUNKS`] chunks carries each chunk's id, length and
//! location ([`meta::ContentHints`]), so a cold GET reads the entry and
//! then the chunks at those locations, not the recipe node nor the chunk
//! index. A location is only a hint: the store verifies each chunk by its
//! id there ([`cas::Store::read_at_hint`]), and one that is not there
//! (garbage collection moved or dropped it) is read the usual way, after
//! which the entry's hints are written again (lazily, on the read that
//! found them stale, never by a sweep).
//!
//! Hints are given at the commit that makes a small file's chunks
//! durable, when they first have locations (a chunk not yet in a sealed
//! container has none): a file recorded since the last commit is queued
//! ([`Inner::queue_hints`]) and the commit, once its streams are flushed,
//! gives its entry the locations ([`Inner::give_queued_hints`]). A file
//! with an entry and no hints (written through the mount, renamed since)
//! gets them from its first read here.

use bytes::Bytes;
use cas::{ChunkId, ChunkLocation};
use meta::{ChunkHint, Content, ContentHints, Inode, InodeId};
use recipe::Extent;

use crate::{Fs, Inner, Result};

/// Files queued for hints between two commits; past this, more files wait
/// for their first read to get them.
const MAX_QUEUED: usize = 4096;

/// A file recorded since the last commit whose entry may take hints.
pub(crate) struct Queued {
    ino: InodeId,
    root: ChunkId,
    chunks: Vec<(ChunkId, u32)>,
}

/// The chunks of a file that hints can describe: at most
/// [`meta::MAX_HINTED_CHUNKS`], each from its start, contiguous from
/// offset 0 with no hole, covering `size`.
fn hintable(extents: &[Extent], size: u64) -> Option<Vec<(ChunkId, u32)>> {
    if size > meta::MAX_HINTED_SIZE || extents.len() > meta::MAX_HINTED_CHUNKS {
        return None;
    }
    let mut at = 0;
    let mut out = Vec::with_capacity(extents.len());
    for e in extents {
        if e.offset != at {
            return None;
        }
        out.push((e.chunk?, u32::try_from(e.len).ok()?));
        at += e.len;
    }
    (at == size && !out.is_empty()).then_some(out)
}

/// Appends the first `len` bytes of a chunk of `ino`; false (logged)
/// when the chunk is shorter: hints that do not fit what is stored, left
/// to the usual read.
fn take(out: &mut Vec<u8>, chunk: &[u8], len: u32, ino: InodeId) -> bool {
    match chunk.get(..len as usize) {
        Some(b) => {
            out.extend_from_slice(b);
            true
        }
        None => {
            tracing::warn!(
                inode = ino.0,
                "a chunk is shorter than the extent its hint gives; reading the file as usual"
            );
            false
        }
    }
}

impl Inner {
    /// Queues a file just recorded with `content` over `extents` for the
    /// next commit to give its entry hints.
    pub(crate) fn queue_hints(
        &self,
        ino: InodeId,
        content: &Content,
        size: u64,
        extents: &[Extent],
    ) {
        let Content::Recipe(root) = content else {
            return;
        };
        let Some(chunks) = hintable(extents, size) else {
            return;
        };
        let mut q = self.hint_queue.lock();
        if q.len() < MAX_QUEUED {
            q.push(Queued {
                ino,
                root: *root,
                chunks,
            });
        }
    }

    /// Gives the entries of the files queued since the last commit the
    /// locations of their chunks: called by a commit once its streams are
    /// flushed (so those chunks are in sealed containers). Hints are only
    /// a shortcut: a failure is logged and the file read as usual.
    pub(crate) fn give_queued_hints(&self) {
        let queued = std::mem::take(&mut *self.hint_queue.lock());
        for q in queued {
            let given = (|| -> Result<()> {
                if !self.meta.path_indexed(q.ino)? {
                    return Ok(());
                }
                if let Some(hints) = self.locate(q.root, &q.chunks)? {
                    self.meta.set_path_hints(q.ino, &hints)?;
                }
                Ok(())
            })();
            if let Err(e) = given {
                tracing::debug!(inode = q.ino.0, error = %e, "giving a file's entry its chunk hints failed");
            }
        }
    }

    /// Where `chunks` are now; `None` if one is not in a sealed container.
    fn locate(&self, root: ChunkId, chunks: &[(ChunkId, u32)]) -> Result<Option<ContentHints>> {
        let mut out = Vec::with_capacity(chunks.len());
        for &(id, len) in chunks {
            let Some(at) = self.store.location_hint(&id)? else {
                return Ok(None);
            };
            out.push(ChunkHint {
                id,
                len,
                location: at.encode(),
            });
        }
        Ok(Some(ContentHints { root, chunks: out }))
    }

    /// A chunk from the DRAM cache, else at `location`; `None` when it is
    /// not there.
    fn chunk_at(&self, id: &ChunkId, location: &[u8; meta::LOCATION_LEN]) -> Option<Bytes> {
        if let Some(b) = self.cache.get(id) {
            return Some(b);
        }
        let data = self
            .store
            .read_at_hint(id, &ChunkLocation::decode(location))?;
        self.cache.put(*id, data.clone());
        Some(data)
    }
}

impl Fs {
    /// The whole content of a small file stored in chunks, as `inode`
    /// (just looked up, [`Fs::lookup_path`]) holds it, when the file
    /// system holds nothing newer of it in memory; `None` otherwise (read
    /// it through [`Fs::open`] and [`Fs::read`]). With `hints` (the
    /// lookup's, [`meta::PathFound`]), each chunk is read at its location
    /// (one storage read for a cold one); a chunk not there is read the
    /// usual way and the entry given fresh hints; without hints the recipe
    /// is read and the entry given them.
    pub fn read_small(
        &self,
        inode: &Inode,
        hints: Option<&ContentHints>,
    ) -> Result<Option<Vec<u8>>> {
        let Content::Recipe(root) = inode.content else {
            return Ok(None);
        };
        if inode.attr.size > meta::MAX_HINTED_SIZE || self.inner.has_state(inode.id) {
            return Ok(None);
        }
        match hints.filter(|h| h.root == root) {
            Some(h) => self.read_hinted(inode, h),
            None => self.read_and_hint(inode, root),
        }
    }

    fn read_hinted(&self, inode: &Inode, hints: &ContentHints) -> Result<Option<Vec<u8>>> {
        let inner = &self.inner;
        let mut out = Vec::with_capacity(inode.attr.size as usize);
        let mut stale = false;
        for c in &hints.chunks {
            let data = match inner.chunk_at(&c.id, &c.location) {
                Some(d) => d,
                None => {
                    stale = true;
                    inner.read_one(&c.id)?
                }
            };
            if !take(&mut out, &data, c.len, inode.id) {
                return Ok(None);
            }
        }
        if stale {
            let chunks: Vec<_> = hints.chunks.iter().map(|c| (c.id, c.len)).collect();
            self.refresh(inode.id, hints.root, &chunks);
        }
        Ok(Some(out))
    }

    fn read_and_hint(&self, inode: &Inode, root: ChunkId) -> Result<Option<Vec<u8>>> {
        let inner = &self.inner;
        let extents = inner.extents_of(&Content::Recipe(root))?;
        let Some(chunks) = hintable(&extents, inode.attr.size) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(inode.attr.size as usize);
        for &(id, len) in &chunks {
            if !take(&mut out, &inner.read_one(&id)?, len, inode.id) {
                return Ok(None);
            }
        }
        self.refresh(inode.id, root, &chunks);
        Ok(Some(out))
    }

    /// Gives `ino`'s entry the locations its chunks have now.
    fn refresh(&self, ino: InodeId, root: ChunkId, chunks: &[(ChunkId, u32)]) {
        let given = (|| -> Result<()> {
            if !self.inner.meta.path_indexed(ino)? {
                return Ok(());
            }
            if let Some(h) = self.inner.locate(root, chunks)? {
                self.inner.meta.set_path_hints(ino, &h)?;
            }
            Ok(())
        })();
        if let Err(e) = given {
            tracing::debug!(inode = ino.0, error = %e, "refreshing a file's chunk hints failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(offset: u64, len: u64, chunk: Option<u8>) -> Extent {
        Extent {
            offset,
            len,
            chunk: chunk.map(|b| ChunkId::from_bytes([b; 32])),
        }
    }

    #[test]
    fn only_whole_contiguous_small_files_are_hintable() {
        let two = [extent(0, 10, Some(1)), extent(10, 5, Some(2))];
        let got = hintable(&two, 15).unwrap();
        assert_eq!(got.iter().map(|c| c.1).collect::<Vec<_>>(), [10, 5]);
        // Past the end (zeros), a hole, a gap: not described by chunks.
        assert!(hintable(&two, 16).is_none());
        assert!(hintable(&[extent(0, 10, None)], 10).is_none());
        assert!(hintable(&[extent(5, 10, Some(1))], 15).is_none());
        assert!(hintable(&[], 0).is_none());
        let many: Vec<_> = (0..=meta::MAX_HINTED_CHUNKS as u64)
            .map(|i| extent(i, 1, Some(1)))
            .collect();
        assert!(hintable(&many, many.len() as u64).is_none());
        let big = [extent(0, meta::MAX_HINTED_SIZE + 1, Some(1))];
        assert!(hintable(&big, meta::MAX_HINTED_SIZE + 1).is_none());
    }
}

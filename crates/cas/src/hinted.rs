//! Reading a chunk at a location its caller remembered, without asking the
//! index ([`Store::read_hinted`]): the file system keeps the locations of a
//! small file's chunks beside its metadata, so a cold read of it is one
//! container read. A hint is only ever a shortcut: the bytes read are
//! verified against the chunk id (content-addressed, so a stale hint cannot
//! pass), and any mismatch or failure is answered by the normal read.

use bytes::Bytes;

use crate::container::ChunkLocation;
use crate::id::ChunkId;
use crate::store::Store;
use crate::Result;

/// The largest region a hint may ask to read (containers are a few MiB).
const MAX_HINTED_REGION: usize = 64 << 20;

impl Store {
    /// Chunk `id`, read at `hint` when the chunk is still there, else as
    /// [`Store::read_chunk`] reads it (garbage collection may have moved
    /// it, or dropped the container). A stale hint is not damage: nothing
    /// is recorded about the copy it pointed at.
    pub fn read_hinted(&self, id: &ChunkId, hint: &ChunkLocation) -> Result<Bytes> {
        match self.read_at_hint(id, hint) {
            Some(data) => Ok(data),
            None => self.read_chunk(id),
        }
    }

    /// Chunk `id` read at `hint`, verified; `None` when it is not there
    /// (moved, its container dropped, other bytes): the caller reads it as
    /// usual and may refresh what it remembered.
    pub fn read_at_hint(&self, id: &ChunkId, hint: &ChunkLocation) -> Option<Bytes> {
        // A damaged hint must not make a huge read: regions are far smaller.
        if hint.region_len as usize > MAX_HINTED_REGION {
            return None;
        }
        let at_hint = self
            .read_region(hint, id)
            .and_then(|region| self.verify(id, hint, &region));
        match at_hint {
            // A copy, so that the (possibly much larger) region is freed.
            Ok(data) => Some(Bytes::copy_from_slice(&data)),
            Err(e) => {
                tracing::debug!(chunk = %id, error = %e, "a chunk location hint failed; locating it");
                None
            }
        }
    }

    /// Where chunk `id` is stored now, for a caller that keeps it as a hint
    /// for [`Store::read_hinted`]; `None` for a chunk not (yet) in a sealed
    /// container.
    pub fn location_hint(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        self.shared.index.lookup(id)
    }
}

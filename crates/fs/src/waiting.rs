//! Data waiting for space: a full disk never holds the namespace back,
//! and garbage collection can always free it.
//!
//! A container a full branch refused waits in memory (`cas`'s stall) until
//! space comes back. Records set since the last sync may point at it, and
//! metadata is never made durable before its data. Holding the whole sync
//! back until space came back made every unlink, rename and truncate of
//! the meantime undurable (an unmount then undid them). Instead each commit
//! puts back the records that reach such a container ([`Inner::revert_waiting`]:
//! content, size, times and intent log as of the last sync) and syncs the
//! rest. The newer data stays in the file's state in memory, marked
//! changed, and is recorded again by the next commit; the commit still says
//! ENOSPC (so does every `fsync` while anything waits).
//!
//! Garbage collection's way out of a full disk is to drop the containers
//! that wait for space; it may drop one that an open file still needs,
//! since that file's newer bytes were never acknowledged by an fsync
//! ([`Fs::drop_waiting_writes`]): the file goes back to its last durable
//! content (recorded content and intent log), and the error log names it.

use std::collections::HashSet;

use cas::ChunkId;
use meta::{Content, InodeId};

use crate::file::FileState;
use crate::reach::MarkSet;
use crate::{Fs, Inner, Result};

impl Inner {
    /// Puts back every content record set since the last sync that
    /// reaches a container waiting for space; the file keeps the newer
    /// data in memory. Called by the commit, under `recording`, before it
    /// syncs the metadata.
    pub(crate) fn revert_waiting(&self) -> Result<()> {
        let parked: HashSet<ChunkId> = self.store.parked_chunks().into_iter().collect();
        if parked.is_empty() {
            return Ok(());
        }
        for ino in self.meta.unsynced_contents() {
            let inode = match self.meta.get(ino) {
                Err(meta::MetaError::NotFound) => continue,
                other => other?,
            };
            if !self.reaches(&inode.content, &parked)? {
                continue;
            }
            // The state is taken (loaded from the record about to go back,
            // if the file is not open) before the record goes back.
            let state = self.state(ino)?;
            let mut f = self.lock_settled(&state);
            let Some(back) = self.meta.revert_content(ino)? else {
                continue;
            };
            f.content = back.content;
            f.changed = true;
            f.memo = None;
            f.touched.everything();
            f.left_whole = None;
            f.intent.broken();
            f.mtime.get_or_insert(inode.attr.mtime);
            tracing::warn!(
                file = %self.describe(ino),
                "the file's new data waits for space: its last durable content stays on disk until the data is stored"
            );
        }
        Ok(())
    }

    /// The files whose newer data is in memory only (changed since their
    /// last record), as paths: what is lost when the file system stops
    /// while data waits for space.
    pub(crate) fn unstored_files(&self) -> Vec<String> {
        let open: Vec<(InodeId, _)> = self
            .files
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let mut out: Vec<String> = open
            .into_iter()
            .filter(|(_, state)| state.lock().changed)
            .map(|(ino, _)| self.describe(ino))
            .collect();
        out.sort();
        out
    }

    /// Whether `content`'s recipe tree reaches a chunk of `chunks`.
    fn reaches(&self, content: &Content, chunks: &HashSet<ChunkId>) -> Result<bool> {
        let Content::Recipe(root) = content else {
            return Ok(false);
        };
        if chunks.contains(root) {
            return Ok(true);
        }
        let mut set = MarkSet::default();
        set.recipe(&self.store, root)?;
        Ok(chunks.iter().any(|c| set.contains(c)))
    }

    /// Takes `f` back to the file's durable content: its record and
    /// intent log replayed in memory (the log stays, for the next record).
    fn back_to_durable(&self, f: &mut FileState) -> Result<()> {
        let mut fresh = crate::intent::durable_state(self, f.ino)?;
        fresh.handles = f.handles;
        fresh.chunking = f.chunking;
        fresh.chunking_auto = f.chunking_auto;
        fresh.chunking_known = f.chunking_known;
        fresh.settled = f.settled.clone();
        self.account(f.held(), 0);
        // The old state's open container goes with its stream.
        *f = fresh;
        Ok(())
    }
}

impl Fs {
    /// Garbage collection's way out of a full disk: every open file whose
    /// unrecorded data reaches a container waiting for space goes back to
    /// its last durable content, so that nothing but that container holds
    /// the data and a collection can drop it. Returns the files, as paths.
    /// Their writes were never acknowledged by an fsync (one that reached
    /// such a container said ENOSPC).
    pub fn drop_waiting_writes(&self) -> Result<Vec<String>> {
        let parked: HashSet<ChunkId> = self.inner.store.parked_chunks().into_iter().collect();
        if parked.is_empty() {
            return Ok(Vec::new());
        }
        // The records that reach them go back first (the commit does that
        // before it syncs the rest).
        self.inner.commit_synced()?;
        let open: Vec<(InodeId, _)> = self
            .inner
            .files
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let mut dropped = Vec::new();
        for (ino, state) in open {
            let mut f = self.inner.lock_settled(&state);
            let mut reached = f
                .extents
                .iter()
                .filter_map(|e| e.chunk)
                .any(|c| parked.contains(&c));
            if let Some(whole) = &f.left_whole {
                reached |= self.inner.reaches(&whole.content, &parked)?;
            }
            if !reached {
                continue;
            }
            self.inner.back_to_durable(&mut f)?;
            drop(f);
            let path = self.inner.describe(ino);
            tracing::error!(
                file = %path,
                "dropped the file's writes that waited for space (never fsynced): it keeps its last durable content"
            );
            dropped.push(path);
            self.inner.release_state(ino, state);
        }
        Ok(dropped)
    }
}

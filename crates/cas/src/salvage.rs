//! Damage the store has seen, and what it still holds of a damaged
//! container.
//!
//! A copy of a chunk that fails verification is recorded in the index
//! (`damaged_chunks`): writers stop deduplicating against it, so writing
//! the same data again stores a good copy, the index entry moves there,
//! and every file that uses the chunk id reads it again. A container whose
//! footer or trailer is damaged is recorded too (`damaged_containers`),
//! and its chunks are found from its region records
//! ([`container::recover`]). Garbage collection rewrites every recorded
//! container ([`Store::damaged_containers`]), which clears the record.

use std::collections::HashSet;

use crate::container::{self, ChunkLocation, ContainerError, TRAILER_LEN};
use crate::id::{ChunkId, ContainerId};
use crate::store::Store;
use crate::{CasError, Result};

impl Store {
    /// Records that the stored copies of these chunks failed verification,
    /// so no writer deduplicates against them again. A failure to record is
    /// logged, not returned: the caller is already reporting the damage.
    pub fn note_damaged_chunks(&self, copies: &[(ChunkId, ContainerId)]) {
        match self.shared.index.mark_damaged_chunks(copies) {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                chunks = n,
                "recorded damaged chunk copies: writing the same data again stores good copies"
            ),
            Err(e) => tracing::error!(error = %e, "could not record damaged chunk copies"),
        }
    }

    /// Records what a failed read of `container` says about its copies:
    /// nothing when `e` does not say data is lost
    /// ([`CasError::loses_data`]); when the container is on no branch,
    /// every chunk the index places in it (a reader that failed on one
    /// chunk, a recipe say, never reaches the others, and a writer must not
    /// deduplicate against any of them); else `copies`, the ones read.
    pub(crate) fn note_lost(
        &self,
        e: &CasError,
        container: ContainerId,
        copies: &[(ChunkId, ContainerId)],
    ) {
        if !e.loses_data() {
            return;
        }
        if e.is_gone() && !self.client().owns(container) {
            // Another client's, deleted by its collection: the chunks
            // still used were copied first, and are found afresh once its
            // entries are gone (its owner judges its damage, not this
            // store).
            if let Err(e) = self.shared.index.forget_containers(&[container].into()) {
                tracing::error!(container = %container, error = %e, "could not forget a container another client deleted");
            }
            return;
        }
        if !e.is_not_found() {
            return self.note_damaged_chunks(copies);
        }
        let index = &self.shared.index;
        let known = index.damaged_in(container);
        match index.mark_damaged_container(container, "it is on no branch") {
            Ok(false) if known => return,
            Ok(_) => {}
            Err(e) => {
                tracing::error!(container = %container, error = %e, "could not record a lost container")
            }
        }
        let mut all = copies.to_vec();
        if let Err(e) = index.for_each_chunk(|id, loc| {
            if loc.container == container {
                all.push((id, container));
            }
        }) {
            tracing::error!(container = %container, error = %e, "could not list a lost container's chunks");
        }
        self.note_damaged_chunks(&all);
    }

    /// The chunks a container whose [`container::parse`] failed still
    /// names, from its region records (see [`container::recover`]); each
    /// must be verified before it is trusted. Records the container as
    /// damaged, so garbage collection rewrites it with a sound footer.
    pub fn salvage(
        &self,
        id: ContainerId,
        bytes: &[u8],
        why: &ContainerError,
    ) -> Vec<(ChunkId, ChunkLocation)> {
        let entries = container::recover(id, bytes);
        tracing::warn!(container = %id, reason = %why, chunks = entries.len(), "recovering a damaged container from its region records");
        if let Err(e) = self
            .shared
            .index
            .mark_damaged_container(id, &why.to_string())
        {
            tracing::error!(container = %id, error = %e, "could not record a damaged container");
        }
        entries
    }

    /// Every container known to hold a damaged chunk copy or to have a
    /// damaged footer: what garbage collection should rewrite.
    pub fn damaged_containers(&self) -> Result<Vec<ContainerId>> {
        self.shared.index.damaged_containers()
    }

    /// The size of a container's blob and the chunks it holds: from its
    /// footer, or when that is damaged, every chunk that its region records
    /// or the index place in it (so that no chunk the index relies on is
    /// missed).
    pub(crate) fn container_entries(
        &self,
        container: ContainerId,
    ) -> Result<(u64, Vec<(ChunkId, ChunkLocation)>)> {
        let shared = &self.shared;
        let size = shared.container_size(container)?;
        let tail = shared.read_container_range(
            container,
            size.saturating_sub(TRAILER_LEN as u64),
            TRAILER_LEN,
        )?;
        let why = match container::parse_trailer(size, &tail) {
            Ok((offset, len, sum)) => {
                let footer = shared.read_container_range(container, offset, len as usize)?;
                match container::parse_footer(container, offset, &footer, sum) {
                    Ok(entries) => return Ok((size, entries)),
                    Err(e @ ContainerError::WrongId { .. }) => {
                        return Err(CasError::CorruptContainer {
                            container,
                            source: e,
                        })
                    }
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        let bytes = shared.read_container(container)?;
        let mut entries = self.salvage(container, &bytes, &why);
        let known: HashSet<(ChunkId, ChunkLocation)> = entries.iter().copied().collect();
        self.shared.index.for_each_chunk(|id, loc| {
            if loc.container == container && !known.contains(&(id, loc)) {
                entries.push((id, loc));
            }
        })?;
        Ok((bytes.len() as u64, entries))
    }
}

//! The store's half of a garbage collection run by another client of the
//! file system (the protocol is `gc`'s `peers` module): recording the
//! chunks this store's writers deduplicate against while it marks,
//! refusing to deduplicate against (or index again) the containers it is
//! about to delete, and forgetting them once it is done; and the small
//! blobs the clients hand each other (`gc/<epoch>/...` on the branches).
//!
//! The collector deletes only containers of its own range; this store
//! never deletes any of them. What it keeps of a collection is bounded by
//! that collection: the chunks deduplicated against while it marks, and
//! the ids of the containers it named.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use branch::BlobKey;

use crate::id::{ChunkId, ClientNo, ContainerId};
use crate::store::Store;
use crate::{CasError, Result};

/// Where one collection's blobs are.
const NOTES_PREFIX: &str = "gc/";

fn note_key(epoch: u64, name: &str) -> Result<BlobKey> {
    BlobKey::new(format!("{NOTES_PREFIX}{epoch:016x}/{name}"))
        .map_err(|e| CasError::BadNote(e.to_string()))
}

impl Store {
    /// Starts recording the chunks writers deduplicate against, for
    /// another client's collection; a no-op while recording already.
    pub fn record_for_peer(&self) {
        let mut retained = self.shared.retained.write();
        if retained.is_none() {
            *retained = Some(Default::default());
            self.shared.peer_recording.store(true, Ordering::SeqCst);
        }
    }

    /// Records `ids` as if a writer had deduplicated against them, while
    /// recording for another client's collection (between
    /// [`Store::record_for_peer`] and [`Store::doom`]); nothing otherwise.
    /// For a file opened meanwhile: the content its handle reads may be
    /// gone from the namespace before the collector marks it (another
    /// client overwrote or unlinked it), so the collector must copy it
    /// like a deduplicated chunk.
    pub fn retain_for_peer(&self, ids: impl IntoIterator<Item = ChunkId>) {
        if !self.shared.peer_recording.load(Ordering::SeqCst) {
            return;
        }
        let retained = self.shared.retained.read();
        if let Some(set) = retained.as_ref() {
            set.lock().extend(ids);
        }
    }

    /// Whether this store records for another client's collection now.
    pub fn recording_for_peer(&self) -> bool {
        self.shared.peer_recording.load(Ordering::SeqCst)
    }

    /// Stops a recording [`Store::record_for_peer`] started (never this
    /// store's own collection's); what it recorded.
    fn stop_peer_recording(
        &self,
        retained: &mut Option<parking_lot::Mutex<HashSet<ChunkId>>>,
    ) -> Vec<ChunkId> {
        if !self.shared.peer_recording.swap(false, Ordering::SeqCst) {
            return Vec::new();
        }
        retained
            .take()
            .map(|set| set.into_inner().into_iter().collect())
            .unwrap_or_default()
    }

    /// Stops deduplicating against `containers` (another client is about
    /// to delete them) and keeps them from being indexed again; returns
    /// every chunk deduplicated against since [`Store::record_for_peer`]
    /// and stops recording. Under the write lock on the recording, so a
    /// deduplication either was recorded or comes after and misses.
    pub fn doom(&self, containers: &[ContainerId]) -> Vec<ChunkId> {
        let mut doomed = self.shared.doomed.write();
        let mut retained = self.shared.retained.write();
        doomed.extend(containers.iter().copied());
        self.stop_peer_recording(&mut retained)
    }

    /// Ends what another client's collection asked of this store: stops
    /// recording, and forgets the doomed containers' index entries (they
    /// are deleted now, or left for that client's next collection, whose
    /// chunks are found again where they are) so that reads look them up
    /// afresh.
    pub fn peer_collection_ended(&self) -> Result<()> {
        let mut doomed = self.shared.doomed.write();
        self.shared
            .peer_collections_ended
            .fetch_add(1, Ordering::SeqCst);
        self.stop_peer_recording(&mut self.shared.retained.write());
        if doomed.is_empty() {
            return Ok(());
        }
        let gone: HashSet<ContainerId> = doomed.iter().copied().collect();
        self.shared.index.forget_containers(&gone)?;
        doomed.clear();
        Ok(())
    }

    /// Whether another client's collection named `container` to delete.
    pub(crate) fn is_doomed(&self, container: ContainerId) -> bool {
        self.shared.doomed.read().contains(&container)
    }

    /// Writes a blob of collection `epoch` on the branches.
    pub fn put_note(&self, epoch: u64, name: &str, data: &[u8]) -> Result<()> {
        let key = note_key(epoch, name)?;
        self.shared.delete_blob(&key)?;
        self.shared.put_blob(&key, data)
    }

    /// A blob of collection `epoch` another client (or this one) wrote.
    pub fn get_note(&self, epoch: u64, name: &str) -> Result<Vec<u8>> {
        let key = note_key(epoch, name)?;
        let wanted = key.clone();
        self.shared
            .layer
            .discover_new(key.as_str(), &|k| *k == wanted);
        self.shared.get_blob(&key)
    }

    /// Deletes every blob of collection `epoch`.
    pub fn delete_notes(&self, epoch: u64) -> Result<()> {
        let prefix = format!("{NOTES_PREFIX}{epoch:016x}/");
        self.shared.layer.discover_new(&prefix, &|_| true);
        for key in self.shared.list_blobs(&prefix)? {
            self.shared.delete_blob(&key)?;
        }
        Ok(())
    }

    /// Every client's roots (versions, snapshots, stored files), read from
    /// the branches: what a collection across clients marks from besides
    /// the namespace. This store's own come from its index.
    pub fn every_clients_roots(&self) -> Result<Vec<(String, ChunkId)>> {
        let mut out = self.list_roots()?;
        for client in self.clients()? {
            if client == self.client() {
                continue;
            }
            out.extend(self.roots_on_branches(client)?);
        }
        Ok(out)
    }

    /// The roots client `client` keeps on the branches, labelled
    /// `client <n>: <label>`.
    fn roots_on_branches(&self, client: ClientNo) -> Result<Vec<(String, ChunkId)>> {
        let prefix = crate::store::roots_prefix(client);
        self.shared.layer.discover_new(&prefix, &|_| true);
        let mut out = Vec::new();
        for key in self.shared.list_blobs(&prefix)? {
            let Some(label) = crate::store::label_of_root_blob(&prefix, &key) else {
                continue;
            };
            let bytes = self.shared.get_blob(&key)?;
            let id: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                CasError::BadNote(format!(
                    "root blob {key} holds {} bytes, not 32",
                    bytes.len()
                ))
            })?;
            out.push((format!("client {client}: {label}"), ChunkId::from_bytes(id)));
        }
        Ok(out)
    }
}

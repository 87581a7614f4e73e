//! The one path from the store to storage: every container and root blob
//! is written, read, listed and deleted through the redundancy layer, and
//! every error it gives is turned into the store's here, once.
//!
//! A repository on one plain branch is a layer in the plain layout
//! ([`redundancy::Redundant::plain`]), which keeps its containers as the
//! raw blobs they always were; so there is no second path for it.

use std::sync::atomic::Ordering;

use branch::BlobKey;
use redundancy::PutRequest;

use crate::id::ContainerId;
use crate::store::Shared;
use crate::{CasError, Result};

impl Shared {
    /// `len` bytes at `offset` of container `c`, verified by the layer.
    pub(crate) fn read_container_range(
        &self,
        c: ContainerId,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let _slot = self.qos.admit();
        self.layer
            .read_range(&c.blob_key(), offset, len)
            .map_err(|e| container_error(c, e))
    }

    pub(crate) fn read_container(&self, c: ContainerId) -> Result<Vec<u8>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let _slot = self.qos.admit();
        self.layer
            .get(&c.blob_key())
            .map_err(|e| container_error(c, e))
    }

    pub(crate) fn container_size(&self, c: ContainerId) -> Result<u64> {
        self.layer
            .size(&c.blob_key())
            .map_err(|e| container_error(c, e))
    }

    /// Removes whatever is left of container `c`; one that is gone already
    /// is not an error.
    pub(crate) fn delete_container(&self, c: ContainerId) -> Result<()> {
        Ok(self.layer.delete(&c.blob_key())?)
    }

    pub(crate) fn prefetch_container(&self, c: ContainerId, offset: u64, len: u64) {
        self.layer.prefetch(&c.blob_key(), offset, len);
    }

    /// Every container the storage holds, in id order.
    pub(crate) fn stored_containers(&self) -> Result<Vec<ContainerId>> {
        let keys = self.layer.list(ContainerId::list_prefix())?;
        let mut ids: Vec<ContainerId> =
            keys.iter().filter_map(ContainerId::from_blob_key).collect();
        ids.sort();
        Ok(ids)
    }

    /// Stores a small blob (a root) under the default protection.
    pub(crate) fn put_blob(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        let p = self.default.read().clone();
        let request = PutRequest {
            key,
            data,
            policy: &p.policy,
            allowed: &p.branches,
        };
        let mut results = self.layer.put_many(std::slice::from_ref(&request));
        results.pop().expect("one result per request")?;
        Ok(())
    }

    pub(crate) fn get_blob(&self, key: &BlobKey) -> Result<Vec<u8>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(self.layer.get(key)?)
    }

    pub(crate) fn delete_blob(&self, key: &BlobKey) -> Result<()> {
        Ok(self.layer.delete(key)?)
    }

    pub(crate) fn list_blobs(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        Ok(self.layer.list(prefix)?)
    }
}

/// The store's error for a failed read of container `c`: a container that
/// is on no branch, or whose shards are lost beyond its policy, is
/// [`CasError::ContainerLost`] however it was reached; anything else is
/// the layer failing.
pub(crate) fn container_error(c: ContainerId, e: redundancy::Error) -> CasError {
    match e {
        redundancy::Error::NotFound(_) | redundancy::Error::Unrecoverable { .. } => {
            CasError::ContainerLost {
                container: c,
                source: Box::new(e),
            }
        }
        other => other.into(),
    }
}

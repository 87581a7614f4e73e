//! A [`Redundant`] seen as one [`Branch`]: a default policy and a set of
//! allowed branches bound to it, so code written against a branch (the
//! `cas` store) stores redundantly without change.

use std::io;
use std::sync::Arc;

use branch::{BlobKey, Branch, BranchError};

use crate::error::{Error, Result};
use crate::map::Placement;
use crate::members::BranchId;
use crate::policy::Policy;
use crate::Redundant;

pub struct PolicyView {
    store: Arc<Redundant>,
    policy: Policy,
    allowed: Vec<BranchId>,
    name: String,
}

impl PolicyView {
    /// A view storing new blobs as `policy` over `allowed`; fails as
    /// [`Redundant::put`] would if the branches cannot hold the policy.
    pub fn new(store: Arc<Redundant>, policy: Policy, allowed: Vec<BranchId>) -> Result<Self> {
        store.validate(&policy, &allowed)?;
        let names: Vec<String> = allowed
            .iter()
            .filter_map(|id| store.branch_name(*id))
            .collect();
        // Not the policy: errors name the view as the branch, and a
        // container it stored under another policy must not be called this
        // one's ("single[..]" for a mirror:2 container gc could not find).
        let name = format!("[{}]", names.join(","));
        Ok(PolicyView {
            store,
            policy,
            allowed,
            name,
        })
    }

    pub fn store(&self) -> &Arc<Redundant> {
        &self.store
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Stores one blob under another policy than the view's default, over
    /// the same allowed branches.
    pub fn put_with(&self, key: &BlobKey, data: &[u8], policy: &Policy) -> Result<Placement> {
        self.store.put(key, data, policy, &self.allowed)
    }

    fn branch_error(&self, key: &BlobKey, op: &'static str, err: Error) -> BranchError {
        match err {
            Error::NotFound(_) => BranchError::NotFound {
                branch: self.name.clone(),
                key: key.clone(),
            },
            Error::Exists(_) => BranchError::Exists {
                branch: self.name.clone(),
                key: key.clone(),
            },
            Error::OutOfRange {
                offset, len, size, ..
            } => BranchError::Truncated {
                branch: self.name.clone(),
                key: key.clone(),
                offset,
                wanted: len,
                size,
            },
            other => BranchError::Io {
                op,
                path: key.as_str().into(),
                source: io::Error::other(other),
            },
        }
    }
}

impl Branch for PolicyView {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> branch::Result<()> {
        self.store
            .put(key, data, &self.policy, &self.allowed)
            .map(|_| ())
            .map_err(|e| self.branch_error(key, "store redundantly", e))
    }

    fn get(&self, key: &BlobKey) -> branch::Result<Vec<u8>> {
        self.store
            .get(key)
            .map_err(|e| self.branch_error(key, "read redundantly", e))
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> branch::Result<Vec<u8>> {
        self.store
            .read_range(key, offset, len)
            .map_err(|e| self.branch_error(key, "read redundantly", e))
    }

    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        self.store.prefetch(key, offset, len);
    }

    fn size(&self, key: &BlobKey) -> branch::Result<u64> {
        self.store
            .size(key)
            .map_err(|e| self.branch_error(key, "stat", e))
    }

    fn list(&self, prefix: &str) -> branch::Result<Vec<BlobKey>> {
        self.store.list(prefix).map_err(|e| BranchError::Io {
            op: "list",
            path: prefix.into(),
            source: io::Error::other(e),
        })
    }

    fn delete(&self, key: &BlobKey) -> branch::Result<()> {
        self.store
            .delete(key)
            .map_err(|e| self.branch_error(key, "delete redundantly", e))
    }
}

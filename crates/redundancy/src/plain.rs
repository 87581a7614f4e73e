//! The plain layout: one branch, each container one raw blob under its own
//! key, no shard header.
//!
//! This is how a repository without `[[branch]]` entries has always stored
//! its containers (`containers/<dir>/<id>` on its one branch), and existing
//! repositories must read unchanged. Rather than a second path into
//! storage beside this layer, such a repository gets a layer in the plain
//! layout ([`Redundant::plain`]): it is `single` on branch 0, and every
//! operation that would meet a shard takes the branch directly here.
//! There is no map (reads and listings go to the branch), nothing to
//! verify per block (the container's own checksums and the chunk ids are
//! what `cas` verifies), nothing to heal and no other branch to move to.

use std::sync::Arc;

use branch::{BlobKey, Branch, BranchError};

use crate::error::{Error, Result, ShardFault};
use crate::map::{Placement, ShardPlace};
use crate::members::{BranchId, FaultKind};
use crate::policy::Policy;
use crate::write::PutRequest;

/// The one branch of a plain layer.
const ONLY: BranchId = BranchId(0);

/// Refuses what a plain layer cannot store: any policy but `single`, any
/// branch but its one.
pub(crate) fn plain_validate(policy: &Policy, allowed: &[BranchId]) -> Result<()> {
    if *policy != Policy::Single {
        return Err(Error::NoRedundancy(policy.clone()));
    }
    match allowed {
        [ONLY] => Ok(()),
        _ => Err(Error::Plain("store on more than its one branch")),
    }
}

pub(crate) fn plain_put_many(
    branch: &Arc<dyn Branch>,
    requests: &[PutRequest<'_>],
) -> Vec<Result<Placement>> {
    let checked: Vec<Result<()>> = requests
        .iter()
        .map(|r| plain_validate(r.policy, r.allowed))
        .collect();
    let blobs: Vec<(BlobKey, &[u8])> = requests
        .iter()
        .zip(&checked)
        .filter(|(_, ok)| ok.is_ok())
        .map(|(r, _)| (r.key.clone(), r.data))
        .collect();
    let mut written = branch.put_many(&blobs).into_iter();
    requests
        .iter()
        .zip(checked)
        .map(|(r, ok)| {
            ok?;
            match written.next().expect("one result per blob") {
                Ok(()) => Ok(plain_placement(r.key, r.data.len() as u64)),
                Err(err) => Err(Error::Write {
                    op: "store",
                    key: r.key.clone(),
                    policy: Policy::Single,
                    failures: vec![ShardFault {
                        index: 0,
                        branch: Some(branch.name().to_string()),
                        kind: FaultKind::of(&err),
                        detail: err.to_string(),
                    }],
                }),
            }
        })
        .collect()
}

pub(crate) fn plain_get(branch: &Arc<dyn Branch>, key: &BlobKey) -> Result<Vec<u8>> {
    branch.get(key).map_err(|e| plain_error(branch, e))
}

pub(crate) fn plain_read_range(
    branch: &Arc<dyn Branch>,
    key: &BlobKey,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    branch
        .read_range(key, offset, len)
        .map_err(|e| plain_error(branch, e))
}

pub(crate) fn plain_size(branch: &Arc<dyn Branch>, key: &BlobKey) -> Result<u64> {
    branch.size(key).map_err(|e| plain_error(branch, e))
}

pub(crate) fn plain_list(branch: &Arc<dyn Branch>, prefix: &str) -> Result<Vec<BlobKey>> {
    branch.list(prefix).map_err(|e| plain_error(branch, e))
}

/// Removing a missing blob is not an error, as for shards.
pub(crate) fn plain_delete(branch: &Arc<dyn Branch>, key: &BlobKey) -> Result<()> {
    match branch.delete(key) {
        Ok(()) | Err(BranchError::NotFound { .. }) => Ok(()),
        Err(e) => Err(plain_error(branch, e)),
    }
}

pub(crate) fn plain_locate(branch: &Arc<dyn Branch>, key: &BlobKey) -> Result<Placement> {
    Ok(plain_placement(key, plain_size(branch, key)?))
}

/// The layer's own error for what the branch said: a blob that is not
/// there is [`Error::NotFound`], as over shards; anything else (a blob cut
/// short included: there is no map to know its length by) is the branch's
/// error, named.
fn plain_error(branch: &Arc<dyn Branch>, err: BranchError) -> Error {
    match err {
        BranchError::NotFound { key, .. } => Error::NotFound(key),
        other => Error::Branch {
            branch: branch.name().to_string(),
            source: Box::new(other),
        },
    }
}

/// A plain container: one "shard", the container itself, on branch 0.
fn plain_placement(key: &BlobKey, len: u64) -> Placement {
    Placement {
        key: key.clone(),
        policy: Policy::Single,
        container_len: len,
        shards: vec![ShardPlace {
            index: 0,
            blob: key.clone(),
            branches: vec![ONLY],
        }],
    }
}

//! Storing and deleting containers.

use branch::BlobKey;

use crate::codec;
use crate::error::{Error, Result, ShardFault};
use crate::map::{shard_key, Entry, Placement};
use crate::members::{BranchId, FaultKind};
use crate::parallel::fan_out;
use crate::placement;
use crate::plain::{plain_delete, plain_put_many};
use crate::policy::{Coding, Policy};
use crate::shard::{self, Layout};
use crate::Redundant;

/// One container to store with [`Redundant::put_many`].
pub struct PutRequest<'a> {
    pub key: &'a BlobKey,
    pub data: &'a [u8],
    pub policy: &'a Policy,
    pub allowed: &'a [BranchId],
}

/// A container's shards, encoded and placed, not yet written.
struct Prepared {
    key: BlobKey,
    layout: Layout,
    ids: Vec<BranchId>,
    blobs: Vec<Vec<u8>>,
}

impl Redundant {
    /// Stores `data` as container `key` under `policy` on branches chosen
    /// from `allowed`, every shard written in parallel. Returns only when
    /// every shard is durable; if any shard cannot be written, the others
    /// are removed again and nothing is stored (a container is never left
    /// with less redundancy than asked for).
    pub fn put(
        &self,
        key: &BlobKey,
        data: &[u8],
        policy: &Policy,
        allowed: &[BranchId],
    ) -> Result<Placement> {
        let req = PutRequest {
            key,
            data,
            policy,
            allowed,
        };
        self.put_many(std::slice::from_ref(&req))
            .pop()
            .expect("one result per request")
    }

    /// [`Redundant::put`] for several containers at once, one result each.
    /// The shards going to one branch are handed to it together
    /// ([`branch::Branch::put_many`]), so a local branch syncs its
    /// directory once for all of them instead of once per shard.
    pub fn put_many(&self, requests: &[PutRequest<'_>]) -> Vec<Result<Placement>> {
        if let Some(plain) = &self.plain {
            return plain_put_many(plain, requests);
        }
        let _placing = self.placing.read();
        let prepared = fan_out(requests, |r| self.prepare(r));
        // Every shard of every prepared container: (request, shard index).
        let mut by_branch: Vec<(BranchId, Vec<(usize, u16)>)> = Vec::new();
        for (i, p) in prepared.iter().enumerate() {
            let Ok(p) = p else { continue };
            for (index, id) in (0..).zip(&p.ids) {
                match by_branch.iter_mut().find(|(b, _)| b == id) {
                    Some((_, shards)) => shards.push((i, index)),
                    None => by_branch.push((*id, vec![(i, index)])),
                }
            }
        }
        let written = fan_out(&by_branch, |(id, shards)| {
            let blobs: Vec<(BlobKey, &[u8])> = shards
                .iter()
                .map(|&(i, index)| {
                    let p = prepared[i].as_ref().expect("only prepared requests");
                    (shard_key(&p.key, index), &p.blobs[usize::from(index)][..])
                })
                .collect();
            self.member(*id).branch.put_many(&blobs)
        });
        let mut results: Vec<Vec<(u16, BranchId, branch::Result<()>)>> =
            requests.iter().map(|_| Vec::new()).collect();
        for ((id, shards), outcome) in by_branch.iter().zip(written) {
            for (&(i, index), r) in shards.iter().zip(outcome) {
                results[i].push((index, *id, r));
            }
        }
        prepared
            .into_iter()
            .zip(results)
            .map(|(p, shards)| self.finish(p?, shards))
            .collect()
    }

    /// Places and encodes one container's shards.
    fn prepare(&self, r: &PutRequest<'_>) -> Result<Prepared> {
        let (key, data, policy) = (r.key, r.data, r.policy);
        let allowed = &self.placeable(policy, r.allowed)[..];
        self.validate(policy, allowed)?;
        if self.map.contains(key) {
            return Err(Error::Exists(key.clone()));
        }
        let parity_at = policy.fixed_parity_branch().and_then(|name| {
            allowed
                .iter()
                .position(|id| self.branch_name(*id).as_deref() == Some(name))
        });
        let ids = placement::choose(policy, key.as_str(), allowed, parity_at);
        let layout = Layout::new(policy.clone(), key.as_str(), data.len() as u64);
        let blobs = codec::with_redundant(&layout, data, |redundant| match policy.coding() {
            // Copies differ only in their header: hash the container once.
            Coding::Copies => {
                let first = shard::encode(&layout, 0, data);
                let mut blobs = vec![first];
                for index in 1..layout.shards() {
                    let mut blob = blobs[0].clone();
                    shard::relabel(&layout, &mut blob, index);
                    blobs.push(blob);
                }
                blobs
            }
            Coding::Xor | Coding::ReedSolomon => (0..layout.shards())
                .map(|index| match index.checked_sub(layout.k()) {
                    None => shard::encode(&layout, index, codec::data_slice(&layout, data, index)),
                    Some(r) => shard::encode(&layout, index, redundant[usize::from(r)]),
                })
                .collect(),
        })
        .map_err(|source| Error::Coding {
            key: key.clone(),
            source,
        })?;
        Ok(Prepared {
            key: key.clone(),
            layout,
            ids,
            blobs,
        })
    }

    /// Maps a container whose shards were all written; else removes those
    /// that were and names the ones that failed.
    fn finish(
        &self,
        p: Prepared,
        shards: Vec<(u16, BranchId, branch::Result<()>)>,
    ) -> Result<Placement> {
        let failures: Vec<ShardFault> = shards
            .iter()
            .filter_map(|(index, id, r)| {
                let err = r.as_ref().err()?;
                Some(ShardFault {
                    index: *index,
                    branch: Some(self.member(*id).name.clone()),
                    kind: FaultKind::of(err),
                    detail: err.to_string(),
                })
            })
            .collect();
        if !failures.is_empty() {
            let written: Vec<(u16, BranchId)> = shards
                .iter()
                .filter(|(_, _, r)| r.is_ok())
                .map(|(index, id, _)| (*index, *id))
                .collect();
            fan_out(&written, |&(index, id)| {
                let _ = self.member(id).branch.delete(&shard_key(&p.key, index));
            });
            return Err(Error::Write {
                op: "store",
                key: p.key,
                policy: p.layout.policy.clone(),
                failures,
            });
        }
        let entry = Entry {
            layout: p.layout,
            locations: p.ids.into_iter().map(|id| vec![id]).collect(),
        };
        let placed = entry.placement(&p.key);
        self.map.insert(p.key, entry);
        Ok(placed)
    }

    /// Removes every shard of `key`. Removing a missing container is not
    /// an error. Shards whose branch refuses the delete stay in the map and
    /// are named in the error.
    pub fn delete(&self, key: &BlobKey) -> Result<()> {
        if let Some(plain) = &self.plain {
            return plain_delete(plain, key);
        }
        let Some(entry) = self.map.remove(key) else {
            return Ok(());
        };
        let jobs: Vec<(u16, BranchId)> = entry
            .locations
            .iter()
            .enumerate()
            .flat_map(|(i, ids)| ids.iter().map(move |id| (i as u16, *id)))
            .collect();
        let results = fan_out(&jobs, |&(index, id)| {
            self.member(id).branch.delete(&shard_key(key, index))
        });
        let mut kept = Entry {
            layout: entry.layout.clone(),
            locations: vec![Vec::new(); entry.locations.len()],
        };
        let mut failures = Vec::new();
        for (&(index, id), r) in jobs.iter().zip(results) {
            if let Err(err) = r {
                kept.locations[usize::from(index)].push(id);
                failures.push(ShardFault {
                    index,
                    branch: Some(self.member(id).name.clone()),
                    kind: FaultKind::of(&err),
                    detail: err.to_string(),
                });
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        self.map.insert(key.clone(), kept);
        Err(Error::Write {
            op: "delete",
            key: key.clone(),
            policy: entry.layout.policy.clone(),
            failures,
        })
    }
}

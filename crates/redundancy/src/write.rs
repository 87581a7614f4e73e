//! Storing and deleting containers.

use std::borrow::Cow;

use branch::BlobKey;

use crate::codec;
use crate::error::{Error, Result, ShardFault};
use crate::map::{shard_key, Entry, Placement};
use crate::members::{BranchId, FaultKind};
use crate::parallel::fan_out;
use crate::placement;
use crate::policy::{Coding, Policy};
use crate::shard::{self, Layout};
use crate::Redundant;

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
        let _placing = self.placing.read().unwrap();
        let allowed = &self.placeable(policy, allowed)[..];
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
        let redundant =
            codec::redundant_payloads(&layout, data).map_err(|source| Error::Coding {
                key: key.clone(),
                source,
            })?;
        // Copies differ only in their header: hash the container once.
        let first_copy =
            (policy.coding() == Coding::Copies).then(|| shard::encode(&layout, 0, data));
        let jobs: Vec<(u16, BranchId)> = (0..).zip(ids.iter().copied()).collect();
        let results = fan_out(&jobs, |&(index, id)| {
            let blob: Cow<[u8]> = match &first_copy {
                Some(copy) if index == 0 => Cow::Borrowed(copy),
                Some(copy) => {
                    let mut blob = copy.clone();
                    shard::relabel(&layout, &mut blob, index);
                    Cow::Owned(blob)
                }
                None if index < layout.k() => Cow::Owned(shard::encode(
                    &layout,
                    index,
                    codec::data_slice(&layout, data, index),
                )),
                None => Cow::Owned(shard::encode(
                    &layout,
                    index,
                    &redundant[usize::from(index - layout.k())],
                )),
            };
            self.member(id).branch.put(&shard_key(key, index), &blob)
        });
        let failures: Vec<ShardFault> = jobs
            .iter()
            .zip(&results)
            .filter_map(|(&(index, id), r)| {
                let err = r.as_ref().err()?;
                Some(ShardFault {
                    index,
                    branch: Some(self.member(id).name.clone()),
                    kind: FaultKind::of(err),
                    detail: err.to_string(),
                })
            })
            .collect();
        if !failures.is_empty() {
            let written: Vec<(u16, BranchId)> = jobs
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(job, _)| *job)
                .collect();
            fan_out(&written, |&(index, id)| {
                let _ = self.member(id).branch.delete(&shard_key(key, index));
            });
            return Err(Error::Write {
                op: "store",
                key: key.clone(),
                policy: policy.clone(),
                failures,
            });
        }
        let entry = Entry {
            layout,
            locations: ids.into_iter().map(|id| vec![id]).collect(),
        };
        let placed = entry.placement(key);
        self.map.insert(key.clone(), entry);
        Ok(placed)
    }

    /// Removes every shard of `key`. Removing a missing container is not
    /// an error. Shards whose branch refuses the delete stay in the map and
    /// are named in the error.
    pub fn delete(&self, key: &BlobKey) -> Result<()> {
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

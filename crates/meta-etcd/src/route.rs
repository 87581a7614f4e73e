//! Where a key lives: one data cluster for a file system on one etcd
//! cluster, or the owner of the key's shard (from the cached shard map)
//! for a file system over several. A [`Route`] is one snapshot of the map
//! and of a client per data cluster; an attempt or a reader keeps one
//! snapshot from start to end. The [`Ring`] holds the current snapshot and
//! reloads it from the control cluster when a fence says it is stale.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::keys::Keys;
use crate::rpc::{GetOptions, Rpc};
use crate::shard::{Fence, ShardMap};
use crate::EtcdError;

pub(crate) struct Route {
    /// `None`: one cluster, no shards (every key in `data[0]`).
    pub map: Option<Arc<ShardMap>>,
    pub data: Vec<Arc<Rpc>>,
}

impl Route {
    pub fn rpc(&self, cluster: usize) -> &Rpc {
        &self.data[cluster]
    }

    /// The cluster of a key holding an inode number, with its shard and
    /// the epoch the map gives it (`None` without shards).
    pub fn place(&self, keys: &Keys, key: &[u8]) -> Result<(usize, Option<(u32, u64)>), EtcdError> {
        let Some(map) = &self.map else {
            return Ok((0, None));
        };
        let shard = keys.shard_of_key(key).ok_or(EtcdError::Unrouted)?;
        let (cluster, epoch) = map.owner(shard)?;
        Ok((cluster, Some((shard, epoch))))
    }

    /// Whether the fence value read in the shard's cluster lets this map
    /// use it: the epoch the map has, not moved away. A lock is the
    /// caller's business (writers wait, readers ignore it).
    pub fn check_fence(shard: u32, epoch: u64, value: Option<&[u8]>) -> Result<Fence, EtcdError> {
        let fence = Fence::decode(value.ok_or(EtcdError::Stale(shard))?)?;
        if fence.epoch != epoch || fence.moved {
            return Err(EtcdError::Stale(shard));
        }
        Ok(fence)
    }

    /// The key ranges of `tag` (`i/`, `o/`, ...) over every shard, each
    /// with its cluster: runs of neighbouring shards on one cluster.
    pub fn runs(&self, keys: &Keys, tag: &[u8; 2]) -> Vec<Run> {
        let Some(map) = &self.map else {
            let (start, end) = keys.shard_range(tag, 0, crate::shard::MAX_SHARDS);
            return vec![Run {
                cluster: 0,
                shards: Vec::new(),
                start,
                end,
            }];
        };
        let mut out = Vec::new();
        let n = map.shards.len() as u32;
        let mut lo = 0;
        while lo < n {
            let owner = map.shards[lo as usize].0;
            let mut hi = lo + 1;
            while hi < n && map.shards[hi as usize].0 == owner {
                hi += 1;
            }
            // The last run reaches past the last shard: no key is there.
            let end = if hi == n {
                crate::shard::MAX_SHARDS
            } else {
                hi
            };
            let (start, stop) = keys.shard_range(tag, lo, end);
            out.push(Run {
                cluster: usize::from(owner),
                shards: (lo..hi).map(|s| (s, map.shards[s as usize].1)).collect(),
                start,
                end: stop,
            });
            lo = hi;
        }
        out
    }
}

/// Neighbouring shards on one cluster: their keys under one tag.
pub(crate) struct Run {
    pub cluster: usize,
    /// The shards with the epoch the map gives them (none without shards).
    pub shards: Vec<(u32, u64)>,
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

/// The clusters of one open file system.
pub(crate) struct Ring {
    /// The control cluster (shard map, inode counter, intents); `None`
    /// for a file system on one cluster.
    pub control: Option<Arc<Rpc>>,
    current: RwLock<Arc<Route>>,
    timeout: Duration,
}

impl Ring {
    pub fn single(rpc: Rpc, timeout: Duration) -> Self {
        Ring {
            control: None,
            current: RwLock::new(Arc::new(Route {
                map: None,
                data: vec![Arc::new(rpc)],
            })),
            timeout,
        }
    }

    /// A file system over several clusters: its map read from `control`.
    pub fn sharded(control: Rpc, keys: &Keys, timeout: Duration) -> Result<Self, EtcdError> {
        let ring = Ring {
            control: Some(Arc::new(control)),
            current: RwLock::new(Arc::new(Route {
                map: None,
                data: Vec::new(),
            })),
            timeout,
        };
        ring.reload(keys)?;
        Ok(ring)
    }

    pub fn route(&self) -> Arc<Route> {
        self.current.read().clone()
    }

    /// The control cluster, or the one data cluster (where the inode
    /// counter is).
    pub fn counter_rpc(&self) -> Arc<Rpc> {
        match &self.control {
            Some(c) => c.clone(),
            None => self.route().data[0].clone(),
        }
    }

    /// Reads the shard map again, connecting to clusters added since.
    pub fn reload(&self, keys: &Keys) -> Result<Arc<ShardMap>, EtcdError> {
        let control = self.control.as_ref().ok_or(EtcdError::NotSharded)?;
        let mut resp = control.get(keys.map(), GetOptions::new())?;
        let kv = resp.take_kvs().pop().ok_or(EtcdError::NoMap)?;
        let map = Arc::new(ShardMap::decode(&kv.value)?);
        let old = self.route();
        let mut data = old.data.clone();
        for endpoints in &map.clusters[data.len().min(map.clusters.len())..] {
            data.push(Arc::new(Rpc::connect(endpoints, self.timeout)?));
        }
        let route = Arc::new(Route {
            map: Some(map.clone()),
            data,
        });
        *self.current.write() = route;
        Ok(map)
    }
}

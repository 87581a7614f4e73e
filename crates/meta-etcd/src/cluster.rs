//! A file system over several etcd clusters: creating it
//! ([`init_cluster`]), adding a data cluster, moving a shard between
//! clusters, settling intents, and its status (what `cairn cluster ...`
//! runs).

use std::time::Duration;

use etcd_model::{Cmp as CompareOp, Compare, Op as TxnOp, Range, Txn};
use meta::{InodeId, Result};
use serde::Serialize;

use crate::keys::Keys;
use crate::record::encode;
use crate::rpc::{GetOptions, Rpc};
use crate::shard::{Fence, ShardMap, MAX_SHARDS};
use crate::store::{check_fsid, root_rec, EtcdMeta, EtcdOptions};
use crate::tx::MAX_TXN_OPS;
use crate::EtcdError;

/// The tags of every key a shard holds.
const SHARD_TAGS: [&[u8; 2]; 5] = [b"i/", b"d/", b"x/", b"o/", b"k/"];

/// Creates file system `fsid` over the data clusters `data` (each a list
/// of member endpoints `http://HOST:PORT`) with its shard map in the
/// control cluster at `control`: `shards` virtual shards placed on the
/// clusters as RFS places successors, each data cluster's fences at
/// epoch 1, the root directory (owned by `root_uid`/`root_gid`) and the
/// inode counter. Refused if the control cluster already holds a map for
/// `fsid` ([`EtcdError::AlreadyInitialized`]). A crash part-way leaves no
/// map: running it again finishes.
///
/// A cluster that does not answer yet (an etcd still starting beside the
/// command, as in a script that starts both) is waited for, up to
/// [`EtcdOptions::op_deadline`].
pub fn init_cluster(
    control: &[String],
    data: &[Vec<String>],
    fsid: &str,
    shards: u32,
    root_uid: u32,
    root_gid: u32,
    opts: &EtcdOptions,
) -> Result<ShardMap> {
    check_fsid(fsid)?;
    if data.is_empty() || data.iter().any(Vec::is_empty) {
        return Err(EtcdError::BadClusterSpec(
            "give at least one data cluster, each with an endpoint",
        )
        .into());
    }
    if shards == 0 || shards > MAX_SHARDS {
        return Err(EtcdError::BadClusterSpec("shards: 1 to 65536").into());
    }
    let keys = Keys::new(fsid);
    let ctl = Rpc::connect(control, opts.rpc_timeout)?;
    if !first_read(&ctl, control, keys.map(), opts)?
        .kvs()
        .is_empty()
    {
        return Err(EtcdError::AlreadyInitialized.into());
    }
    let map = ShardMap::place(data.to_vec(), shards);
    for (c, endpoints) in data.iter().enumerate() {
        let rpc = Rpc::connect(endpoints, opts.rpc_timeout)?;
        first_read(&rpc, endpoints, keys.map(), opts)?;
        let mine: Vec<u32> = (0..shards)
            .filter(|&s| map.shards[s as usize].0 as usize == c)
            .collect();
        for batch in mine.chunks(MAX_TXN_OPS - 1) {
            let ops: Vec<TxnOp> = batch
                .iter()
                .map(|&s| TxnOp::put(keys.fence(s), Fence::open(1).encode(), 0))
                .collect();
            rpc.txn(Txn::new().and_then(ops))?;
        }
        if map.shards[0].0 as usize == c {
            let root = keys.inode(InodeId::ROOT);
            rpc.txn(
                Txn::new()
                    .when([Compare::version(root.clone(), CompareOp::Equal, 0)])
                    .and_then([
                        TxnOp::put(root, encode(&root_rec(root_uid, root_gid)), 0),
                        TxnOp::put(keys.dir_mark(InodeId::ROOT), Vec::new(), 0),
                    ]),
            )?;
        }
    }
    let next = keys.next_ino();
    let done = ctl.txn(
        Txn::new()
            .when([Compare::version(keys.map(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(keys.map(), map.encode(), 0),
                TxnOp::put(next, 2u64.to_le_bytes().to_vec(), 0),
            ]),
    )?;
    if !done.succeeded {
        return Err(EtcdError::AlreadyInitialized.into());
    }
    tracing::info!(
        fsid,
        shards,
        clusters = data.len(),
        "file system created over several etcd clusters"
    );
    Ok(map)
}

/// One member of an etcd cluster, as `cluster status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct MemberHealth {
    pub endpoint: String,
    pub healthy: bool,
    pub leader: bool,
    /// Why it is not healthy.
    pub error: Option<String>,
}

/// One data cluster: its members and how many shards it owns.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterHealth {
    pub index: usize,
    pub members: Vec<MemberHealth>,
    pub shards: u32,
}

/// An intent not finished yet.
#[derive(Debug, Clone, Serialize)]
pub struct IntentInfo {
    pub id: String,
    pub state: &'static str,
    pub owner: String,
}

/// A client marked mounted on the collection board.
#[derive(Debug, Clone, Serialize)]
pub struct MountedClient {
    /// Its chunk-store client number.
    pub client: u64,
    /// Whether the process that mounted it is registered (running and
    /// reaching etcd); if not, collections wait for it until it is
    /// mounted again or forgotten (`cairn cluster forget-client`).
    pub registered: bool,
}

/// What `cairn cluster status` prints.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    pub control: Vec<MemberHealth>,
    pub clusters: Vec<ClusterHealth>,
    /// Per shard: (owning cluster, epoch).
    pub shards: Vec<(u16, u64)>,
    pub intents: Vec<IntentInfo>,
    /// The clients marked mounted, in number order.
    pub mounted: Vec<MountedClient>,
    /// The coordinator that leads (`cairn coord`), if any.
    pub coordinator: Option<crate::Leader>,
}

/// Each member's answer to a status request, one connection per member.
fn members(endpoints: &[String], timeout: Duration) -> Vec<MemberHealth> {
    endpoints
        .iter()
        .map(|ep| {
            let asked =
                Rpc::connect(std::slice::from_ref(ep), timeout).and_then(|rpc| rpc.status(ep));
            match asked {
                Ok(st) => MemberHealth {
                    endpoint: ep.clone(),
                    healthy: st.errors.is_empty(),
                    leader: st.leader,
                    error: (!st.errors.is_empty()).then(|| st.errors.join("; ")),
                },
                Err(e) => MemberHealth {
                    endpoint: ep.clone(),
                    healthy: false,
                    leader: false,
                    error: Some(e.to_string()),
                },
            }
        })
        .collect()
}

impl EtcdMeta {
    /// The control cluster, every data cluster with each member's health,
    /// the placement of every shard, the unfinished intents and the
    /// coordinator that leads.
    pub fn cluster_status(&self, control: &[String]) -> Result<ClusterStatus> {
        let map = self.ring.reload(&self.keys)?;
        let timeout = self.opts.rpc_timeout.min(Duration::from_secs(2));
        let clusters = map
            .clusters
            .iter()
            .enumerate()
            .map(|(index, eps)| ClusterHealth {
                index,
                members: members(eps, timeout),
                shards: map
                    .shards
                    .iter()
                    .filter(|s| usize::from(s.0) == index)
                    .count() as u32,
            })
            .collect();
        let intents = crate::intent::unfinished(self)?
            .into_iter()
            .map(|(id, state, owner)| IntentInfo {
                id: format!("{id:016x}"),
                state,
                owner: format!("{owner:016x}"),
            })
            .collect();
        Ok(ClusterStatus {
            control: members(control, timeout),
            clusters,
            shards: map.shards.clone(),
            intents,
            mounted: self.mounted_status()?,
            coordinator: self.coordinator()?,
        })
    }

    /// Adds the data cluster at `endpoints` to the shard map (it owns no
    /// shard until one is moved to it); returns its index.
    pub fn add_cluster(&self, endpoints: &[String]) -> Result<usize> {
        Rpc::connect(endpoints, self.opts.rpc_timeout)?.get(self.keys.map(), GetOptions::new())?;
        let index = self.update_map(|map| {
            if map.clusters.iter().any(|c| c == endpoints) {
                return Err(EtcdError::BadClusterSpec(
                    "that cluster is in the map already",
                ));
            }
            map.clusters.push(endpoints.to_vec());
            Ok(map.clusters.len() - 1)
        })?;
        self.refresh()?;
        tracing::info!(index, endpoints = endpoints.join(","), "data cluster added");
        Ok(index)
    }

    /// Changes the shard map with one compare-and-swap (again on a
    /// conflict).
    fn update_map<T>(&self, f: impl Fn(&mut ShardMap) -> Result<T, EtcdError>) -> Result<T> {
        let ctl = self.ring.control.as_ref().ok_or(EtcdError::NotSharded)?;
        loop {
            let mut resp = ctl.get(self.keys.map(), GetOptions::new())?;
            let kv = resp.take_kvs().pop().ok_or(EtcdError::NoMap)?;
            let mut map = ShardMap::decode(&kv.value)?;
            let out = f(&mut map)?;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    self.keys.map(),
                    CompareOp::Equal,
                    kv.mod_revision,
                )])
                .and_then([TxnOp::put(self.keys.map(), map.encode(), 0)]);
            if ctl.txn(txn)?.succeeded {
                return Ok(out);
            }
        }
    }

    /// Moves `shard` to data cluster `to`, while clients use it:
    /// 1. bumps the epoch of its fence in the source (every transaction
    ///    that read the old fence fails; clients wait, reloading the map),
    ///    after any intent holding it is settled;
    /// 2. copies its keys, read at the fenced revision, to the target and
    ///    opens the target's fence at the new epoch;
    /// 3. flips the map (owner and epoch, one compare-and-swap);
    /// 4. deletes the keys in the source, leaving its fence marked moved.
    ///
    /// A crash part-way leaves the shard fenced: run the move again.
    pub fn move_shard(&self, shard: u32, to: usize) -> Result<()> {
        let map = self.ring.reload(&self.keys)?;
        let (from, epoch) = map.owner(shard)?;
        if to >= map.clusters.len() {
            return Err(EtcdError::NoSuchCluster(to).into());
        }
        if from == to {
            return Ok(());
        }
        let route = self.ring.route();
        let (src, dst) = (route.rpc(from), route.rpc(to));
        let fence = self.keys.fence(shard);
        // 1. Fence the source.
        let (new_epoch, rev) = loop {
            let mut resp = src.get(fence.clone(), GetOptions::new())?;
            let kv = resp.take_kvs().pop().ok_or(EtcdError::Stale(shard))?;
            let f = Fence::decode(&kv.value)?;
            if f.lock != 0 {
                crate::intent::settle_lock(self, f.lock, shard)?;
                std::thread::sleep(self.pause(10));
                continue;
            }
            let new_epoch = f.epoch.max(epoch) + 1;
            let resp = src.txn(
                Txn::new()
                    .when([Compare::mod_revision(
                        fence.clone(),
                        CompareOp::Equal,
                        kv.mod_revision,
                    )])
                    .and_then([TxnOp::put(
                        fence.clone(),
                        Fence::open(new_epoch).encode(),
                        0,
                    )]),
            )?;
            if resp.succeeded {
                break (new_epoch, resp.revision);
            }
        };
        // 2. Copy at the fenced revision, then open the target.
        let mut copied = 0u64;
        for tag in SHARD_TAGS {
            let (start, end) = self.keys.shard_range(tag, shard, shard + 1);
            let mut batch = Vec::new();
            src.scan(start, &end, rev, usize::MAX, &mut |kv| {
                batch.push(TxnOp::put(kv.key, kv.value, 0));
                if batch.len() == MAX_TXN_OPS - 1 {
                    dst.txn(Txn::new().and_then(std::mem::take(&mut batch)))?;
                }
                copied += 1;
                Ok(true)
            })?;
            if !batch.is_empty() {
                dst.txn(Txn::new().and_then(batch))?;
            }
        }
        dst.txn(Txn::new().and_then([TxnOp::put(
            fence.clone(),
            Fence::open(new_epoch).encode(),
            0,
        )]))?;
        // 3. Flip the map.
        self.update_map(|m| {
            m.shards[shard as usize] = (to as u16, new_epoch);
            Ok(())
        })?;
        // 4. Delete in the source; its fence says the shard left.
        let mut ops: Vec<TxnOp> = SHARD_TAGS
            .iter()
            .map(|tag| {
                let (start, end) = self.keys.shard_range(tag, shard, shard + 1);
                TxnOp::delete(Range {
                    key: start,
                    end: Some(end),
                })
            })
            .collect();
        ops.push(TxnOp::put(
            fence,
            Fence {
                epoch: new_epoch,
                lock: 0,
                moved: true,
            }
            .encode(),
            0,
        ));
        src.txn(Txn::new().and_then(ops))?;
        self.refresh()?;
        tracing::info!(
            shard,
            from,
            to,
            epoch = new_epoch,
            keys = copied,
            "shard moved"
        );
        Ok(())
    }

    /// Settles every unfinished intent that can be settled (rolls
    /// committed ones forward, aborts those of owners gone): what a
    /// coordinator does. Returns how many.
    pub fn settle_intents(&self) -> Result<u64> {
        crate::intent::settle_all(self)
    }

    /// Fault injection for tests: the next operation across clusters stops
    /// after applying its first part (as if the client died there); its
    /// intent stays committed for another client to roll forward.
    pub fn stop_after_first_part(&self) {
        self.stop_at.store(
            crate::intent::STOP_AFTER_PART,
            std::sync::atomic::Ordering::SeqCst,
        );
    }

    /// Fault injection for tests: the next operation across clusters stops
    /// once it holds every lock, before it commits; its intent stays
    /// preparing, for another client to abort once this one is gone.
    pub fn stop_after_locks(&self) {
        self.stop_at.store(
            crate::intent::STOP_AFTER_LOCKS,
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

/// Parses `--data` cluster specs: `HOST:PORT[,HOST:PORT...]` or
/// `etcd://HOST:PORT[,...]` (no file-system id), to endpoints.
pub fn parse_cluster(spec: &str) -> Result<Vec<String>, EtcdError> {
    let hosts = spec
        .strip_prefix("etcd://")
        .unwrap_or(spec)
        .trim_end_matches('/');
    crate::store::parse_url(&format!("etcd://{hosts}/x")).map(|(eps, _)| eps)
}

/// The first read of a cluster, retried while it cannot be reached (up to
/// `opts.op_deadline`), saying once that it waits.
fn first_read(
    rpc: &Rpc,
    endpoints: &[String],
    key: Vec<u8>,
    opts: &EtcdOptions,
) -> Result<crate::rpc::GetResponse> {
    let deadline = std::time::Instant::now() + opts.op_deadline;
    let mut said = false;
    loop {
        match rpc.get(key.clone(), GetOptions::new()) {
            Ok(resp) => return Ok(resp),
            Err(e @ (EtcdError::Rpc(_) | EtcdError::Timeout { .. } | EtcdError::Refused(_)))
                if std::time::Instant::now() < deadline =>
            {
                if !said {
                    tracing::warn!(endpoints = ?endpoints, error = %e, "waiting for etcd to answer");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

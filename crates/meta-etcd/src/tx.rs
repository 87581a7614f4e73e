//! One attempt of one operation: its reads, all at one revision per etcd
//! cluster, each remembered with the key's `mod_revision` (0 for an
//! absent key); the inode records it touched (written back once); and its
//! writes. The attempt ends in one [`Part`] per cluster it touched: one
//! part is one etcd transaction that compares every key read and applies
//! every write ([`Part::into_txn`]); several go through an intent
//! (`intent`). Over several clusters, the first touch of a shard reads
//! its fence (`e/<shard>`), so every part also compares the fences of its
//! shards.

use std::collections::{BTreeMap, HashMap};

use etcd_model::{Cmp as CompareOp, Compare, Op as TxnOp, Range, Txn};
use meta::{FileKind, Inode, InodeId, MetaError, Result, Timestamp};

use crate::keys::Keys;
use crate::record::{decode, dval, dval_decode, encode, Rec};
use crate::route::Route;
use crate::rpc::GetOptions;
use crate::EtcdError;

/// etcd's limit of compares, and of operations, in one transaction
/// (`--max-txn-ops`, 128 by default).
pub const MAX_TXN_OPS: usize = 128;
/// The bytes one transaction may carry: under etcd's 1.5 MiB request
/// limit (`--max-request-bytes`), with room for the request's framing.
pub const MAX_TXN_BYTES: usize = 1_400_000;
/// Directories a rename walks up from its target, comparing each: a
/// target deeper than this cannot be checked in one transaction.
pub const MAX_ANCESTORS: usize = 100;

pub(crate) struct Tx<'a> {
    route: &'a Route,
    pub(crate) keys: &'a Keys,
    /// The client running the attempt (whose orphan marks it writes).
    client: u64,
    /// Per cluster, the revision its reads are at (absent before the first).
    revs: HashMap<usize, i64>,
    /// Keys read, with their cluster, mod_revision and value then.
    read: HashMap<Vec<u8>, Read>,
    /// Keys written (`None`: deleted), applied in key order.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Prefixes deleted whole (an inode's xattrs and orphan marks).
    deleted_prefixes: Vec<Vec<u8>>,
    /// Inode records loaded, with whether they changed.
    cache: HashMap<u64, (Rec, bool)>,
    /// Shards whose fence was read: their cluster and epoch.
    fenced: BTreeMap<u32, (usize, u64)>,
}

/// A key as an attempt read it: its cluster, mod_revision (0: absent) and
/// value.
type Read = (usize, i64, Option<Vec<u8>>);

/// What an attempt does in one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Part {
    pub cluster: usize,
    /// Keys read and the mod_revision they had (0: absent).
    pub compares: Vec<(Vec<u8>, i64)>,
    /// The shards the part touches, with the epoch their fence had.
    pub shards: Vec<(u32, u64)>,
    /// Puts (`Some`) and deletes (`None`).
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Prefixes deleted whole.
    pub prefixes: Vec<Vec<u8>>,
}

impl Part {
    /// The one transaction of a part that is the whole operation: every
    /// key read compared with the mod_revision it had, the result record
    /// absent (a retry whose first try applied fails here, then finds the
    /// record), then every write and the result record under `lease`.
    pub(crate) fn into_txn(
        self,
        op_key: Vec<u8>,
        outcome: Vec<u8>,
        lease: i64,
    ) -> Result<Txn, EtcdError> {
        let mut compares = vec![Compare::mod_revision(op_key.clone(), CompareOp::Equal, 0)];
        let mut bytes = op_key.len() + outcome.len();
        let mut ops = self.ops(&mut bytes);
        for (key, modrev) in self.compares {
            bytes += key.len() + 16;
            compares.push(Compare::mod_revision(key, CompareOp::Equal, modrev));
        }
        ops.push(TxnOp::put(op_key, outcome, lease));
        check_size(compares.len(), ops.len(), bytes)?;
        Ok(Txn::new().when(compares).and_then(ops))
    }

    /// The part's deletes of prefixes, then its writes, as operations.
    pub(crate) fn ops(&self, bytes: &mut usize) -> Vec<TxnOp> {
        let mut ops = Vec::with_capacity(self.writes.len() + self.prefixes.len() + 1);
        for prefix in &self.prefixes {
            *bytes += prefix.len() * 2;
            ops.push(TxnOp::delete(Range::prefix(prefix.clone())));
        }
        for (key, value) in &self.writes {
            *bytes += key.len() + value.as_ref().map_or(0, Vec::len) + 16;
            ops.push(match value {
                Some(v) => TxnOp::put(key.clone(), v.clone(), 0),
                None => TxnOp::delete(Range::key(key.clone())),
            });
        }
        ops
    }
}

/// Whether keys read (cluster, key, mod revision) are still as read.
/// Reads in one cluster are at one revision, a state that was: true
/// without asking. Over several, each cluster is asked (compares only)
/// after every read, so the reads all held at the time of the last one.
pub(crate) fn reads_hold<'k>(
    route: &Route,
    reads: impl Iterator<Item = (usize, &'k [u8], i64)>,
) -> Result<bool> {
    let mut by_cluster: BTreeMap<usize, Vec<Compare>> = BTreeMap::new();
    for (cluster, key, modrev) in reads {
        by_cluster
            .entry(cluster)
            .or_default()
            .push(Compare::mod_revision(key, CompareOp::Equal, modrev));
    }
    if by_cluster.len() < 2 {
        return Ok(true);
    }
    for (cluster, mut compares) in by_cluster {
        compares.sort_by(|a, b| a.key.cmp(&b.key));
        compares.dedup();
        for batch in compares.chunks(MAX_TXN_OPS) {
            let txn = Txn::new().when(batch.to_vec());
            if !route.rpc(cluster).txn(txn)?.succeeded {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

pub(crate) fn check_size(compares: usize, ops: usize, bytes: usize) -> Result<(), EtcdError> {
    if compares > MAX_TXN_OPS || ops > MAX_TXN_OPS || bytes > MAX_TXN_BYTES {
        return Err(EtcdError::TooBig {
            compares,
            ops,
            bytes,
        });
    }
    Ok(())
}

impl<'a> Tx<'a> {
    pub(crate) fn new(route: &'a Route, keys: &'a Keys, client: u64) -> Self {
        Tx {
            route,
            keys,
            client,
            revs: HashMap::new(),
            read: HashMap::new(),
            writes: BTreeMap::new(),
            deleted_prefixes: Vec::new(),
            cache: HashMap::new(),
            fenced: BTreeMap::new(),
        }
    }

    /// A key as this attempt sees it: its own writes first, then etcd at
    /// the attempt's revision in the key's cluster.
    pub(crate) fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        if self.deleted_prefixes.iter().any(|p| key.starts_with(p)) {
            return Ok(None);
        }
        if let Some((_, _, v)) = self.read.get(key) {
            return Ok(v.clone());
        }
        let cluster = self.place_reading(key, true)?;
        self.read_in(cluster, key)
    }

    fn read_in(&mut self, cluster: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some((_, _, v)) = self.read.get(key) {
            return Ok(v.clone());
        }
        let rev = self.revs.get(&cluster).copied().unwrap_or(0);
        let mut resp = self
            .route
            .rpc(cluster)
            .get(key.to_vec(), GetOptions::new().with_revision(rev))?;
        if rev == 0 {
            self.revs.insert(cluster, resp.revision());
        }
        let (modrev, value) = match resp.take_kvs().pop() {
            Some(kv) => (kv.mod_revision, Some(kv.value)),
            None => (0, None),
        };
        self.read
            .insert(key.to_vec(), (cluster, modrev, value.clone()));
        Ok(value)
    }

    /// The same reads in one request: a read-only transaction at the
    /// transaction's revision of `cluster`.
    fn read_both_in(&mut self, cluster: usize, keys: [Vec<u8>; 2]) -> Result<()> {
        let rev = self.revs.get(&cluster).copied().unwrap_or(0);
        let (at, values) = self.route.rpc(cluster).get_many(keys.to_vec(), rev)?;
        self.revs.entry(cluster).or_insert(at);
        for (key, kv) in keys.into_iter().zip(values) {
            let (modrev, value) = match kv {
                Some(kv) => (kv.mod_revision, Some(kv.value)),
                None => (0, None),
            };
            self.read.insert(key, (cluster, modrev, value));
        }
        Ok(())
    }

    /// The cluster of a key; over several clusters, the first touch of its
    /// shard reads the shard's fence (compared like any read): a stale map
    /// fails with [`EtcdError::Stale`], a shard an intent holds with
    /// [`EtcdError::Locked`].
    fn place(&mut self, key: &[u8]) -> Result<usize> {
        self.place_reading(key, false)
    }

    /// [`Tx::place`]; with `read`, a fence read now brings `key` along in
    /// the same request (one round trip, not two, for the first read of a
    /// shard).
    fn place_reading(&mut self, key: &[u8], read: bool) -> Result<usize> {
        let (cluster, shard) = self.route.place(self.keys, key)?;
        if let Some((shard, epoch)) = shard {
            if !self.fenced.contains_key(&shard) {
                let fence = self.keys.fence(shard);
                if read && !self.read.contains_key(&fence) && !self.read.contains_key(key) {
                    self.read_both_in(cluster, [fence.clone(), key.to_vec()])?;
                }
                let value = self.read_in(cluster, &fence)?;
                let fence = Route::check_fence(shard, epoch, value.as_deref())?;
                if fence.lock != 0 {
                    return Err(EtcdError::Locked {
                        shard,
                        intent: fence.lock,
                    }
                    .into());
                }
                self.fenced.insert(shard, (cluster, epoch));
            }
        }
        Ok(cluster)
    }

    pub(crate) fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    pub(crate) fn del(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }

    fn load(&mut self, ino: InodeId) -> Result<&mut (Rec, bool)> {
        if !self.cache.contains_key(&ino.0) {
            let key = self.keys.inode(ino);
            let bytes = self.get(&key)?.ok_or(MetaError::NotFound)?;
            self.cache.insert(ino.0, (decode(ino, &bytes)?, false));
        }
        Ok(self.cache.get_mut(&ino.0).unwrap())
    }

    pub(crate) fn rec(&mut self, ino: InodeId) -> Result<&Rec> {
        Ok(&self.load(ino)?.0)
    }

    /// An inode, to change: written back when the attempt commits.
    pub(crate) fn rec_mut(&mut self, ino: InodeId) -> Result<&mut Rec> {
        let slot = self.load(ino)?;
        slot.1 = true;
        Ok(&mut slot.0)
    }

    pub(crate) fn dir(&mut self, ino: InodeId) -> Result<&Rec> {
        let rec = self.rec(ino)?;
        if !rec.is_dir() {
            return Err(MetaError::NotDir);
        }
        Ok(rec)
    }

    pub(crate) fn entry(
        &mut self,
        parent: InodeId,
        name: &[u8],
    ) -> Result<Option<(InodeId, FileKind)>> {
        let key = self.keys.entry(parent, name);
        match self.get(&key)? {
            Some(v) => Ok(Some(dval_decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Sets an entry, counting it in its directory when it is new.
    pub(crate) fn put_entry(
        &mut self,
        parent: InodeId,
        name: &[u8],
        ino: InodeId,
        kind: FileKind,
    ) -> Result<()> {
        let key = self.keys.entry(parent, name);
        if self.get(&key)?.is_none() {
            self.rec_mut(parent)?.entries += 1;
        }
        self.put(key, dval(ino, kind));
        Ok(())
    }

    pub(crate) fn del_entry(&mut self, parent: InodeId, name: &[u8]) -> Result<()> {
        let key = self.keys.entry(parent, name);
        if self.get(&key)?.is_some() {
            let rec = self.rec_mut(parent)?;
            rec.entries = rec.entries.saturating_sub(1);
        }
        self.del(key);
        Ok(())
    }

    pub(crate) fn touch_dir(&mut self, dir: InodeId, now: Timestamp) -> Result<()> {
        let a = &mut self.rec_mut(dir)?.inode.attr;
        a.mtime = now;
        a.ctime = now;
        Ok(())
    }

    pub(crate) fn add_nlink(&mut self, ino: InodeId, delta: i32) -> Result<()> {
        let a = &mut self.rec_mut(ino)?.inode.attr;
        a.nlink = a
            .nlink
            .checked_add_signed(delta)
            .ok_or(MetaError::Invalid("too many links"))?;
        Ok(())
    }

    pub(crate) fn insert_new(&mut self, rec: Rec) {
        if rec.is_dir() {
            self.put(self.keys.dir_mark(rec.inode.id), Vec::new());
        }
        self.cache.insert(rec.inode.id.0, (rec, true));
    }

    /// Deletes an inode, its xattrs, every client's orphan mark on it and
    /// its directory mark (not its names).
    pub(crate) fn delete_inode(&mut self, ino: InodeId) -> Result<()> {
        let is_dir = self.rec(ino)?.is_dir();
        self.cache.remove(&ino.0);
        self.del(self.keys.inode(ino));
        if is_dir {
            self.del(self.keys.dir_mark(ino));
        }
        for prefix in [self.keys.xattrs(ino), self.keys.orphan_marks(ino)] {
            self.writes.retain(|k, _| !k.starts_with(&prefix));
            self.deleted_prefixes.push(prefix);
        }
        Ok(())
    }

    /// A non-directory lost one name (see `meta`'s redb engine).
    pub(crate) fn drop_link(
        &mut self,
        ino: InodeId,
        keep_orphan: bool,
        now: Timestamp,
    ) -> Result<Inode> {
        let rec = self.rec_mut(ino)?;
        let a = &mut rec.inode.attr;
        a.nlink = a.nlink.saturating_sub(1);
        a.ctime = now;
        let out = rec.inode.clone();
        if out.attr.nlink == 0 {
            if keep_orphan {
                self.put(self.keys.orphan(ino, self.client), Vec::new());
            } else {
                self.delete_inode(ino)?;
            }
        }
        Ok(out)
    }

    /// Whether `dir` is `ancestor` or below it: a walk up the parent
    /// pointers, each record read (so compared by the transaction: a
    /// concurrent rename that moves any of them fails this one).
    pub(crate) fn is_within(&mut self, mut dir: InodeId, ancestor: InodeId) -> Result<bool> {
        for _ in 0..=MAX_ANCESTORS {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == InodeId::ROOT {
                return Ok(false);
            }
            dir = self.rec(dir)?.parent;
        }
        Err(EtcdError::TooDeep(MAX_ANCESTORS).into())
    }

    /// The attempt, one part per cluster it read or wrote in (in cluster
    /// order). Every shard written is fenced too (its fence read now, if
    /// no read touched the shard yet).
    /// Whether every key read is still as read ([`reads_hold`]).
    pub(crate) fn still_holds(&self) -> Result<bool> {
        reads_hold(
            self.route,
            self.read
                .iter()
                .map(|(k, (c, r, _))| (*c, k.as_slice(), *r)),
        )
    }

    pub(crate) fn into_parts(mut self) -> Result<Vec<Part>> {
        for (ino, (rec, dirty)) in std::mem::take(&mut self.cache) {
            if dirty {
                self.writes
                    .insert(self.keys.inode(InodeId(ino)), Some(encode(&rec)));
            }
        }
        let mut parts: BTreeMap<usize, Part> = BTreeMap::new();
        fn part(parts: &mut BTreeMap<usize, Part>, cluster: usize) -> &mut Part {
            parts.entry(cluster).or_insert_with(|| Part {
                cluster,
                ..Part::default()
            })
        }
        for (key, value) in std::mem::take(&mut self.writes) {
            let cluster = self.place(&key)?;
            part(&mut parts, cluster).writes.push((key, value));
        }
        for prefix in std::mem::take(&mut self.deleted_prefixes) {
            let cluster = self.place(&prefix)?;
            part(&mut parts, cluster).prefixes.push(prefix);
        }
        for (key, (cluster, modrev, _)) in self.read {
            part(&mut parts, cluster).compares.push((key, modrev));
        }
        for (shard, (cluster, epoch)) in self.fenced {
            part(&mut parts, cluster).shards.push((shard, epoch));
        }
        let mut parts: Vec<Part> = parts.into_values().collect();
        for p in &mut parts {
            p.compares.sort();
        }
        Ok(parts)
    }
}

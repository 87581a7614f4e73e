//! Reads pinned at one etcd revision per cluster: a [`Reader`] pins the
//! revision its first read in a cluster answered at (so a lookup's three
//! reads agree), and an [`EtcdView`] is a reader pinned in every cluster
//! when the view was taken (an instant of the namespace, as long as etcd
//! keeps those revisions: a compaction past one makes the view's reads
//! fail, never lie). Over several clusters the first read of a shard also
//! reads its fence at the same revision: a stale map fails with
//! [`EtcdError::Stale`] (the caller reloads it and reads again) rather
//! than read a cluster the shard has left. A view does not wait for
//! locks: the parts of an intent apply in an order that never shows a
//! dangling entry. The store's own reads over several clusters use a
//! strict reader ([`Reader::strict`]): linearizable, it settles a
//! committed intent it meets and checks its reads over clusters hold.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use etcd_model::KeyValue;
use meta::{DirEntry, FileKind, Inode, InodeId, MetaError, MetaView, Result};

use crate::keys::{prefix_end, Keys};
use crate::record::{decode, dval_decode, Rec};
use crate::route::Route;
use crate::rpc::{GetOptions, Rpc};
use crate::shard::Fence;
use crate::tx::MAX_TXN_OPS;
use crate::EtcdError;

/// Steps a parent-pointer walk takes over several clusters before it
/// calls the pointers a cycle (a path through the kernel is at most 4096
/// bytes, so at most 2048 levels).
const MAX_WALK: u64 = 1 << 16;

pub(crate) struct Reader<'a> {
    route: &'a Route,
    keys: &'a Keys,
    revs: HashMap<usize, i64>,
    checked: HashSet<u32>,
    /// Per cluster, its fences at the reader's revision (whole scans).
    fences: HashMap<usize, HashMap<u32, Fence>>,
    /// A linearizable reader's control cluster ([`Reader::strict`]).
    control: Option<&'a Rpc>,
    /// A linearizable reader's point reads: cluster, key, mod revision.
    seen: Vec<(usize, Vec<u8>, i64)>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(route: &'a Route, keys: &'a Keys, revs: HashMap<usize, i64>) -> Self {
        Reader {
            route,
            keys,
            revs,
            checked: HashSet::new(),
            fences: HashMap::new(),
            control: None,
            seen: Vec::new(),
        }
    }

    /// A reader whose answers are linearizable over several clusters: a
    /// shard locked by an intent no longer preparing (parts of it may be
    /// applied) fails with [`EtcdError::Locked`] (settle it, read again),
    /// and [`Reader::still_holds`] tells whether reads made in several
    /// clusters, each at its own time, still hold together.
    pub(crate) fn strict(route: &'a Route, keys: &'a Keys, control: &'a Rpc) -> Self {
        Reader {
            control: Some(control),
            ..Reader::new(route, keys, HashMap::new())
        }
    }

    fn cluster(&mut self, key: &[u8]) -> Result<usize> {
        let (cluster, shard) = self.route.place(self.keys, key)?;
        if let Some((shard, epoch)) = shard {
            if self.checked.insert(shard) {
                let fence = self.value_in(cluster, self.keys.fence(shard))?;
                self.check(shard, epoch, fence.as_deref())?;
            }
        }
        Ok(cluster)
    }

    /// A shard's fence as read: the epoch the route expects, and no lock
    /// but a preparing intent's.
    fn check(&mut self, shard: u32, epoch: u64, fence: Option<&[u8]>) -> Result<()> {
        let fence = Route::check_fence(shard, epoch, fence)?;
        if fence.lock != 0 {
            self.check_lock(shard, fence.lock)?;
        }
        Ok(())
    }

    /// A lock read through by a strict reader: fine while its intent is
    /// preparing (nothing of it is applied; it is read after the fence,
    /// so it was preparing when the fence was read), else `Locked`.
    fn check_lock(&mut self, shard: u32, intent: u64) -> Result<()> {
        let Some(ctl) = self.control else {
            return Ok(());
        };
        let mut resp = ctl.get(self.keys.intent(intent), GetOptions::new())?;
        match resp.take_kvs().pop() {
            Some(kv) if crate::intent::preparing(&kv.value)? => Ok(()),
            _ => Err(EtcdError::Locked { shard, intent }.into()),
        }
    }

    /// Whether a strict reader's reads still hold (see [`Tx::still_holds`]).
    ///
    /// [`Tx::still_holds`]: crate::tx::Tx::still_holds
    pub(crate) fn still_holds(&self) -> Result<bool> {
        crate::tx::reads_hold(
            self.route,
            self.seen.iter().map(|(c, k, r)| (*c, k.as_slice(), *r)),
        )
    }

    fn value_in(&mut self, cluster: usize, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let rev = self.revs.get(&cluster).copied().unwrap_or(0);
        let mut resp = self
            .route
            .rpc(cluster)
            .get(key.clone(), GetOptions::new().with_revision(rev))?;
        if rev == 0 {
            self.revs.insert(cluster, resp.revision());
        }
        let kv = resp.take_kvs().pop();
        self.saw(cluster, key, kv.as_ref().map_or(0, |kv| kv.mod_revision));
        Ok(kv.map(|kv| kv.value))
    }

    /// Remembers a strict reader's point read (its key's mod revision, 0
    /// for absent), for [`Reader::still_holds`].
    fn saw(&mut self, cluster: usize, key: Vec<u8>, mod_revision: i64) {
        if self.control.is_some() {
            self.seen.push((cluster, key, mod_revision));
        }
    }

    /// The value of `key`; the first read of a shard brings its fence along
    /// in one read-only transaction (one round trip, not two), checked
    /// before the value is trusted.
    pub(crate) fn value(&mut self, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let (cluster, shard) = self.route.place(self.keys, &key)?;
        let Some((shard, epoch)) = shard.filter(|(s, _)| !self.checked.contains(s)) else {
            return self.value_in(cluster, key);
        };
        let fence_key = self.keys.fence(shard);
        let rev = self.revs.get(&cluster).copied().unwrap_or(0);
        let (at, mut values) = self
            .route
            .rpc(cluster)
            .get_many(vec![fence_key.clone(), key.clone()], rev)?;
        self.revs.entry(cluster).or_insert(at);
        let value = values.pop().flatten();
        let fence = values.pop().flatten();
        self.saw(
            cluster,
            fence_key,
            fence.as_ref().map_or(0, |kv| kv.mod_revision),
        );
        self.saw(cluster, key, value.as_ref().map_or(0, |kv| kv.mod_revision));
        self.checked.insert(shard);
        self.check(shard, epoch, fence.map(|kv| kv.value).as_deref())?;
        Ok(value.map(|kv| kv.value))
    }

    pub(crate) fn rec(&mut self, ino: InodeId) -> Result<Rec> {
        let bytes = self
            .value(self.keys.inode(ino))?
            .ok_or(MetaError::NotFound)?;
        Ok(decode(ino, &bytes)?)
    }

    pub(crate) fn get(&mut self, ino: InodeId) -> Result<Inode> {
        Ok(self.rec(ino)?.inode)
    }

    /// [`Reader::get`] of each of `inos`: one read-only transaction per
    /// cluster (and per [`MAX_TXN_OPS`] inodes) instead of a request per
    /// inode. The outer error is the store's (retried by the caller); a
    /// missing or damaged inode is its own answer.
    pub(crate) fn get_many(&mut self, inos: &[InodeId]) -> Result<Vec<Result<Inode>>> {
        let mut by_cluster: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, ino) in inos.iter().enumerate() {
            let cluster = self.cluster(&self.keys.inode(*ino))?;
            by_cluster.entry(cluster).or_default().push(i);
        }
        let mut out: Vec<Result<Inode>> = inos.iter().map(|_| Err(MetaError::NotFound)).collect();
        for (cluster, idx) in by_cluster {
            for part in idx.chunks(MAX_TXN_OPS) {
                let keys: Vec<Vec<u8>> = part.iter().map(|&i| self.keys.inode(inos[i])).collect();
                let rev = self.revs.get(&cluster).copied().unwrap_or(0);
                let (at, values) = self.route.rpc(cluster).get_many(keys.clone(), rev)?;
                self.revs.entry(cluster).or_insert(at);
                for ((&i, key), value) in part.iter().zip(keys).zip(values) {
                    self.saw(cluster, key, value.as_ref().map_or(0, |kv| kv.mod_revision));
                    out[i] = match value {
                        None => Err(MetaError::NotFound),
                        Some(kv) => decode(inos[i], &kv.value)
                            .map(|r| r.inode)
                            .map_err(Into::into),
                    };
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn dir(&mut self, ino: InodeId) -> Result<Rec> {
        let rec = self.rec(ino)?;
        if !rec.is_dir() {
            return Err(MetaError::NotDir);
        }
        Ok(rec)
    }

    pub(crate) fn entry(
        &mut self,
        dir: InodeId,
        name: &[u8],
    ) -> Result<Option<(InodeId, FileKind)>> {
        match self.value(self.keys.entry(dir, name))? {
            Some(v) => Ok(Some(dval_decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Two reads: the entry, then its inode. Only a live directory holds
    /// entries, so the parent is read only when the entry is missing (to
    /// answer `NotDir` for a non-directory).
    pub(crate) fn lookup(&mut self, parent: InodeId, name: &[u8]) -> Result<Inode> {
        let Some((ino, _)) = self.entry(parent, name)? else {
            self.dir(parent)?;
            return Err(MetaError::NotFound);
        };
        match self.rec(ino) {
            Err(MetaError::NotFound) => Err(EtcdError::DanglingEntry(ino.0).into()),
            other => Ok(other?.inode),
        }
    }

    /// Every key in `[start, end)` (within one shard, or one run of
    /// `Route::runs` when `cluster` is given) at this reader's revision.
    pub(crate) fn scan(
        &mut self,
        start: Vec<u8>,
        end: &[u8],
        limit: usize,
        f: &mut dyn FnMut(KeyValue) -> Result<bool>,
    ) -> Result<()> {
        let cluster = self.cluster(&start)?;
        self.scan_in(cluster, start, end, limit, f)
    }

    fn scan_in(
        &mut self,
        cluster: usize,
        start: Vec<u8>,
        end: &[u8],
        limit: usize,
        f: &mut dyn FnMut(KeyValue) -> Result<bool>,
    ) -> Result<()> {
        if !self.revs.contains_key(&cluster) {
            // Pin first, so that the pages of the scan agree.
            self.value_in(cluster, self.keys.next_ino())?;
        }
        let rev = self.revs[&cluster];
        let mut failed = None;
        self.route
            .rpc(cluster)
            .scan(start, end, rev, limit, &mut |kv| match f(kv) {
                Ok(go) => Ok(go),
                Err(e) => {
                    failed = Some(e);
                    Ok(false)
                }
            })?;
        failed.map_or(Ok(()), Err)
    }

    /// Every key under `tag` (`i/`, `o/`, ...) in every shard, shard by
    /// shard in number order.
    pub(crate) fn scan_all(
        &mut self,
        tag: &[u8; 2],
        f: &mut dyn FnMut(KeyValue) -> Result<bool>,
    ) -> Result<()> {
        for run in self.route.runs(self.keys, tag) {
            let (cluster, start, end) = (run.cluster, run.start.clone(), run.end.clone());
            self.check_run(&run)?;
            let mut stop = false;
            self.scan_in(cluster, start, &end, usize::MAX, &mut |kv| {
                let go = f(kv)?;
                stop = !go;
                Ok(go)
            })?;
            if stop {
                break;
            }
        }
        Ok(())
    }

    /// Every fence in `cluster`, read once per reader at the cluster's
    /// revision (one range read).
    fn fences(&mut self, cluster: usize) -> Result<&HashMap<u32, Fence>> {
        if !self.fences.contains_key(&cluster) {
            if !self.revs.contains_key(&cluster) {
                self.value_in(cluster, self.keys.next_ino())?;
            }
            let rev = self.revs[&cluster];
            let prefix = self.keys.fences();
            let mut fences = HashMap::new();
            let keys = self.keys;
            self.route.rpc(cluster).scan(
                prefix.clone(),
                &prefix_end(&prefix),
                rev,
                usize::MAX,
                &mut |kv| {
                    let shard = keys.shard_of_fence(&kv.key).ok_or(EtcdError::BadFence)?;
                    fences.insert(shard, Fence::decode(&kv.value)?);
                    Ok(true)
                },
            )?;
            self.fences.insert(cluster, fences);
        }
        Ok(&self.fences[&cluster])
    }

    /// The fences of a run's shards: [`EtcdError::Stale`] unless all are
    /// the map's.
    fn check_run(&mut self, run: &crate::route::Run) -> Result<()> {
        if run.shards.is_empty() {
            return Ok(());
        }
        let fences = self.fences(run.cluster)?;
        for &(shard, epoch) in &run.shards {
            let fence = fences.get(&shard).map(Fence::encode);
            Route::check_fence(shard, epoch, fence.as_deref())?;
        }
        Ok(())
    }

    /// Whether `cluster` holds the keys of exactly the shards the map
    /// gives it: a fence for each at the map's epoch, and no other fence
    /// but those of shards that moved away (whose keys went with the
    /// mark). Then one range of a tag there is those shards' keys.
    fn holds_only_its_own(&mut self, cluster: usize) -> Result<bool> {
        let Some(map) = self.route.map.clone() else {
            return Ok(true);
        };
        let fences = self.fences(cluster)?;
        let own = map
            .shards
            .iter()
            .enumerate()
            .filter(|(_, (c, _))| usize::from(*c) == cluster);
        let mine_ok = own.clone().all(|(s, &(_, epoch))| {
            fences
                .get(&(s as u32))
                .is_some_and(|f| f.epoch == epoch && !f.moved)
        });
        let others_gone = fences.iter().all(|(&s, f)| {
            f.moved
                || map
                    .shards
                    .get(s as usize)
                    .is_some_and(|&(c, _)| usize::from(c) == cluster)
        });
        Ok(mine_ok && others_gone)
    }

    /// The number of keys under `tag` in every shard: one count per
    /// cluster that holds only its own shards' keys, one per run of
    /// shards elsewhere (a shard moving in or out).
    pub(crate) fn count(&mut self, tag: &[u8; 2]) -> Result<u64> {
        let mut ranges = Vec::new();
        let runs = self.route.runs(self.keys, tag);
        for cluster in 0..self.route.data.len() {
            if self.route.map.is_some() && self.holds_only_its_own(cluster)? {
                let (start, end) = self.keys.shard_range(tag, 0, crate::shard::MAX_SHARDS);
                ranges.push((cluster, start, end));
                continue;
            }
            for run in runs.iter().filter(|r| r.cluster == cluster) {
                self.check_run(run)?;
                ranges.push((cluster, run.start.clone(), run.end.clone()));
            }
        }
        let mut n = 0;
        for (cluster, start, end) in ranges {
            let rev = self.revs.get(&cluster).copied().unwrap_or(0);
            let resp = self.route.rpc(cluster).get(
                start,
                GetOptions::new()
                    .with_range(end)
                    .with_revision(rev)
                    .with_count_only(),
            )?;
            if rev == 0 {
                self.revs.insert(cluster, resp.revision());
            }
            n += resp.count() as u64;
        }
        Ok(n)
    }

    pub(crate) fn entries(&mut self, dir: InodeId) -> Result<Vec<DirEntry>> {
        self.dir(dir)?;
        let prefix = self.keys.entries(dir);
        let keys = self.keys;
        let mut out = Vec::new();
        self.scan(
            prefix.clone(),
            &prefix_end(&prefix),
            usize::MAX,
            &mut |kv| {
                let (ino, kind) = dval_decode(&kv.value)?;
                let name = keys.name_of(&kv.key).unwrap_or_default().to_vec();
                out.push(DirEntry { name, ino, kind });
                Ok(true)
            },
        )?;
        Ok(out)
    }

    pub(crate) fn xattrs(&mut self, ino: InodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.rec(ino)?;
        let prefix = self.keys.xattrs(ino);
        let keys = self.keys;
        let mut out = Vec::new();
        self.scan(
            prefix.clone(),
            &prefix_end(&prefix),
            usize::MAX,
            &mut |kv| {
                let name = keys.name_of(&kv.key).unwrap_or_default().to_vec();
                out.push((name, kv.value));
                Ok(true)
            },
        )?;
        Ok(out)
    }

    pub(crate) fn for_each(&mut self, f: &mut dyn FnMut(&Inode)) -> Result<()> {
        let keys = self.keys;
        self.scan_all(b"i/", &mut |kv| {
            let rec = crate::ops::inode_of(keys, &kv.key, &kv.value)?;
            f(&rec.inode);
            Ok(true)
        })
    }

    /// The name `ino` has in `dir`, if any: a scan of `dir`'s entries.
    fn name_in(&mut self, dir: InodeId, ino: InodeId) -> Result<Option<Vec<u8>>> {
        let prefix = self.keys.entries(dir);
        let keys = self.keys;
        let mut found = None;
        self.scan(
            prefix.clone(),
            &prefix_end(&prefix),
            usize::MAX,
            &mut |kv| {
                if dval_decode(&kv.value)?.0 == ino {
                    found = keys.name_of(&kv.key).map(<[u8]>::to_vec);
                    return Ok(false);
                }
                Ok(true)
            },
        )?;
        Ok(found)
    }

    /// See [`meta::MetaStore::path_of`]: parent pointers walked up, in a
    /// loop bounded by the number of directories.
    pub(crate) fn path_of(&mut self, ino: InodeId) -> Result<Option<Vec<Vec<u8>>>> {
        let mut rec = self.rec(ino)?;
        // The walk's bound: the number of directories (one count) on one
        // cluster; over several, where counting reads every run of shards,
        // a fixed bound far past any path the kernel can name.
        let dirs = match self.route.map {
            None => self.count(b"k/")?,
            Some(_) => MAX_WALK,
        };
        let mut names = Vec::new();
        let mut at = ino;
        for _ in 0..=dirs {
            if at == InodeId::ROOT {
                names.reverse();
                return Ok(Some(names));
            }
            if rec.parent.0 == 0 {
                return Ok(None);
            }
            let Some(name) = self.name_in(rec.parent, at)? else {
                return Ok(None);
            };
            names.push(name);
            at = rec.parent;
            rec = match self.rec(at) {
                Ok(r) => r,
                Err(MetaError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        Err(EtcdError::ParentCycle(ino.0).into())
    }
}

/// See [`meta::MetaStore::view`].
pub(crate) struct EtcdView {
    route: Arc<Route>,
    keys: Keys,
    revs: HashMap<usize, i64>,
}

impl EtcdView {
    /// A view pinned now in every cluster.
    pub(crate) fn new(route: Arc<Route>, keys: Keys) -> Result<Self> {
        let mut revs = HashMap::new();
        for (cluster, rpc) in route.data.iter().enumerate() {
            let resp = rpc.get(keys.next_ino(), GetOptions::new())?;
            revs.insert(cluster, resp.revision());
        }
        Ok(EtcdView { route, keys, revs })
    }

    fn reader(&self) -> Reader<'_> {
        Reader::new(&self.route, &self.keys, self.revs.clone())
    }
}

impl MetaView for EtcdView {
    fn get(&self, ino: InodeId) -> Result<Inode> {
        self.reader().get(ino)
    }

    fn entries(&self, dir: InodeId) -> Result<Vec<DirEntry>> {
        self.reader().entries(dir)
    }

    fn xattrs(&self, ino: InodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.reader().xattrs(ino)
    }

    fn for_each_inode(&self, f: &mut dyn FnMut(&Inode)) -> Result<()> {
        self.reader().for_each(f)
    }
}

//! Reads pinned at one etcd revision: a [`Reader`] pins the revision its
//! first read answered at (so a lookup's three reads agree), and an
//! [`EtcdView`] is a reader pinned when the view was taken (a consistent
//! instant of the whole namespace, as long as etcd keeps that revision:
//! a compaction past it makes the view's reads fail, never lie).

use std::sync::Arc;

use etcd_client::{GetOptions, KeyValue};
use meta::{DirEntry, FileKind, Inode, InodeId, MetaError, MetaView, Result};

use crate::keys::{prefix_end, Keys};
use crate::record::{decode, dval_decode, Rec};
use crate::rpc::Rpc;
use crate::EtcdError;

pub(crate) struct Reader<'a> {
    rpc: &'a Rpc,
    keys: &'a Keys,
    rev: i64,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(rpc: &'a Rpc, keys: &'a Keys, rev: i64) -> Self {
        Reader { rpc, keys, rev }
    }

    pub(crate) fn value(&mut self, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let mut resp = self
            .rpc
            .get(key, GetOptions::new().with_revision(self.rev))?;
        if self.rev == 0 {
            self.rev = resp.header().map_or(0, |h| h.revision());
        }
        Ok(resp.take_kvs().pop().map(|kv| kv.into_key_value().1))
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

    /// Every key in `[start, end)` at this reader's revision.
    pub(crate) fn scan(
        &mut self,
        start: Vec<u8>,
        end: &[u8],
        limit: usize,
        f: &mut dyn FnMut(KeyValue) -> Result<bool>,
    ) -> Result<()> {
        if self.rev == 0 {
            // Pin first, so that the pages of the scan agree.
            self.value(self.keys.next_ino())?;
        }
        let mut failed = None;
        self.rpc
            .scan(start, end, self.rev, limit, &mut |kv| match f(kv) {
                Ok(go) => Ok(go),
                Err(e) => {
                    failed = Some(e);
                    Ok(false)
                }
            })?;
        failed.map_or(Ok(()), Err)
    }

    pub(crate) fn count(&mut self, prefix: Vec<u8>) -> Result<u64> {
        let end = prefix_end(&prefix);
        let resp = self.rpc.get(
            prefix,
            GetOptions::new()
                .with_range(end)
                .with_revision(self.rev)
                .with_count_only(),
        )?;
        if self.rev == 0 {
            self.rev = resp.header().map_or(0, |h| h.revision());
        }
        Ok(resp.count() as u64)
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
                let (ino, kind) = dval_decode(kv.value())?;
                let name = keys.name_of(kv.key()).unwrap_or_default().to_vec();
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
                let name = keys.name_of(kv.key()).unwrap_or_default().to_vec();
                out.push((name, kv.into_key_value().1));
                Ok(true)
            },
        )?;
        Ok(out)
    }

    pub(crate) fn for_each(&mut self, f: &mut dyn FnMut(&Inode)) -> Result<()> {
        let prefix = self.keys.inodes();
        let keys = self.keys;
        self.scan(
            prefix.clone(),
            &prefix_end(&prefix),
            usize::MAX,
            &mut |kv| {
                let rec = crate::ops::inode_of(keys, kv.key(), kv.value())?;
                f(&rec.inode);
                Ok(true)
            },
        )
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
                if dval_decode(kv.value())?.0 == ino {
                    found = keys.name_of(kv.key()).map(<[u8]>::to_vec);
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
        let dirs = self.count(self.keys.dir_marks())?;
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
    rpc: Arc<Rpc>,
    keys: Keys,
    rev: i64,
}

impl EtcdView {
    pub(crate) fn new(rpc: Arc<Rpc>, keys: Keys, rev: i64) -> Self {
        EtcdView { rpc, keys, rev }
    }

    fn reader(&self) -> Reader<'_> {
        Reader::new(&self.rpc, &self.keys, self.rev)
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

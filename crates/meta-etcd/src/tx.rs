//! One attempt of one operation: its reads, all at one etcd revision,
//! each remembered with the key's `mod_revision` (0 for an absent key);
//! the inode records it touched (written back once); and its writes. The
//! attempt ends in one etcd transaction that compares every key read and
//! applies every write ([`Tx::into_txn`]).

use std::collections::{BTreeMap, HashMap};

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use meta::{FileKind, Inode, InodeId, MetaError, Result, Timestamp};

use crate::keys::Keys;
use crate::record::{decode, dval, dval_decode, encode, Rec};
use crate::rpc::Rpc;
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
    rpc: &'a Rpc,
    pub(crate) keys: &'a Keys,
    /// The client running the attempt (whose orphan marks it writes).
    client: u64,
    /// The revision every read of the attempt is at (0 before the first).
    rev: i64,
    /// Keys read, with their mod_revision and value then.
    read: HashMap<Vec<u8>, (i64, Option<Vec<u8>>)>,
    /// Keys written (`None`: deleted), applied in key order.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Prefixes deleted whole (an inode's xattrs).
    deleted_prefixes: Vec<Vec<u8>>,
    /// Inode records loaded, with whether they changed.
    cache: HashMap<u64, (Rec, bool)>,
}

impl<'a> Tx<'a> {
    pub(crate) fn new(rpc: &'a Rpc, keys: &'a Keys, client: u64) -> Self {
        Tx {
            rpc,
            keys,
            client,
            rev: 0,
            read: HashMap::new(),
            writes: BTreeMap::new(),
            deleted_prefixes: Vec::new(),
            cache: HashMap::new(),
        }
    }

    /// A key as this attempt sees it: its own writes first, then etcd at
    /// the attempt's revision.
    pub(crate) fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        if self.deleted_prefixes.iter().any(|p| key.starts_with(p)) {
            return Ok(None);
        }
        if let Some((_, v)) = self.read.get(key) {
            return Ok(v.clone());
        }
        let mut resp = self
            .rpc
            .get(key.to_vec(), GetOptions::new().with_revision(self.rev))?;
        if self.rev == 0 {
            self.rev = resp.header().map_or(0, |h| h.revision());
        }
        let (modrev, value) = match resp.take_kvs().pop() {
            Some(kv) => (kv.mod_revision(), Some(kv.into_key_value().1)),
            None => (0, None),
        };
        self.read.insert(key.to_vec(), (modrev, value.clone()));
        Ok(value)
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

    /// The one etcd transaction of this attempt: every key read compared
    /// with the mod_revision it had, the result record absent (a retry
    /// whose first try applied fails here, then finds the record), then
    /// every write and the result record under `lease`.
    pub(crate) fn into_txn(
        mut self,
        op_key: Vec<u8>,
        outcome: Vec<u8>,
        lease: i64,
    ) -> Result<Txn, EtcdError> {
        for (ino, (rec, dirty)) in std::mem::take(&mut self.cache) {
            if dirty {
                self.writes
                    .insert(self.keys.inode(InodeId(ino)), Some(encode(&rec)));
            }
        }
        let mut compares = vec![Compare::mod_revision(op_key.clone(), CompareOp::Equal, 0)];
        let mut bytes = op_key.len() + outcome.len();
        for (key, (modrev, _)) in self.read {
            bytes += key.len() + 16;
            compares.push(Compare::mod_revision(key, CompareOp::Equal, modrev));
        }
        let mut ops = Vec::with_capacity(self.writes.len() + 2);
        for prefix in self.deleted_prefixes {
            bytes += prefix.len() * 2;
            ops.push(TxnOp::delete(
                prefix,
                Some(DeleteOptions::new().with_prefix()),
            ));
        }
        for (key, value) in self.writes {
            bytes += key.len() + value.as_ref().map_or(0, Vec::len) + 16;
            ops.push(match value {
                Some(v) => TxnOp::put(key, v, None),
                None => TxnOp::delete(key, None),
            });
        }
        ops.push(TxnOp::put(
            op_key,
            outcome,
            Some(PutOptions::new().with_lease(lease)),
        ));
        if compares.len() > MAX_TXN_OPS || ops.len() > MAX_TXN_OPS || bytes > MAX_TXN_BYTES {
            return Err(EtcdError::TooBig {
                compares: compares.len(),
                ops: ops.len(),
                bytes,
            });
        }
        Ok(Txn::new().when(compares).and_then(ops))
    }
}

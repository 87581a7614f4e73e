//! The [`MetaStore`] operations over etcd. Each mutation is the redb
//! engine's logic run through a [`Tx`] ([`EtcdMeta::mutate`]); each read
//! is one or a few reads at one revision.

use meta::{
    Attr, Content, ContentHints, Counts, DirEntry, FileKind, Inode, InodeId, MetaError, MetaStore,
    MetaView, NewInode, PathFound, RenameFlags, Result, SetAttr, Timestamp, XattrChange,
    XattrFlags,
};

use crate::keys::{key_after, prefix_end};
use crate::record::{decode, dval_decode, Rec};
use crate::store::EtcdMeta;
use crate::view::EtcdView;

/// The largest extended-attribute value (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 64 << 10;
/// Extended attributes one `create` or `update` may carry (an inherited
/// ACL pair and a policy are three).
pub const MAX_OP_XATTRS: usize = 16;
/// The largest inline content (a small file's bytes, a symlink target):
/// with [`MAX_OP_XATTRS`] values at their largest, a create stays under
/// etcd's request limit.
pub const MAX_INLINE: usize = 128 << 10;

use meta::rules::check_name;

/// [`meta::rules::check_xattr_name`], and a value within what one etcd
/// request may carry.
fn check_xattr(name: &[u8], value: Option<&[u8]>) -> Result<()> {
    meta::rules::check_xattr_name(name)?;
    if value.is_some_and(|v| v.len() > XATTR_SIZE_MAX) {
        return Err(MetaError::Invalid("extended-attribute value over 64 KiB"));
    }
    Ok(())
}

/// [`meta::rules::new_size`], and inline content within [`MAX_INLINE`].
fn new_size(new: &NewInode) -> Result<u64> {
    if matches!(&new.content, Content::Inline(b) if b.len() > MAX_INLINE) {
        return Err(MetaError::Invalid("inline content over 128 KiB"));
    }
    meta::rules::new_size(new)
}

impl MetaStore for EtcdMeta {
    fn get(&self, ino: InodeId) -> Result<Inode> {
        self.read(|r| r.get(ino))
    }

    fn get_many(&self, inos: &[InodeId]) -> Vec<Result<Inode>> {
        match self.read(|r| r.get_many(inos)) {
            Ok(each) => each,
            // The store failed (not one inode): the first gets its error,
            // the others one that names it.
            Err(first) => {
                let last = first.to_string();
                let mut out = vec![Err(first)];
                out.extend(inos.iter().skip(1).map(|_| {
                    Err(MetaError::Remote(Box::new(crate::EtcdError::Unavailable {
                        after: std::time::Duration::ZERO,
                        last: last.clone(),
                    })))
                }));
                out.truncate(inos.len());
                out
            }
        }
    }

    fn lookup(&self, parent: InodeId, name: &[u8]) -> Result<Inode> {
        check_name(name)?;
        self.read(|r| r.lookup(parent, name))
    }

    fn create(&self, parent: InodeId, name: &[u8], new: NewInode, now: Timestamp) -> Result<Inode> {
        check_name(name)?;
        let size = new_size(&new)?;
        if new.xattrs.len() > MAX_OP_XATTRS {
            return Err(MetaError::Invalid("too many extended attributes"));
        }
        for (xattr, value) in &new.xattrs {
            check_xattr(xattr, Some(value))?;
        }
        // Taken once: a retry reuses it, a failure wastes it.
        let mut ino = None;
        self.mutate(|tx| {
            tx.dir(parent)?;
            if tx.entry(parent, name)?.is_some() {
                return Err(MetaError::Exists);
            }
            let id = match ino {
                Some(id) => id,
                None => *ino.insert(self.alloc_ino(parent, new.kind == FileKind::Dir)?),
            };
            let is_dir = new.kind == FileKind::Dir;
            let rec = Rec {
                inode: Inode {
                    id,
                    attr: Attr {
                        kind: new.kind,
                        perm: new.perm & 0o7777,
                        uid: new.uid,
                        gid: new.gid,
                        size,
                        nlink: if is_dir { 2 } else { 1 },
                        rdev: new.rdev,
                        atime: now,
                        mtime: now,
                        ctime: now,
                        crtime: now,
                    },
                    content: new.content.clone(),
                },
                parent,
                entries: 0,
            };
            let out = rec.inode.clone();
            tx.put_entry(parent, name, id, new.kind)?;
            if is_dir {
                tx.add_nlink(parent, 1)?;
            }
            tx.touch_dir(parent, now)?;
            tx.insert_new(rec);
            for (xattr, value) in &new.xattrs {
                tx.put(tx.keys.xattr(id, xattr), value.clone());
            }
            Ok(out)
        })
    }

    fn link(
        &self,
        ino: InodeId,
        new_parent: InodeId,
        new_name: &[u8],
        now: Timestamp,
    ) -> Result<Inode> {
        check_name(new_name)?;
        self.mutate(|tx| {
            let rec = tx.rec(ino)?;
            if rec.is_dir() {
                return Err(MetaError::Invalid("a directory cannot be hard-linked"));
            }
            if rec.inode.attr.nlink == 0 {
                return Err(MetaError::NotFound);
            }
            let kind = rec.inode.attr.kind;
            tx.dir(new_parent)?;
            if tx.entry(new_parent, new_name)?.is_some() {
                return Err(MetaError::Exists);
            }
            tx.put_entry(new_parent, new_name, ino, kind)?;
            tx.touch_dir(new_parent, now)?;
            tx.add_nlink(ino, 1)?;
            let rec = tx.rec_mut(ino)?;
            rec.inode.attr.ctime = now;
            rec.parent = new_parent;
            Ok(rec.inode.clone())
        })
    }

    fn unlink(
        &self,
        parent: InodeId,
        name: &[u8],
        keep_orphan: bool,
        now: Timestamp,
    ) -> Result<Inode> {
        check_name(name)?;
        self.mutate(|tx| {
            tx.dir(parent)?;
            let (ino, kind) = tx.entry(parent, name)?.ok_or(MetaError::NotFound)?;
            if kind == FileKind::Dir {
                return Err(MetaError::IsDir);
            }
            tx.del_entry(parent, name)?;
            tx.touch_dir(parent, now)?;
            tx.drop_link(ino, keep_orphan, now)
        })
    }

    fn rmdir(&self, parent: InodeId, name: &[u8], now: Timestamp) -> Result<()> {
        check_name(name)?;
        self.mutate(|tx| {
            tx.dir(parent)?;
            let (ino, kind) = tx.entry(parent, name)?.ok_or(MetaError::NotFound)?;
            if kind != FileKind::Dir {
                return Err(MetaError::NotDir);
            }
            if tx.rec(ino)?.entries != 0 {
                return Err(MetaError::NotEmpty);
            }
            tx.del_entry(parent, name)?;
            tx.add_nlink(parent, -1)?;
            tx.touch_dir(parent, now)?;
            tx.delete_inode(ino)
        })
    }

    fn rename(
        &self,
        parent: InodeId,
        name: &[u8],
        new_parent: InodeId,
        new_name: &[u8],
        flags: RenameFlags,
        keep_orphan: &dyn Fn(InodeId) -> bool,
        now: Timestamp,
    ) -> Result<Option<Inode>> {
        check_name(name)?;
        check_name(new_name)?;
        if flags.exchange && flags.noreplace {
            return Err(MetaError::Invalid("RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        self.mutate(|tx| {
            tx.dir(parent)?;
            tx.dir(new_parent)?;
            let (src, src_kind) = tx.entry(parent, name)?.ok_or(MetaError::NotFound)?;
            let dst = tx.entry(new_parent, new_name)?;
            if flags.noreplace && dst.is_some() {
                return Err(MetaError::Exists);
            }
            if flags.exchange && dst.is_none() {
                return Err(MetaError::NotFound);
            }
            if dst.is_some_and(|(d, _)| d == src) {
                return Ok(None);
            }
            let src_dir = src_kind == FileKind::Dir;
            // The target's ancestors, each read and so compared: a rename
            // elsewhere that moves one of them fails this transaction.
            if src_dir && tx.is_within(new_parent, src)? {
                return Err(MetaError::Invalid("a directory cannot move into itself"));
            }
            if flags.exchange {
                let (dst, dst_kind) = dst.unwrap();
                let dst_dir = dst_kind == FileKind::Dir;
                if dst_dir && tx.is_within(parent, dst)? {
                    return Err(MetaError::Invalid("a directory cannot move into itself"));
                }
                tx.put_entry(parent, name, dst, dst_kind)?;
                tx.put_entry(new_parent, new_name, src, src_kind)?;
                if parent != new_parent {
                    if src_dir {
                        tx.add_nlink(parent, -1)?;
                        tx.add_nlink(new_parent, 1)?;
                    }
                    if dst_dir {
                        tx.add_nlink(new_parent, -1)?;
                        tx.add_nlink(parent, 1)?;
                    }
                }
                tx.touch_dir(parent, now)?;
                tx.touch_dir(new_parent, now)?;
                for (ino, dir) in [(src, new_parent), (dst, parent)] {
                    let rec = tx.rec_mut(ino)?;
                    rec.inode.attr.ctime = now;
                    rec.parent = dir;
                }
                return Ok(None);
            }
            let mut gone = None;
            if let Some((dst, dst_kind)) = dst {
                let dst_dir = dst_kind == FileKind::Dir;
                match (src_dir, dst_dir) {
                    (true, false) => return Err(MetaError::NotDir),
                    (false, true) => return Err(MetaError::IsDir),
                    _ => {}
                }
                if dst_dir {
                    if tx.rec(dst)?.entries != 0 {
                        return Err(MetaError::NotEmpty);
                    }
                    tx.add_nlink(new_parent, -1)?;
                    let mut out = tx.rec(dst)?.inode.clone();
                    out.attr.nlink = 0;
                    out.attr.ctime = now;
                    tx.delete_inode(dst)?;
                    gone = Some(out);
                } else {
                    let keep = tx.rec(dst)?.inode.attr.nlink == 1 && keep_orphan(dst);
                    let out = tx.drop_link(dst, keep, now)?;
                    if out.attr.nlink == 0 {
                        gone = Some(out);
                    }
                }
            }
            tx.del_entry(parent, name)?;
            tx.put_entry(new_parent, new_name, src, src_kind)?;
            if src_dir && parent != new_parent {
                tx.add_nlink(parent, -1)?;
                tx.add_nlink(new_parent, 1)?;
            }
            tx.touch_dir(parent, now)?;
            tx.touch_dir(new_parent, now)?;
            let moved = tx.rec_mut(src)?;
            moved.inode.attr.ctime = now;
            moved.parent = new_parent;
            Ok(gone)
        })
    }

    fn parent(&self, dir: InodeId) -> Result<InodeId> {
        let rec = self.read(|r| r.rec(dir))?;
        if !rec.is_dir() {
            return Err(MetaError::NotDir);
        }
        Ok(rec.parent)
    }

    fn path_of(&self, ino: InodeId) -> Result<Option<Vec<Vec<u8>>>> {
        self.read(|r| r.path_of(ino))
    }

    fn readdir(&self, dir: InodeId, after: Option<&[u8]>, limit: usize) -> Result<Vec<DirEntry>> {
        self.read(|r| {
            r.dir(dir)?;
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            let prefix = self.keys.entries(dir);
            let start = match after {
                Some(name) => key_after(&self.keys.entry(dir, name)),
                None => prefix.clone(),
            };
            let keys = &self.keys;
            r.scan(start, &prefix_end(&prefix), limit, &mut |kv| {
                let (ino, kind) = dval_decode(&kv.value)?;
                let name = keys.name_of(&kv.key).unwrap_or_default().to_vec();
                out.push(DirEntry { name, ino, kind });
                Ok(true)
            })?;
            Ok(out)
        })
    }

    fn set_attr(&self, ino: InodeId, changes: &SetAttr, now: Timestamp) -> Result<Inode> {
        self.update(ino, changes, &[], now)
    }

    fn update(
        &self,
        ino: InodeId,
        changes: &SetAttr,
        xattrs: &[XattrChange],
        now: Timestamp,
    ) -> Result<Inode> {
        if xattrs.len() > MAX_OP_XATTRS {
            return Err(MetaError::Invalid("too many extended attributes"));
        }
        for x in xattrs {
            check_xattr(&x.name, x.value.as_deref())?;
        }
        self.mutate(|tx| {
            let rec = tx.rec_mut(ino)?;
            let a = &mut rec.inode.attr;
            if let Some(perm) = changes.perm {
                a.perm = perm & 0o7777;
            }
            if let Some(uid) = changes.uid {
                a.uid = uid;
            }
            if let Some(gid) = changes.gid {
                a.gid = gid;
            }
            if let Some(atime) = changes.atime {
                a.atime = atime;
            }
            if let Some(mtime) = changes.mtime {
                a.mtime = mtime;
            }
            a.ctime = now;
            let out = rec.inode.clone();
            for x in xattrs {
                let key = tx.keys.xattr(ino, &x.name);
                match &x.value {
                    Some(v) => tx.put(key, v.clone()),
                    None => tx.del(key),
                }
            }
            Ok(out)
        })
    }

    fn set_content(
        &self,
        ino: InodeId,
        content: Content,
        size: u64,
        mtime: Timestamp,
    ) -> Result<Inode> {
        if matches!(&content, Content::Inline(b) if b.len() > MAX_INLINE) {
            return Err(MetaError::Invalid("inline content over 128 KiB"));
        }
        self.mutate(|tx| {
            let rec = tx.rec_mut(ino)?;
            match rec.inode.attr.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(MetaError::IsDir),
                _ => {
                    return Err(MetaError::Invalid(
                        "only a regular file's content can be set",
                    ))
                }
            }
            rec.inode.content = content.clone();
            let a = &mut rec.inode.attr;
            a.size = size;
            a.mtime = mtime;
            a.ctime = mtime;
            Ok(rec.inode.clone())
        })
    }

    fn get_xattr(&self, ino: InodeId, name: &[u8]) -> Result<Vec<u8>> {
        check_xattr(name, None)?;
        self.read(|r| {
            r.rec(ino)?;
            r.value(self.keys.xattr(ino, name))?
                .ok_or(MetaError::NoXattr)
        })
    }

    fn set_xattr(
        &self,
        ino: InodeId,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        now: Timestamp,
    ) -> Result<()> {
        check_xattr(name, Some(value))?;
        self.mutate(|tx| {
            tx.rec_mut(ino)?.inode.attr.ctime = now;
            let key = tx.keys.xattr(ino, name);
            let exists = tx.get(&key)?.is_some();
            match flags {
                XattrFlags::Create if exists => return Err(MetaError::Exists),
                XattrFlags::Replace if !exists => return Err(MetaError::NoXattr),
                _ => {}
            }
            tx.put(key, value.to_vec());
            Ok(())
        })
    }

    fn list_xattr(&self, ino: InodeId) -> Result<Vec<Vec<u8>>> {
        let all = self.read(|r| r.xattrs(ino))?;
        Ok(all.into_iter().map(|(k, _)| k).collect())
    }

    fn remove_xattr(&self, ino: InodeId, name: &[u8], now: Timestamp) -> Result<()> {
        check_xattr(name, None)?;
        self.mutate(|tx| {
            tx.rec_mut(ino)?.inode.attr.ctime = now;
            let key = tx.keys.xattr(ino, name);
            if tx.get(&key)?.is_none() {
                return Err(MetaError::NoXattr);
            }
            tx.del(key);
            Ok(())
        })
    }

    /// Drops this client's mark; the inode goes with it (marks are only
    /// written by the client whose unlink took the last name).
    fn drop_orphan(&self, ino: InodeId) -> Result<()> {
        self.mutate(|tx| {
            if tx.get(&tx.keys.orphan(ino, self.client))?.is_some() {
                tx.delete_inode(ino)?;
            }
            Ok(())
        })
    }

    /// Drops this client's orphans and those of clients no longer
    /// registered (closed, or dead past their TTL); another live client's
    /// orphans stay. Not one operation: each orphan is dropped by its own
    /// transaction (orphans are independent, and all of them together
    /// could pass etcd's limits), which compares the mark present.
    fn purge_orphans(&self) -> Result<u64> {
        let keys = &self.keys;
        let all = self.read(|r| {
            let mut all = Vec::new();
            r.scan_all(b"o/", &mut |kv| {
                all.extend(keys.orphan_of(&kv.key));
                Ok(true)
            })?;
            Ok(all)
        })?;
        let mut dropped = 0;
        for (ino, client) in all {
            // Read before the drop, not compared by it: a registration
            // only lapses with time, and a client whose registration
            // lapsed knows (and says) its orphans may be gone.
            if self.registered(client)? && client != self.client {
                continue;
            }
            let gone = self.mutate(|tx| {
                if tx.get(&tx.keys.orphan(ino, client))?.is_none() {
                    return Ok(false);
                }
                tx.delete_inode(ino)?;
                Ok(true)
            })?;
            dropped += u64::from(gone);
        }
        Ok(dropped)
    }

    /// Collected first (a read on a stale map starts again), then given.
    fn for_each_content(&self, f: &mut dyn FnMut(InodeId, &Content, u64)) -> Result<()> {
        let all = self.read(|r| {
            let mut all = Vec::new();
            r.for_each(&mut |inode| {
                if matches!(inode.content, Content::Recipe(_)) {
                    all.push((inode.id, inode.content.clone(), inode.attr.size));
                }
            })?;
            Ok(all)
        })?;
        for (ino, content, size) in &all {
            f(*ino, content, *size);
        }
        Ok(())
    }

    fn counts(&self) -> Result<Counts> {
        let (all, dirs) = self.read(|r| Ok((r.count(b"i/")?, r.count(b"k/")?)))?;
        Ok(Counts {
            files: all.saturating_sub(dirs),
            dirs,
        })
    }

    fn view(&self) -> Result<Box<dyn MetaView>> {
        Ok(Box::new(EtcdView::new(
            self.ring.route(),
            self.keys.clone(),
        )?))
    }

    /// etcd answers a write only once a quorum has it on disk: every
    /// mutation is durable when it returns, so there is nothing to do.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// A walk name by name, at one revision; there is no path index.
    fn lookup_path(&self, path: &[u8]) -> Result<PathFound> {
        let inode = self.read(|r| {
            let mut inode = r.get(InodeId::ROOT)?;
            if !path.is_empty() {
                for part in path.split(|&b| b == b'/') {
                    check_name(part)?;
                    inode = r.lookup(inode.id, part)?;
                }
            }
            Ok(inode)
        })?;
        Ok(PathFound::walked(inode))
    }

    fn path_indexed(&self, _ino: InodeId) -> Result<bool> {
        Ok(false)
    }

    fn set_path_hints(&self, _ino: InodeId, _hints: &ContentHints) -> Result<bool> {
        Ok(false)
    }

    fn storage_reads(&self) -> u64 {
        let route = self.ring.route();
        let control = self.ring.control.as_ref().map_or(0, |c| c.reads());
        control + route.data.iter().map(|r| r.reads()).sum::<u64>()
    }

    fn close(&self) {
        self.revoke_registrations();
    }

    fn board(&self) -> Option<&dyn meta::CollectionBoard> {
        Some(self)
    }
}

/// Decodes an inode record read by a [`Reader`].
pub(crate) fn inode_of(keys: &crate::keys::Keys, key: &[u8], value: &[u8]) -> Result<Rec> {
    let ino = keys.number_of(key).ok_or(crate::EtcdError::BadEntry)?;
    Ok(decode(ino, value)?)
}

//! The namespace operations: names, attributes, links, listings and
//! extended attributes, each one metadata operation (with the POSIX rules
//! of [`crate::posix`] applied in it), and the path a file is known by.

use cas::ChunkId;
use meta::{
    Attr, Content, DirEntry, FileKind, Inode, InodeId, MetaError, NewInode, RenameFlags, SetAttr,
    XattrFlags,
};

use crate::rules::{Choice, POLICY_XATTR};
use crate::snapview::{is_snapshots_name, is_virtual};
use crate::{acl, now, snapview, writable, writable_name, Caller, Fs, Inner, Result};

impl Fs {
    /// An inode with the live size and mtime of an open, written file.
    pub fn getattr(&self, ino: InodeId) -> Result<Inode> {
        if is_virtual(ino) {
            return self.snap_getattr(ino);
        }
        let mut inode = self.inner.meta.get(ino)?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    pub fn lookup(&self, parent: InodeId, name: &[u8]) -> Result<Inode> {
        if is_virtual(parent) {
            return self.snap_lookup(parent, name);
        }
        if is_snapshots_name(parent, name) {
            return self.snap_getattr(InodeId(snapview::SNAP_BASE));
        }
        let mut inode = self.inner.meta.lookup(parent, name)?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    /// Changes attributes as root does; see [`Fs::setattr_as`].
    pub fn setattr(&self, ino: InodeId, changes: &SetAttr, size: Option<u64>) -> Result<Inode> {
        self.setattr_as(ino, changes, size, &Caller::root())
    }

    /// Changes attributes for `caller`; `size` truncates or extends a
    /// regular file. The POSIX rules on the mode apply: a chown clears
    /// set-id bits, a chmod carries into the access ACL, and a size change
    /// by anyone but root that sets no mode clears set-id bits as a write
    /// does, under the file's lock before its size changes.
    pub fn setattr_as(
        &self,
        ino: InodeId,
        changes: &SetAttr,
        size: Option<u64>,
        caller: &Caller,
    ) -> Result<Inode> {
        writable(ino)?;
        let t = now();
        if changes.mtime.is_some() {
            // Content written and not yet recorded carries the time of its
            // write: it is recorded first, so the mtime asked for now (a
            // copy tool's futimens just before close) is the one that
            // stays. A later write sets it again, as on ext4.
            self.flush(ino)?;
        }
        if let Some(size) = size {
            let state = self.inner.state(ino)?;
            let _recording = self.inner.recording.read();
            let mut f = self.inner.lock_settled(&state);
            if changes.perm.is_none() {
                self.inner.kill_priv_for(ino, caller)?;
            }
            let before = f.held();
            let inner = &self.inner;
            let read = |id: &ChunkId| inner.read_one(id);
            f.truncate(size, t, &read)?;
            inner.account(before, f.held());
            inner.finalize(&mut f)?;
            drop(f);
            self.inner.release_state(ino, state);
        }
        let mut inode = self.inner.set_attr_posix(ino, changes, t)?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    /// Creates `name` in `parent` exactly as `new` describes it (and with
    /// the parent's redundancy policy, if it has one); [`Fs::create_posix`]
    /// applies the rules a process creating it is under.
    pub fn create(&self, parent: InodeId, name: &[u8], mut new: NewInode) -> Result<Inode> {
        writable(parent)?;
        if is_snapshots_name(parent, name) {
            return Err(MetaError::Exists.into());
        }
        if new.kind == FileKind::File || new.kind == FileKind::Dir {
            match self.inner.meta.get_xattr(parent, POLICY_XATTR) {
                Ok(policy) => new.xattrs.push((POLICY_XATTR.to_vec(), policy)),
                Err(MetaError::NoXattr) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let inode = self.inner.meta.create(parent, name, new, now())?;
        Ok(inode)
    }

    pub fn link(&self, ino: InodeId, new_parent: InodeId, new_name: &[u8]) -> Result<Inode> {
        writable(ino)?;
        writable(new_parent)?;
        if is_snapshots_name(new_parent, new_name) {
            return Err(MetaError::Exists.into());
        }
        let mut inode = self.inner.meta.link(ino, new_parent, new_name, now())?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    pub fn unlink(&self, parent: InodeId, name: &[u8]) -> Result<()> {
        writable_name(parent, name)?;
        let target = self.inner.meta.lookup(parent, name)?.id;
        let open = self.inner.is_open(target);
        self.inner.meta.unlink(parent, name, open, now())?;
        Ok(())
    }

    pub fn rmdir(&self, parent: InodeId, name: &[u8]) -> Result<()> {
        writable_name(parent, name)?;
        Ok(self.inner.meta.rmdir(parent, name, now())?)
    }

    pub fn rename(
        &self,
        parent: InodeId,
        name: &[u8],
        new_parent: InodeId,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        writable_name(parent, name)?;
        writable_name(new_parent, new_name)?;
        let inner = &self.inner;
        inner.meta.rename(
            parent,
            name,
            new_parent,
            new_name,
            flags,
            &|ino| inner.is_open(ino),
            now(),
        )?;
        Ok(())
    }

    /// The directory holding directory `dir` (the root's is the root), for
    /// a listing's `..`. Under `.snapshots` only a snapshot's root knows
    /// its parent; a directory deeper in one answers itself.
    pub fn parent(&self, dir: InodeId) -> Result<InodeId> {
        if is_virtual(dir) {
            return Ok(self.snap_parent(dir));
        }
        Ok(self.inner.meta.parent(dir)?)
    }

    pub fn readlink(&self, ino: InodeId) -> Result<Vec<u8>> {
        if is_virtual(ino) {
            return self.snap_readlink(ino);
        }
        match self.inner.meta.get(ino)? {
            Inode {
                content: Content::Inline(target),
                attr:
                    Attr {
                        kind: FileKind::Symlink,
                        ..
                    },
                ..
            } => Ok(target),
            _ => Err(MetaError::Invalid("not a symbolic link").into()),
        }
    }

    pub fn readdir(
        &self,
        dir: InodeId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        if is_virtual(dir) {
            return self.snap_readdir(dir, after, limit);
        }
        Ok(self.inner.meta.readdir(dir, after, limit)?)
    }

    pub fn get_xattr(&self, ino: InodeId, name: &[u8]) -> Result<Vec<u8>> {
        if is_virtual(ino) {
            return self
                .snap_xattrs(ino)?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or(MetaError::NoXattr.into());
        }
        self.inner.xattr_supported(ino, name)?;
        Ok(self.inner.meta.get_xattr(ino, name)?)
    }

    /// Sets an extended attribute. An ACL is checked and kept in step with
    /// the mode (see [`acl`]); a policy is checked and applied to
    /// data stored already.
    pub fn set_xattr(
        &self,
        ino: InodeId,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        caller: &Caller,
    ) -> Result<()> {
        writable(ino)?;
        self.inner.xattr_supported(ino, name)?;
        if acl::is_acl(name) {
            return self.inner.set_acl(ino, name, value, flags, caller);
        }
        if name != POLICY_XATTR {
            return Ok(self.inner.meta.set_xattr(ino, name, value, flags, now())?);
        }
        let protection = self.inner.xattr_protection(value).inspect_err(|e| {
            tracing::warn!(file = %self.inner.describe(ino), policy = %String::from_utf8_lossy(value), error = %e, "refused a policy xattr");
        })?;
        let before = self.inner.meta.get(ino)?;
        self.inner.meta.set_xattr(ino, name, value, flags, now())?;
        if let Content::Recipe(root) = before.content {
            self.inner.migrate(ino, root, protection);
        }
        Ok(())
    }

    /// The protection a regular file's data gets now and why; `path` (from
    /// the mount root) is used for rules when given, else the path the
    /// metadata engine knows for it (the name it was last given).
    pub fn policy_of(&self, ino: InodeId, path: Option<&str>) -> Result<Choice> {
        let inode = self.getattr(ino)?;
        self.inner.choose(&inode, path)
    }

    pub fn list_xattr(&self, ino: InodeId) -> Result<Vec<Vec<u8>>> {
        if is_virtual(ino) {
            return Ok(self.snap_xattrs(ino)?.into_iter().map(|(n, _)| n).collect());
        }
        Ok(self.inner.meta.list_xattr(ino)?)
    }

    pub fn remove_xattr(&self, ino: InodeId, name: &[u8]) -> Result<()> {
        writable(ino)?;
        self.inner.xattr_supported(ino, name)?;
        if acl::is_acl(name) {
            return self.inner.remove_acl(ino, name);
        }
        Ok(self.inner.meta.remove_xattr(ino, name, now())?)
    }
}

impl Inner {
    /// A path of the inode from the root, from the metadata engine's parent
    /// pointers; `None` when it has none (see [`MetaStore::path_of`]).
    pub(crate) fn path_of(&self, ino: InodeId) -> Result<Option<String>> {
        let Some(names) = self.meta.path_of(ino)? else {
            return Ok(None);
        };
        let names: Vec<String> = names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        Ok(Some(names.join("/")))
    }

    /// How a log line names a file: its path from the mount root when
    /// known, else its inode number.
    pub(crate) fn describe(&self, ino: InodeId) -> String {
        match self.path_of(ino) {
            Ok(Some(p)) => format!("/{p}"),
            _ => format!("inode {}", ino.0),
        }
    }
}

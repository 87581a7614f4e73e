//! The namespace operations: names, attributes, links, listings and
//! extended attributes, each one metadata operation (with the POSIX rules
//! of [`crate::posix`] applied in it), and the path a file is known by.

use cas::ChunkId;
use meta::{
    Attr, Content, DirEntry, FileKind, Inode, InodeId, MetaError, NewInode, RenameFlags, SetAttr,
    XattrFlags,
};

use crate::chunkmode::CHUNKING_XATTR;
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

    /// [`Fs::getattr`] of each of `inos`, in order, read together.
    pub fn getattr_many(&self, inos: &[InodeId]) -> Vec<Result<Inode>> {
        let real: Vec<InodeId> = inos.iter().copied().filter(|i| !is_virtual(*i)).collect();
        let mut read = self.inner.meta.get_many(&real).into_iter();
        inos.iter()
            .map(|ino| {
                if is_virtual(*ino) {
                    return self.snap_getattr(*ino);
                }
                let mut inode = read.next().expect("one answer per inode")?;
                self.inner.overlay(&mut inode);
                Ok(inode)
            })
            .collect()
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
        self.inner.hint_name(inode.id, parent, name);
        Ok(inode)
    }

    /// The inode at `path` (names joined by `/` from the root, no leading
    /// `/`): what [`Fs::lookup`] name by name gives, found through the
    /// metadata engine's path index in one read when it can be
    /// ([`meta::MetaStore::lookup_path`]; the S3 gateway's GET and HEAD),
    /// with the inode's xattrs when the index carried them.
    pub fn lookup_path(&self, path: &[u8]) -> Result<meta::PathFound> {
        let first = path.split(|&b| b == b'/').next().unwrap_or_default();
        if is_snapshots_name(InodeId::ROOT, first) {
            let mut inode = self.getattr(InodeId::ROOT)?;
            for part in path.split(|&b| b == b'/') {
                inode = self.lookup(inode.id, part)?;
            }
            return Ok(meta::PathFound::walked(inode));
        }
        let mut found = self.inner.meta.lookup_path(path)?;
        self.inner.overlay(&mut found.inode);
        Ok(found)
    }

    /// The bytes of a file kept inline in its record, as `inode` (just
    /// looked up) holds them, when the file system holds nothing newer of
    /// it in memory: a GET found through the path index is then answered
    /// from that one read, without reading the file again.
    pub fn settled_inline<'a>(&self, inode: &'a Inode) -> Option<&'a [u8]> {
        match &inode.content {
            Content::Inline(bytes)
                if inode.attr.size == bytes.len() as u64 && !self.inner.has_state(inode.id) =>
            {
                Some(bytes)
            }
            _ => None,
        }
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
        if let Some(mtime) = changes.mtime {
            // Content written and not yet recorded carries the time of its
            // write: that time becomes the one asked for now (a copy tool's
            // futimens just before close), so it is the one recorded with
            // the content. A later write sets it again, as on ext4. Not a
            // flush: the kernel sends its cached mtime at every writeback
            // of the inode, and a flush each time stored a file being
            // written in pieces as small as those writebacks.
            self.inner.set_unrecorded_mtime(ino, mtime);
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
            for name in [POLICY_XATTR, CHUNKING_XATTR] {
                match self.inner.meta.get_xattr(parent, name) {
                    Ok(value) => new.xattrs.push((name.to_vec(), value)),
                    Err(MetaError::NoXattr) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let inode = self.inner.meta.create(parent, name, new, now())?;
        self.inner.hint_name(inode.id, parent, name);
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
        let target = self.inner.meta.lookup(parent, name)?;
        let open = self.inner.is_open(target.id);
        self.inner.meta.unlink(parent, name, open, now())?;
        self.inner.released_with(&target);
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
        let replaced = if flags.exchange {
            None
        } else {
            inner.meta.lookup(new_parent, new_name).ok()
        };
        inner.meta.rename(
            parent,
            name,
            new_parent,
            new_name,
            flags,
            &|ino| inner.is_open(ino),
            now(),
        )?;
        if let Some(gone) = replaced {
            inner.released_with(&gone);
        }
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
        if name == CHUNKING_XATTR {
            return self.inner.set_chunking(ino, value, flags);
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

/// Name hints kept for [`Inner::path_of`] (the inodes last created or
/// looked up): a miss only costs a scan in the metadata engine.
pub(crate) const NAMES_HINTED: usize = 1 << 16;
/// Most hinted steps followed up a path before the engine is asked for the
/// rest.
const MAX_HINTED_DEPTH: usize = 256;

impl Inner {
    /// Remembers that `ino` was reached as `name` in `parent`: a hint for
    /// [`Inner::path_of`], which checks it before use.
    pub(crate) fn hint_name(&self, ino: InodeId, parent: InodeId, name: &[u8]) {
        self.names.lock().put(ino, (parent, name.to_vec()));
    }

    /// A path of the inode from the root, as the metadata engine has it
    /// now; `None` when it knows none (see [`MetaStore::path_of`]). A name
    /// hint is used for a step only while the engine still has that entry
    /// for that inode (one lookup); a step without one asks the engine's
    /// parent pointers, which scan a directory's entries for the name.
    pub(crate) fn path_of(&self, ino: InodeId) -> Result<Option<String>> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut at = ino;
        while at != InodeId::ROOT {
            let hint = self.names.lock().get(&at).cloned();
            let checked = match hint {
                Some((parent, name)) if names.len() < MAX_HINTED_DEPTH => {
                    match self.meta.lookup(parent, &name) {
                        Ok(inode) if inode.id == at => Some((parent, name)),
                        Ok(_) | Err(MetaError::NotFound | MetaError::NotDir) => None,
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => None,
            };
            match checked {
                Some((parent, name)) => {
                    names.push(name);
                    at = parent;
                }
                None => {
                    let Some(above) = self.meta.path_of(at)? else {
                        return Ok(None);
                    };
                    names.extend(above.into_iter().rev());
                    break;
                }
            }
        }
        let names: Vec<String> = names
            .iter()
            .rev()
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

#[cfg(test)]
mod tests {
    use meta::{Content, FileKind, InodeId, NewInode, RenameFlags};

    use crate::testing::fs_in;

    fn new(kind: FileKind) -> NewInode {
        NewInode {
            kind,
            perm: 0o755,
            uid: 0,
            gid: 0,
            rdev: 0,
            content: Content::Empty,
            xattrs: Vec::new(),
        }
    }

    /// Names seen go stale with a rename; the path is still the engine's.
    #[test]
    fn a_path_follows_renames_past_stale_name_hints() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let root = InodeId::ROOT;
        let a = fs.create(root, b"a", new(FileKind::Dir)).unwrap();
        let b = fs.create(root, b"b", new(FileKind::Dir)).unwrap();
        let f = fs.create(a.id, b"f", new(FileKind::File)).unwrap();
        assert_eq!(fs.describe(f.id), "/a/f");

        let flags = RenameFlags::default();
        fs.rename(a.id, b"f", b.id, b"g", flags).unwrap();
        assert_eq!(fs.describe(f.id), "/b/g", "the file's hint is stale");
        fs.rename(root, b"b", a.id, b"c", flags).unwrap();
        assert_eq!(fs.describe(f.id), "/a/c/g", "its directory's is stale");
        fs.lookup(a.id, b"c").unwrap();
        fs.unlink(b.id, b"g").unwrap();
        assert_eq!(fs.describe(f.id), format!("inode {}", f.id.0), "gone");
        fs.shutdown().unwrap();
    }
}

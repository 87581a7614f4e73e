//! The POSIX rules on modes that the kernel leaves to the file system:
//! what a new inode's group and permissions are, what a chown, a write or a
//! truncate clears, and POSIX ACLs kept in step with the mode (the rules
//! themselves are in [`crate::acl`]).

use meta::{
    FileKind, Inode, InodeId, MetaError, NewInode, SetAttr, Timestamp, XattrChange, XattrFlags,
};

use crate::acl::{self, Acl};
use crate::{now, writable, Fs, FsError, Inner, Result};

/// Who asks for a change, where a POSIX rule depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    /// Its primary and supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    /// Root, whom no rule that depends on the caller holds back.
    pub fn root() -> Caller {
        Caller {
            uid: 0,
            groups: vec![0],
        }
    }

    /// Whether the caller may keep the set-group-id bit of a file of group
    /// `gid` when it changes the file's permissions: root (standing for
    /// `CAP_FSETID`) or a member of the group (the kernel's
    /// `in_group_or_capable`).
    fn keeps_setgid(&self, gid: u32) -> bool {
        self.uid == 0 || self.groups.contains(&gid)
    }

    /// Whether the caller's writes keep a file's set-id bits: root only
    /// (standing for `CAP_FSETID`).
    fn keeps_privs(&self) -> bool {
        self.uid == 0
    }
}

/// The permission bits after a write or truncate by a caller without
/// `CAP_FSETID`: set-user-id goes, and set-group-id when the group may
/// execute (otherwise it marks mandatory locking and stays). `None` if
/// nothing changes.
pub(crate) fn kill_priv(perm: u16) -> Option<u16> {
    let mut new = perm & !0o4000;
    if perm & 0o010 != 0 {
        new &= !0o2000;
    }
    (new != perm).then_some(new)
}

/// The `system.` namespace holds only what the file system implements
/// (the ACLs); anything else there is refused, as ext4 does.
const SYSTEM_PREFIX: &[u8] = b"system.";

impl Fs {
    /// Creates `name` in `parent` as a process does under POSIX rules: in
    /// a set-group-id directory the new inode takes the directory's group
    /// (a new directory its set-group-id bit too); the directory's default
    /// ACL, if it has one, becomes the inode's access ACL, masked by and
    /// masking `new.perm` (a new directory keeps it as its own default as
    /// well), and otherwise `umask` masks `new.perm`. A symbolic link takes
    /// neither an ACL nor the umask.
    pub fn create_posix(
        &self,
        parent: InodeId,
        name: &[u8],
        mut new: NewInode,
        umask: u16,
    ) -> Result<Inode> {
        writable(parent)?;
        let dir = self.inner.meta.get(parent)?;
        if dir.attr.perm & 0o2000 != 0 {
            new.gid = dir.attr.gid;
            if new.kind == FileKind::Dir {
                new.perm |= 0o2000;
            }
        }
        if new.kind != FileKind::Symlink {
            match self.inner.stored_acl(parent, acl::DEFAULT)? {
                Some(default) => {
                    let mut access = default.clone();
                    let (perm, extended) = access.inherit(new.perm);
                    new.perm = perm;
                    if extended {
                        new.xattrs.push((acl::ACCESS.to_vec(), access.to_bytes()));
                    }
                    if new.kind == FileKind::Dir {
                        new.xattrs.push((acl::DEFAULT.to_vec(), default.to_bytes()));
                    }
                }
                None => new.perm &= !(umask & 0o777),
            }
        }
        self.create(parent, name, new)
    }
}

impl Inner {
    /// Applies attribute changes under the POSIX rules on the mode: a chown
    /// of a non-directory clears its set-user-id bit, and its set-group-id
    /// bit when group-executable, as Linux does; a new mode is carried into
    /// the access ACL in the same operation (`posix_acl_chmod`).
    pub(crate) fn set_attr_posix(
        &self,
        ino: InodeId,
        changes: &SetAttr,
        t: Timestamp,
    ) -> Result<Inode> {
        let _modes = self.modes.lock();
        self.set_attr_locked(ino, changes, t)
    }

    /// Drops the set-id bits a write or truncate by `caller` clears (see
    /// [`kill_priv`]), carrying the mode into the access ACL. The caller
    /// holds the file's state lock and calls this before the data changes,
    /// so no byte of the change is taken while the bits are still set.
    pub(crate) fn kill_priv_for(&self, ino: InodeId, caller: &Caller) -> Result<()> {
        if caller.keeps_privs() {
            return Ok(());
        }
        // Most files have no set-id bit: one read, no lock, decides.
        if kill_priv(self.meta.get(ino)?.attr.perm).is_none() {
            return Ok(());
        }
        let _modes = self.modes.lock();
        let Some(perm) = kill_priv(self.meta.get(ino)?.attr.perm) else {
            return Ok(());
        };
        let changes = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.set_attr_locked(ino, &changes, now())?;
        Ok(())
    }

    /// [`Inner::set_attr_posix`] with the modes lock held.
    fn set_attr_locked(&self, ino: InodeId, changes: &SetAttr, t: Timestamp) -> Result<Inode> {
        let mut changes = changes.clone();
        if changes.uid.is_some() || changes.gid.is_some() {
            let cur = self.meta.get(ino)?;
            if cur.attr.kind != FileKind::Dir {
                let mut perm = changes.perm.unwrap_or(cur.attr.perm);
                perm &= !0o4000;
                if perm & 0o010 != 0 {
                    perm &= !0o2000;
                }
                if perm != cur.attr.perm || changes.perm.is_some() {
                    changes.perm = Some(perm);
                }
            }
        }
        let acl = match changes.perm {
            Some(perm) => self.stored_acl(ino, acl::ACCESS)?.map(|mut acl| {
                acl.chmod(perm);
                acl
            }),
            None => None,
        };
        Ok(match acl {
            Some(acl) => self.meta.update(
                ino,
                &changes,
                &[XattrChange {
                    name: acl::ACCESS.to_vec(),
                    value: Some(acl.to_bytes()),
                }],
                t,
            )?,
            None => self.meta.set_attr(ino, &changes, t)?,
        })
    }

    /// Refuses an extended attribute the file system does not keep: a
    /// `system.` name other than the ACLs, and an ACL of a symbolic link.
    pub(crate) fn xattr_supported(&self, ino: InodeId, name: &[u8]) -> Result<()> {
        if acl::is_acl(name) {
            if self.meta.get(ino)?.attr.kind == FileKind::Symlink {
                return Err(FsError::NotSupported);
            }
            return Ok(());
        }
        if name.starts_with(SYSTEM_PREFIX) {
            return Err(FsError::NotSupported);
        }
        Ok(())
    }

    /// Sets an ACL. An access ACL sets the mode's permission bits, and is
    /// not kept when the mode says all it does (`posix_acl_update_mode`);
    /// the set-group-id bit goes unless the caller may keep it (what the
    /// kernel would flag with `FUSE_SETXATTR_ACL_KILL_SGID`). A default ACL
    /// is for directories only.
    pub(crate) fn set_acl(
        &self,
        ino: InodeId,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        caller: &Caller,
    ) -> Result<()> {
        let acl = Acl::parse(value)?;
        let _modes = self.modes.lock();
        let inode = self.meta.get(ino)?;
        // Only whether one is there: a damaged one is replaced.
        let exists = match self.meta.get_xattr(ino, name) {
            Ok(_) => true,
            Err(MetaError::NoXattr) => false,
            Err(e) => return Err(e.into()),
        };
        match flags {
            XattrFlags::Create if exists => return Err(MetaError::Exists.into()),
            XattrFlags::Replace if !exists => return Err(MetaError::NoXattr.into()),
            _ => {}
        }
        if name == acl::DEFAULT {
            if inode.attr.kind != FileKind::Dir {
                return Err(FsError::DefaultAclNotDir);
            }
            let bytes = acl.to_bytes();
            self.meta
                .set_xattr(ino, name, &bytes, XattrFlags::Either, now())?;
            return Ok(());
        }
        let (mut perm, equivalent) = acl.mode(inode.attr.perm);
        if !caller.keeps_setgid(inode.attr.gid) {
            perm &= !0o2000;
        }
        let changes = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        let kept = XattrChange {
            name: acl::ACCESS.to_vec(),
            value: (!equivalent).then(|| acl.to_bytes()),
        };
        self.meta.update(ino, &changes, &[kept], now())?;
        Ok(())
    }

    /// Removes an ACL; the mode stays. An inode without one is left as it
    /// is, with success, as on ext4.
    pub(crate) fn remove_acl(&self, ino: InodeId, name: &[u8]) -> Result<()> {
        let _modes = self.modes.lock();
        match self.meta.remove_xattr(ino, name, now()) {
            Ok(()) | Err(MetaError::NoXattr) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The ACL kept under `name`, if any.
    fn stored_acl(&self, ino: InodeId, name: &[u8]) -> Result<Option<Acl>> {
        match self.meta.get_xattr(ino, name) {
            Ok(value) => Acl::parse(&value)
                .map(Some)
                .map_err(|source| FsError::DamagedAcl { ino, source }),
            Err(MetaError::NoXattr) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use meta::{Content, FileKind, InodeId, NewInode, SetAttr};

    use super::{kill_priv, Caller};
    use crate::testing::fs_in;
    use crate::Fs;

    #[test]
    fn kill_priv_on_write() {
        assert_eq!(kill_priv(0o4755), Some(0o0755));
        assert_eq!(
            kill_priv(0o2755),
            Some(0o0755),
            "setgid with group exec goes"
        );
        assert_eq!(kill_priv(0o2745), None, "setgid without group exec stays");
        assert_eq!(kill_priv(0o6775), Some(0o0775));
        assert_eq!(kill_priv(0o6745), Some(0o2745));
        assert_eq!(kill_priv(0o1777), None);
        assert_eq!(kill_priv(0o644), None);
    }

    fn new(kind: FileKind, perm: u16) -> NewInode {
        NewInode {
            kind,
            perm,
            uid: 1000,
            gid: 1000,
            rdev: 0,
            content: Content::Empty,
            xattrs: Vec::new(),
        }
    }

    fn user() -> Caller {
        Caller {
            uid: 1000,
            groups: vec![1000],
        }
    }

    fn perm(fs: &Fs, ino: InodeId) -> u16 {
        fs.getattr(ino).unwrap().attr.perm
    }

    /// The write and the truncate clear the set-id bits themselves: no
    /// caller reads the mode first.
    #[test]
    fn a_write_or_truncate_by_a_user_clears_set_id_bits() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let f = fs
            .create(InodeId::ROOT, b"f", new(FileKind::File, 0o6775))
            .unwrap();
        fs.open(f.id).unwrap();

        fs.write_as(f.id, 0, b"by root", &Caller::root()).unwrap();
        assert_eq!(perm(&fs, f.id), 0o6775, "root keeps them");
        fs.write_as(f.id, 0, b"by a user", &user()).unwrap();
        assert_eq!(perm(&fs, f.id), 0o0775);

        // Without group exec the set-group-id bit marks mandatory locking
        // and stays; a truncate clears set-user-id as a write does.
        let chmod = SetAttr {
            perm: Some(0o6745),
            ..SetAttr::default()
        };
        fs.setattr(f.id, &chmod, None).unwrap();
        fs.setattr_as(f.id, &SetAttr::default(), Some(3), &user())
            .unwrap();
        assert_eq!(perm(&fs, f.id), 0o2745);
        assert_eq!(fs.getattr(f.id).unwrap().attr.size, 3);

        // A truncate that sets a mode keeps the mode it sets.
        fs.setattr_as(f.id, &chmod, Some(1), &user()).unwrap();
        assert_eq!(perm(&fs, f.id), 0o6745);
        fs.release(f.id).unwrap();
        assert_eq!(fs.read(f.id, 0, 10).unwrap(), b"b");
        fs.shutdown().unwrap();
    }

    #[test]
    fn a_set_group_id_directory_passes_on_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let mut shared = new(FileKind::Dir, 0o2775);
        shared.gid = 50;
        let d = fs.create(InodeId::ROOT, b"shared", shared).unwrap();
        let sub = fs
            .create_posix(d.id, b"sub", new(FileKind::Dir, 0o777), 0o022)
            .unwrap();
        let file = fs
            .create_posix(d.id, b"file", new(FileKind::File, 0o666), 0o022)
            .unwrap();
        assert_eq!((sub.attr.gid, sub.attr.perm), (50, 0o2755));
        assert_eq!((file.attr.gid, file.attr.perm), (50, 0o644));

        // Outside such a directory the creator's group and mode stay.
        let plain = fs
            .create_posix(InodeId::ROOT, b"plain", new(FileKind::Dir, 0o777), 0o022)
            .unwrap();
        assert_eq!((plain.attr.gid, plain.attr.perm), (1000, 0o755));
        fs.shutdown().unwrap();
    }

    #[test]
    fn fallocate_extends_and_refuses_other_modes() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let f = fs
            .create(InodeId::ROOT, b"f", new(FileKind::File, 0o644))
            .unwrap();
        fs.open(f.id).unwrap();
        fs.write(f.id, 0, b"abc").unwrap();
        fs.fallocate(f.id, 100, 23, 0).unwrap();
        assert_eq!(fs.getattr(f.id).unwrap().attr.size, 123);
        fs.fallocate(f.id, 0, 10, 0).unwrap();
        assert_eq!(fs.getattr(f.id).unwrap().attr.size, 123, "never shrinks");
        let errno = |r: crate::Result<()>| r.unwrap_err().errno();
        fs.fallocate(f.id, 0, 200, libc::FALLOC_FL_KEEP_SIZE)
            .unwrap();
        assert_eq!(fs.getattr(f.id).unwrap().attr.size, 123, "size kept");
        assert_eq!(
            errno(fs.fallocate(f.id, 0, 200, libc::FALLOC_FL_COLLAPSE_RANGE)),
            libc::EOPNOTSUPP
        );
        assert_eq!(
            errno(fs.fallocate(f.id, 0, 200, libc::FALLOC_FL_PUNCH_HOLE)),
            libc::EOPNOTSUPP,
            "a punch must keep the size"
        );
        assert_eq!(
            errno(fs.fallocate(f.id, i64::MAX as u64, 1, 0)),
            libc::EFBIG
        );
        assert_eq!(errno(fs.fallocate(f.id, 0, 0, 0)), libc::EINVAL);
        fs.release(f.id).unwrap();
        let mut want = b"abc".to_vec();
        want.resize(123, 0);
        assert_eq!(fs.read(f.id, 0, 200).unwrap(), want);
        fs.shutdown().unwrap();
    }
}

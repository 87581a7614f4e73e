//! The POSIX rules on modes that the kernel leaves to the file system:
//! what a new inode's group and permissions are, what a chown clears, and
//! POSIX ACLs kept in step with the mode (the rules themselves are in
//! [`crate::acl`]).

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

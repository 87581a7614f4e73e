//! POSIX access control lists as Linux keeps them: in the
//! `system.posix_acl_access` and `system.posix_acl_default` extended
//! attributes, and tied to the inode's mode.
//!
//! The kernel enforces ACLs (the mount asks for `FUSE_POSIX_ACL`) and
//! checks the values callers write; it leaves to the file system what
//! ext4 does in its own ACL code, which is here:
//! - setting an access ACL sets the mode's permission bits from it, and an
//!   ACL that says no more than the mode is not kept (`posix_acl_update_mode`);
//! - a chmod rewrites the owner, mask (or group, without a mask) and other
//!   entries of the access ACL (`posix_acl_chmod`);
//! - a new inode inherits its directory's default ACL, which the mode it
//!   is created with masks; the umask does not apply then
//!   (`posix_acl_create`).
//!
//! The value's layout: a little-endian u32 version (2), then 8 bytes per
//! entry: tag u16, permissions u16 (r 4, w 2, x 1), id u32 (the uid or gid
//! of a named entry; `u32::MAX` for the others).

/// The access ACL: who may do what to the inode.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// A directory's default ACL: what inodes created in it inherit.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

/// The only layout version Linux knows.
const VERSION: u32 = 2;
const HEADER_LEN: usize = 4;
const ENTRY_LEN: usize = 8;
/// The id of an entry that names nobody (owner, group, mask, other).
const NO_ID: u32 = u32::MAX;
/// Read, write and execute.
const RWX: u16 = 0o7;

/// Whether an extended attribute's name is one of the ACLs.
pub fn is_acl(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// The owner.
    UserObj,
    /// A user named by uid.
    User,
    /// The owning group.
    GroupObj,
    /// A group named by gid.
    Group,
    /// The most any named entry or the owning group is granted.
    Mask,
    /// Everyone else.
    Other,
}

impl Tag {
    fn code(self) -> u16 {
        match self {
            Tag::UserObj => 0x01,
            Tag::User => 0x02,
            Tag::GroupObj => 0x04,
            Tag::Group => 0x08,
            Tag::Mask => 0x10,
            Tag::Other => 0x20,
        }
    }

    fn from_code(code: u16) -> Option<Tag> {
        Some(match code {
            0x01 => Tag::UserObj,
            0x02 => Tag::User,
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group,
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return None,
        })
    }

    fn is_named(self) -> bool {
        matches!(self, Tag::User | Tag::Group)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: Tag,
    /// Read 4, write 2, execute 1.
    pub perm: u16,
    /// The uid or gid of a named entry; `u32::MAX` for the others.
    pub id: u32,
}

/// Why an ACL value is refused (the kernel's `posix_acl_from_xattr` and
/// `posix_acl_valid` rules).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("an ACL of {0} bytes is not a 4-byte header and 8-byte entries")]
    Length(usize),
    #[error("ACL version {0} (only 2 is known)")]
    Version(u32),
    #[error("unknown ACL entry tag {0:#x}")]
    Tag(u16),
    #[error("ACL permissions {0:#o} beyond read, write and execute")]
    Perm(u16),
    #[error(
        "ACL entries must be: owner, named users, group, named groups, a mask \
         (required when any entry is named), other"
    )]
    Order,
}

/// A valid ACL: entries in the order Linux requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Parses and checks an ACL extended attribute's value.
    pub fn parse(value: &[u8]) -> Result<Acl, AclError> {
        let (header, body) = match value.split_first_chunk::<HEADER_LEN>() {
            Some((header, body)) if body.chunks_exact(ENTRY_LEN).remainder().is_empty() => {
                (header, body)
            }
            _ => return Err(AclError::Length(value.len())),
        };
        let version = u32::from_le_bytes(*header);
        if version != VERSION {
            return Err(AclError::Version(version));
        }
        let mut entries = Vec::with_capacity(body.len() / ENTRY_LEN);
        for raw in body.chunks_exact(ENTRY_LEN) {
            let code = u16::from_le_bytes([raw[0], raw[1]]);
            let tag = Tag::from_code(code).ok_or(AclError::Tag(code))?;
            let perm = u16::from_le_bytes([raw[2], raw[3]]);
            if perm & !RWX != 0 {
                return Err(AclError::Perm(perm));
            }
            let id = if tag.is_named() {
                u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]])
            } else {
                NO_ID
            };
            entries.push(Entry { tag, perm, id });
        }
        let acl = Acl { entries };
        acl.check_order()?;
        Ok(acl)
    }

    /// `posix_acl_valid`: owner, named users, group, named groups, mask,
    /// other; a mask exactly when an entry is named (or anyway).
    fn check_order(&self) -> Result<(), AclError> {
        // The states of the kernel's walk: what may come next.
        #[derive(PartialEq)]
        enum Next {
            Owner,
            Users,
            Groups,
            Other,
            Done,
        }
        let mut next = Next::Owner;
        let mut named = false;
        for e in &self.entries {
            next = match (e.tag, next) {
                (Tag::UserObj, Next::Owner) => Next::Users,
                (Tag::User, Next::Users) => {
                    named = true;
                    Next::Users
                }
                (Tag::GroupObj, Next::Users) => Next::Groups,
                (Tag::Group, Next::Groups) => {
                    named = true;
                    Next::Groups
                }
                (Tag::Mask, Next::Groups) => Next::Other,
                (Tag::Other, Next::Other) => Next::Done,
                (Tag::Other, Next::Groups) if !named => Next::Done,
                _ => return Err(AclError::Order),
            };
        }
        if next == Next::Done {
            Ok(())
        } else {
            Err(AclError::Order)
        }
    }

    /// The extended attribute's value.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + ENTRY_LEN * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.code().to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The permission bits of a mode that grants what this ACL does
    /// (owner, mask or else group, other), with the rest of `perm` kept;
    /// and whether the mode says all of it (no named entry, no mask), so
    /// that the ACL need not be kept (`posix_acl_equiv_mode`).
    pub fn mode(&self, perm: u16) -> (u16, bool) {
        let mut bits = 0u16;
        let mut equivalent = true;
        for e in &self.entries {
            match e.tag {
                Tag::UserObj => bits |= e.perm << 6,
                Tag::GroupObj => bits |= e.perm << 3,
                Tag::Other => bits |= e.perm,
                // The mask comes after the group: it is what the mode's
                // group bits show.
                Tag::Mask => {
                    bits = (bits & !(RWX << 3)) | e.perm << 3;
                    equivalent = false;
                }
                Tag::User | Tag::Group => equivalent = false,
            }
        }
        ((perm & !0o777) | bits, equivalent)
    }

    /// A chmod to `perm`: the owner, other and mask (or the group, without
    /// a mask) entries take its bits; named entries stay
    /// (`posix_acl_chmod`).
    pub fn chmod(&mut self, perm: u16) {
        let has_mask = self.entries.iter().any(|e| e.tag == Tag::Mask);
        for e in &mut self.entries {
            match e.tag {
                Tag::UserObj => e.perm = (perm >> 6) & RWX,
                Tag::Mask => e.perm = (perm >> 3) & RWX,
                Tag::GroupObj if !has_mask => e.perm = (perm >> 3) & RWX,
                Tag::Other => e.perm = perm & RWX,
                _ => {}
            }
        }
    }

    /// A parent's default ACL made the access ACL of an inode created with
    /// `perm`: the ACL and the mode mask each other. Returns the new
    /// inode's permissions and whether the ACL says more than they do
    /// (`posix_acl_create_masq`).
    pub fn inherit(&mut self, perm: u16) -> (u16, bool) {
        let mut mode = perm & 0o777;
        let mut equivalent = true;
        let has_mask = self.entries.iter().any(|e| e.tag == Tag::Mask);
        for e in &mut self.entries {
            match e.tag {
                Tag::UserObj => {
                    e.perm &= (mode >> 6) & RWX;
                    mode &= (e.perm << 6) | !(RWX << 6);
                }
                Tag::User | Tag::Group => equivalent = false,
                Tag::Mask => equivalent = false,
                Tag::Other => {
                    e.perm &= mode & RWX;
                    mode &= e.perm | !RWX;
                }
                Tag::GroupObj => {}
            }
            // The group class is the mask's if there is one, else the
            // group entry's.
            let group_class = if has_mask { Tag::Mask } else { Tag::GroupObj };
            if e.tag == group_class {
                e.perm &= (mode >> 3) & RWX;
                mode &= (e.perm << 3) | !(RWX << 3);
            }
        }
        ((perm & !0o777) | mode, !equivalent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(Tag, u16, u32)]) -> Vec<u8> {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect(),
        }
        .to_bytes()
    }

    const MINIMAL: &[(Tag, u16, u32)] = &[
        (Tag::UserObj, 6, NO_ID),
        (Tag::GroupObj, 4, NO_ID),
        (Tag::Other, 4, NO_ID),
    ];
    const NAMED: &[(Tag, u16, u32)] = &[
        (Tag::UserObj, 7, NO_ID),
        (Tag::User, 6, 1000),
        (Tag::GroupObj, 5, NO_ID),
        (Tag::Group, 7, 50),
        (Tag::Mask, 6, NO_ID),
        (Tag::Other, 0, NO_ID),
    ];

    #[test]
    fn round_trips_and_tells_the_mode() {
        let minimal = Acl::parse(&acl(MINIMAL)).unwrap();
        assert_eq!(minimal.to_bytes(), acl(MINIMAL));
        assert_eq!(minimal.mode(0o4000), (0o4644, true));
        let named = Acl::parse(&acl(NAMED)).unwrap();
        assert_eq!(named.mode(0o1777), (0o1760, false), "the mask is the group");
    }

    #[test]
    fn refuses_what_the_kernel_refuses() {
        assert_eq!(Acl::parse(&[2, 0, 0]), Err(AclError::Length(3)));
        assert_eq!(Acl::parse(&acl(MINIMAL)[..11]), Err(AclError::Length(11)));
        let mut v = acl(MINIMAL);
        v[0] = 1;
        assert_eq!(Acl::parse(&v), Err(AclError::Version(1)));
        let mut v = acl(MINIMAL);
        v[4] = 0x40;
        assert_eq!(Acl::parse(&v), Err(AclError::Tag(0x40)));
        let mut v = acl(MINIMAL);
        v[6] = 8;
        assert_eq!(Acl::parse(&v), Err(AclError::Perm(8)));
        assert_eq!(Acl::parse(&VERSION.to_le_bytes()), Err(AclError::Order));
        let no_mask = [
            (Tag::UserObj, 7, NO_ID),
            (Tag::User, 6, 1000),
            (Tag::GroupObj, 5, NO_ID),
            (Tag::Other, 0, NO_ID),
        ];
        assert_eq!(Acl::parse(&acl(&no_mask)), Err(AclError::Order));
        let reversed: Vec<_> = MINIMAL.iter().rev().copied().collect();
        assert_eq!(Acl::parse(&acl(&reversed)), Err(AclError::Order));
        let twice = [MINIMAL, &MINIMAL[2..]].concat();
        assert_eq!(Acl::parse(&acl(&twice)), Err(AclError::Order));
        // A mask without named entries is valid.
        let masked = [MINIMAL[0], MINIMAL[1], (Tag::Mask, 7, NO_ID), MINIMAL[2]];
        assert!(Acl::parse(&acl(&masked)).is_ok());
    }

    #[test]
    fn chmod_sets_owner_mask_and_other() {
        let mut named = Acl::parse(&acl(NAMED)).unwrap();
        named.chmod(0o2715);
        let perms: Vec<u16> = named.entries().iter().map(|e| e.perm).collect();
        assert_eq!(perms, [7, 6, 5, 7, 1, 5], "named entries and group stay");
        let mut minimal = Acl::parse(&acl(MINIMAL)).unwrap();
        minimal.chmod(0o751);
        let perms: Vec<u16> = minimal.entries().iter().map(|e| e.perm).collect();
        assert_eq!(perms, [7, 5, 1], "without a mask the group follows");
    }

    #[test]
    fn inheriting_masks_both_ways() {
        // A file created 0666 under a default ACL granting a named user rwx.
        let mut inherited = Acl::parse(&acl(NAMED)).unwrap();
        let (perm, extended) = inherited.inherit(0o666);
        assert_eq!(perm, 0o660);
        assert!(extended);
        let perms: Vec<u16> = inherited.entries().iter().map(|e| e.perm).collect();
        assert_eq!(perms, [6, 6, 5, 7, 6, 0], "owner, mask and other masked");
        let mut minimal = Acl::parse(&acl(MINIMAL)).unwrap();
        assert_eq!(minimal.inherit(0o2777), (0o2644, false));
    }
}

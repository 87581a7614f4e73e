//! The one byte layout of an inode's attributes, used by the engine's
//! records (here) and by the directory listings of versions and snapshots
//! (`fs`'s tree): both are on disk, so both read what they always wrote.
//!
//! Layout, all little-endian: kind (1), perm (2), uid (4), gid (4), size
//! (8), nlink (4, [`AttrLayout::WithLinks`] only), rdev (4), then atime,
//! mtime, ctime, crtime (each secs i64 + nanos u32). The two layouts are
//! the two that stores already hold, byte for byte, and are not versioned
//! here: each container (an engine record, a listing) carries its own
//! format byte, and a change to this layout must bump those.

use crate::{Attr, FileKind, Timestamp};

/// Which of the two stored layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrLayout {
    /// With the link count: the engine's records.
    WithLinks,
    /// Without it: a stored listing, where link counts follow from the
    /// entries. Reads with `nlink` 1.
    WithoutLinks,
}

impl AttrLayout {
    /// The length of attributes encoded in this layout.
    pub const fn encoded_len(self) -> usize {
        let links = match self {
            AttrLayout::WithLinks => 4,
            AttrLayout::WithoutLinks => 0,
        };
        1 + 2 + 4 + 4 + 8 + links + 4 + 4 * TIME_LEN
    }
}

const TIME_LEN: usize = 8 + 4;

/// Why stored bytes do not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("ends early")]
    EndsEarly,
    #[error("unknown file kind {0}")]
    UnknownKind(u8),
}

pub fn put_time(out: &mut Vec<u8>, t: Timestamp) {
    out.extend_from_slice(&t.secs.to_le_bytes());
    out.extend_from_slice(&t.nanos.to_le_bytes());
}

pub fn put_attr(out: &mut Vec<u8>, a: &Attr, layout: AttrLayout) {
    out.push(a.kind.code());
    out.extend_from_slice(&a.perm.to_le_bytes());
    out.extend_from_slice(&a.uid.to_le_bytes());
    out.extend_from_slice(&a.gid.to_le_bytes());
    out.extend_from_slice(&a.size.to_le_bytes());
    if layout == AttrLayout::WithLinks {
        out.extend_from_slice(&a.nlink.to_le_bytes());
    }
    out.extend_from_slice(&a.rdev.to_le_bytes());
    for t in [a.atime, a.mtime, a.ctime, a.crtime] {
        put_time(out, t);
    }
}

/// A little-endian cursor over stored bytes that never reads past them.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// What is not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let (head, rest) = self.rest.split_at_checked(n).ok_or(CodecError::EndsEarly)?;
        self.rest = rest;
        Ok(head)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let (head, rest) = self.rest.split_first_chunk().ok_or(CodecError::EndsEarly)?;
        self.rest = rest;
        Ok(*head)
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, CodecError> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn time(&mut self) -> Result<Timestamp, CodecError> {
        let secs = i64::from_le_bytes(self.array()?);
        let nanos = self.u32()?;
        Ok(Timestamp { secs, nanos })
    }

    pub fn kind(&mut self) -> Result<FileKind, CodecError> {
        let code = self.u8()?;
        FileKind::from_code(code).ok_or(CodecError::UnknownKind(code))
    }

    pub fn attr(&mut self, layout: AttrLayout) -> Result<Attr, CodecError> {
        let kind = self.kind()?;
        let perm = self.u16()?;
        let uid = self.u32()?;
        let gid = self.u32()?;
        let size = self.u64()?;
        let nlink = match layout {
            AttrLayout::WithLinks => self.u32()?,
            AttrLayout::WithoutLinks => 1,
        };
        let rdev = self.u32()?;
        Ok(Attr {
            kind,
            perm,
            uid,
            gid,
            size,
            nlink,
            rdev,
            atime: self.time()?,
            mtime: self.time()?,
            ctime: self.time()?,
            crtime: self.time()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KINDS: [FileKind; 7] = [
        FileKind::File,
        FileKind::Dir,
        FileKind::Symlink,
        FileKind::Fifo,
        FileKind::Socket,
        FileKind::CharDevice,
        FileKind::BlockDevice,
    ];

    fn time() -> impl Strategy<Value = Timestamp> {
        (any::<i64>(), any::<u32>()).prop_map(|(secs, nanos)| Timestamp { secs, nanos })
    }

    fn attr() -> impl Strategy<Value = Attr> {
        (
            0..KINDS.len(),
            any::<(u16, u32, u32, u64, u32, u32)>(),
            (time(), time(), time(), time()),
        )
            .prop_map(
                |(k, (perm, uid, gid, size, nlink, rdev), (atime, mtime, ctime, crtime))| Attr {
                    kind: KINDS[k],
                    perm,
                    uid,
                    gid,
                    size,
                    nlink,
                    rdev,
                    atime,
                    mtime,
                    ctime,
                    crtime,
                },
            )
    }

    fn layout() -> impl Strategy<Value = AttrLayout> {
        prop_oneof![Just(AttrLayout::WithLinks), Just(AttrLayout::WithoutLinks)]
    }

    proptest! {
        #[test]
        fn attributes_round_trip(a in attr(), layout in layout(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut out = Vec::new();
            put_attr(&mut out, &a, layout);
            prop_assert_eq!(out.len(), layout.encoded_len());
            out.extend_from_slice(&tail);
            let mut r = Reader::new(&out);
            let back = r.attr(layout).unwrap();
            let want = match layout {
                AttrLayout::WithLinks => a,
                AttrLayout::WithoutLinks => Attr { nlink: 1, ..a },
            };
            prop_assert_eq!(back, want);
            prop_assert_eq!(r.rest(), &tail[..]);
        }

        #[test]
        fn cut_attributes_end_early(a in attr(), layout in layout(), cut in 1usize..40) {
            let mut out = Vec::new();
            put_attr(&mut out, &a, layout);
            let cut = cut.min(out.len());
            let got = Reader::new(&out[..out.len() - cut]).attr(layout);
            prop_assert_eq!(got, Err(CodecError::EndsEarly));
        }
    }

    #[test]
    fn an_unknown_kind_is_named() {
        let mut out = Vec::new();
        put_attr(&mut out, &attr_of(FileKind::File), AttrLayout::WithLinks);
        out[0] = 0xee;
        assert_eq!(
            Reader::new(&out).attr(AttrLayout::WithLinks),
            Err(CodecError::UnknownKind(0xee))
        );
    }

    fn attr_of(kind: FileKind) -> Attr {
        let t = Timestamp { secs: 0, nanos: 0 };
        Attr {
            kind,
            perm: 0,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 0,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        }
    }
}

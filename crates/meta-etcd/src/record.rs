//! The values stored under the keys: inode records, directory entries and
//! the result records of operations (for a retry after an unknown outcome).

use meta::codec::{put_attr, AttrLayout, Reader};
use meta::{ChunkId, Content, FileKind, Inode, InodeId};

use crate::EtcdError;

/// An inode as stored: the inode, its parent pointer (as in redb: a
/// directory's holder, a non-directory's last name's directory; the
/// root's is itself) and, for a directory, its number of entries (so that
/// an rmdir and a create in the directory both read and write this one
/// key, and so conflict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rec {
    pub inode: Inode,
    pub parent: InodeId,
    pub entries: u64,
}

impl Rec {
    pub fn is_dir(&self) -> bool {
        self.inode.attr.kind == FileKind::Dir
    }
}

const FORMAT: u8 = 1;
const TAG_EMPTY: u8 = 0;
const TAG_INLINE: u8 = 1;
const TAG_RECIPE: u8 = 2;

/// Format (1), attributes with links ([`meta::codec`]), parent (8),
/// entries (8), content tag (1), then the inline bytes or the recipe id.
pub(crate) fn encode(rec: &Rec) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.push(FORMAT);
    put_attr(&mut out, &rec.inode.attr, AttrLayout::WithLinks);
    out.extend_from_slice(&rec.parent.0.to_le_bytes());
    out.extend_from_slice(&rec.entries.to_le_bytes());
    match &rec.inode.content {
        Content::Empty => out.push(TAG_EMPTY),
        Content::Inline(b) => {
            out.push(TAG_INLINE);
            out.extend_from_slice(b);
        }
        Content::Recipe(id) => {
            out.push(TAG_RECIPE);
            out.extend_from_slice(id.as_bytes());
        }
    }
    out
}

pub(crate) fn decode(ino: InodeId, b: &[u8]) -> Result<Rec, EtcdError> {
    let bad = |why| EtcdError::Corrupt { ino: ino.0, why };
    let mut r = Reader::new(b);
    if r.u8().map_err(|_| bad("empty record"))? != FORMAT {
        return Err(bad("unknown record format"));
    }
    let attr = r
        .attr(AttrLayout::WithLinks)
        .map_err(|_| bad("bad attributes"))?;
    let parent = InodeId(r.u64().map_err(|_| bad("no parent"))?);
    let entries = r.u64().map_err(|_| bad("no entry count"))?;
    let content = match (r.u8().map_err(|_| bad("no content"))?, r.rest()) {
        (TAG_EMPTY, []) => Content::Empty,
        (TAG_INLINE, bytes) => Content::Inline(bytes.to_vec()),
        (TAG_RECIPE, id) => Content::Recipe(ChunkId::from_bytes(
            id.try_into().map_err(|_| bad("bad recipe id"))?,
        )),
        _ => return Err(bad("bad content")),
    };
    Ok(Rec {
        inode: Inode {
            id: ino,
            attr,
            content,
        },
        parent,
        entries,
    })
}

/// A directory entry's value: inode (8, little-endian) and kind (1).
pub(crate) fn dval(ino: InodeId, kind: FileKind) -> Vec<u8> {
    let mut v = ino.0.to_le_bytes().to_vec();
    v.push(kind.code());
    v
}

pub(crate) fn dval_decode(v: &[u8]) -> Result<(InodeId, FileKind), EtcdError> {
    match v {
        [n @ .., k] if n.len() == 8 => Ok((
            InodeId(u64::from_le_bytes(n.try_into().unwrap())),
            FileKind::from_code(*k).ok_or(EtcdError::BadEntry)?,
        )),
        _ => Err(EtcdError::BadEntry),
    }
}

/// What an operation returned, as its result record keeps it: a retry
/// after an unknown outcome that finds the record returns this.
pub(crate) trait Outcome: Sized {
    fn encode(&self) -> Vec<u8>;
    fn decode(b: &[u8]) -> Result<Self, EtcdError>;
}

impl Outcome for () {
    fn encode(&self) -> Vec<u8> {
        Vec::new()
    }
    fn decode(_: &[u8]) -> Result<Self, EtcdError> {
        Ok(())
    }
}

impl Outcome for bool {
    fn encode(&self) -> Vec<u8> {
        vec![u8::from(*self)]
    }
    fn decode(b: &[u8]) -> Result<Self, EtcdError> {
        match b {
            [v @ (0 | 1)] => Ok(*v == 1),
            _ => Err(EtcdError::BadOutcome),
        }
    }
}

impl Outcome for Inode {
    fn encode(&self) -> Vec<u8> {
        let mut out = self.id.0.to_le_bytes().to_vec();
        out.extend(encode(&Rec {
            inode: self.clone(),
            parent: InodeId(0),
            entries: 0,
        }));
        out
    }
    fn decode(b: &[u8]) -> Result<Self, EtcdError> {
        let (id, rec) = b.split_at_checked(8).ok_or(EtcdError::BadOutcome)?;
        let id = InodeId(u64::from_le_bytes(id.try_into().unwrap()));
        Ok(decode(id, rec)?.inode)
    }
}

impl Outcome for Option<Inode> {
    fn encode(&self) -> Vec<u8> {
        self.as_ref().map(Inode::encode).unwrap_or_default()
    }
    fn decode(b: &[u8]) -> Result<Self, EtcdError> {
        if b.is_empty() {
            return Ok(None);
        }
        Inode::decode(b).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meta::{Attr, Timestamp};

    fn inode(content: Content) -> Inode {
        let t = |s| Timestamp {
            secs: s,
            nanos: 999_999_999,
        };
        Inode {
            id: InodeId(u64::MAX - 1),
            attr: Attr {
                kind: FileKind::File,
                perm: 0o7777,
                uid: u32::MAX,
                gid: 7,
                size: u64::MAX,
                nlink: 3,
                rdev: 0x1234_5678,
                atime: t(-1),
                mtime: t(i64::MAX),
                ctime: t(0),
                crtime: t(i64::MIN),
            },
            content,
        }
    }

    #[test]
    fn records_and_outcomes_read_back_as_written() {
        for content in [
            Content::Empty,
            Content::Inline(b"bytes".to_vec()),
            Content::Recipe(ChunkId::from_bytes([9; 32])),
        ] {
            let rec = Rec {
                inode: inode(content),
                parent: InodeId(42),
                entries: 17,
            };
            assert_eq!(decode(rec.inode.id, &encode(&rec)).unwrap(), rec);
            let i = rec.inode.clone();
            assert_eq!(Inode::decode(&i.encode()).unwrap(), i);
            assert_eq!(
                <Option<Inode>>::decode(&Some(i.clone()).encode()).unwrap(),
                Some(i)
            );
        }
        assert_eq!(<Option<Inode>>::decode(&None.encode()).unwrap(), None);
        let v = dval(InodeId(5), FileKind::Symlink);
        assert_eq!(dval_decode(&v).unwrap(), (InodeId(5), FileKind::Symlink));
        assert!(dval_decode(&v[..8]).is_err());
        assert!(decode(InodeId(1), &[2, 0]).is_err());
    }
}

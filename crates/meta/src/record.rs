//! The bytes of the engine's tables: the inode record codec and the keys.
//!
//! Tables:
//! - `inodes`: inode number -> record (see [`encode`]): the attributes, the
//!   parent pointer (see `parents`), and the content, ended by a checksum
//!   that a read verifies (a damaged record is an error, never served).
//! - `dirents`: 8-byte big-endian parent ++ name -> 8-byte little-endian
//!   inode number ++ kind byte. Big-endian parents make a directory's
//!   entries one contiguous key range, in byte order of name.
//! - `xattrs`: 8-byte big-endian inode ++ name -> value.
//! - `orphans`: inode number -> () for inodes with no name kept for an open
//!   handle.
//! - `meta`: `next_ino` (the next inode number to hand out), `files` and
//!   `dirs` (the counts [`MetaStore::counts`](crate::MetaStore::counts)
//!   reports), `file_parents` (set once non-directories' parent pointers
//!   were filled in: `parents`), `records_summed` (set once every record,
//!   and every copy the path index keeps, carries its checksum).

use std::ops::Bound;

use ids::ChunkId;
use redb::{ReadableTable, TableDefinition};

use crate::codec::{put_attr, AttrLayout, CodecError, Reader};
use crate::{Content, FileKind, Inode, InodeId, MetaError, Result};

pub(crate) const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
pub(crate) const DIRENTS: TableDefinition<&[u8], [u8; 9]> = TableDefinition::new("dirents");
pub(crate) const XATTRS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("xattrs");
pub(crate) const ORPHANS: TableDefinition<u64, ()> = TableDefinition::new("orphans");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Each file's intent log, `(inode, sequence)` to a record of `fs` (see
/// [`crate::MetaStore::append_intent`]).
pub(crate) const INTENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("intents");

pub(crate) const NEXT_INO: &str = "next_ino";
pub(crate) const FILES: &str = "files";
pub(crate) const DIRS: &str = "dirs";

pub(crate) fn corrupt(what: String) -> MetaError {
    MetaError::Store(redb::Error::Corrupted(what))
}

/// An inode as stored: the inode and its parent pointer: for a directory,
/// the directory holding its name (the root's parent is the root); for a
/// non-directory, the directory of the name it was last given. Stored as 0
/// when `None` (no inode has number 0): a non-directory of a store from
/// before non-directories kept one, until `parents` fills it in.
#[derive(Debug, Clone)]
pub(crate) struct Rec {
    pub inode: Inode,
    pub parent: Option<InodeId>,
}

impl Rec {
    pub fn is_dir(&self) -> bool {
        self.inode.attr.kind == FileKind::Dir
    }
}

/// Records written before they carried a checksum: read, never written.
const FORMAT_UNSUMMED: u8 = 1;
const FORMAT: u8 = 2;
/// Offset of the content tag in a record; the content payload follows it.
const CONTENT_TAG_AT: usize = 1 + AttrLayout::WithLinks.encoded_len() + 8;
const TAG_EMPTY: u8 = 0;
const TAG_INLINE: u8 = 1;
const TAG_RECIPE: u8 = 2;
/// Bytes of the checksum that ends a record.
const SUM_LEN: usize = 8;

/// The checksum of record `body` of inode `ino`: the first 8 bytes of its
/// BLAKE3 hash with the inode number, so that a record damaged on disk, or
/// found under another inode's key, is told apart from a good one.
fn sum(ino: u64, body: &[u8]) -> [u8; SUM_LEN] {
    let mut h = blake3::Hasher::new();
    h.update(&ino.to_le_bytes());
    h.update(body);
    let mut out = [0; SUM_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..SUM_LEN]);
    out
}

/// The record layout, all little-endian: format (1), the attributes with
/// their link count ([`crate::codec`]), parent (8, 0 for none), content tag
/// (1), then the inline bytes or the 32-byte recipe chunk id, then the
/// checksum of all of that ([`SUM_LEN`], see `sum`). Every byte a read
/// returns from an inline file, and every size and chunk id that locates a
/// file's data, is verified by it when the record is decoded.
pub(crate) fn encode(ino: u64, rec: &Rec) -> Vec<u8> {
    let extra = match &rec.inode.content {
        Content::Empty => 0,
        Content::Inline(b) => b.len(),
        Content::Recipe(_) => ChunkId::LEN,
    };
    let mut out = Vec::with_capacity(CONTENT_TAG_AT + 1 + extra + SUM_LEN);
    out.push(FORMAT);
    put_attr(&mut out, &rec.inode.attr, AttrLayout::WithLinks);
    out.extend_from_slice(&rec.parent.map_or(0, |p| p.0).to_le_bytes());
    debug_assert_eq!(out.len(), CONTENT_TAG_AT);
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
    let checksum = sum(ino, &out);
    out.extend_from_slice(&checksum);
    out
}

/// Decodes the record of inode `ino`; one whose checksum does not match is
/// an error naming the inode, never a record.
pub(crate) fn decode(ino: u64, b: &[u8]) -> Result<Rec> {
    let bad = |why: &dyn std::fmt::Display| corrupt(format!("inode {ino}: {why}"));
    let b = match b.first() {
        Some(&FORMAT) => {
            let Some(at) = b.len().checked_sub(SUM_LEN) else {
                return Err(bad(&"record too short"));
            };
            let (body, stored) = b.split_at(at);
            if stored != sum(ino, body) {
                return Err(bad(&"its record fails its checksum (damaged metadata)"));
            }
            body
        }
        _ => b,
    };
    let mut r = Reader::new(b);
    let fields = |r: &mut Reader<'_>| -> std::result::Result<_, CodecError> {
        if !matches!(r.u8()?, FORMAT | FORMAT_UNSUMMED) {
            return Ok(None);
        }
        let attr = r.attr(AttrLayout::WithLinks)?;
        let parent = Some(r.u64()?).filter(|&p| p != 0).map(InodeId);
        Ok(Some((attr, parent, r.u8()?)))
    };
    let (attr, parent, tag) = match fields(&mut r) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(bad(&"unknown record format")),
        Err(e) => return Err(bad(&e)),
    };
    let content = match (tag, r.rest()) {
        (TAG_EMPTY, []) => Content::Empty,
        (TAG_INLINE, bytes) => Content::Inline(bytes.to_vec()),
        (TAG_RECIPE, id) => match <[u8; ChunkId::LEN]>::try_from(id) {
            Ok(id) => Content::Recipe(ChunkId::from_bytes(id)),
            Err(_) => return Err(bad(&"bad content")),
        },
        _ => return Err(bad(&"bad content")),
    };
    Ok(Rec {
        inode: Inode {
            id: InodeId(ino),
            attr,
            content,
        },
        parent,
    })
}

/// Marks a store whose records all carry their checksum (`META`).
pub(crate) const RECORDS_SUMMED: &str = "records_summed";

/// Writes again, with its checksum, every inode record that has none (a
/// store from before records were summed). Returns how many.
pub(crate) fn sum_records(inodes: &mut redb::Table<'_, u64, &'static [u8]>) -> Result<u64> {
    const STEP: usize = 4096;
    let mut fixed = 0;
    let mut after = None;
    loop {
        let range = match after {
            Some(ino) => inodes.range((Bound::Excluded(ino), Bound::Unbounded))?,
            None => inodes.range::<u64>(..)?,
        };
        let mut step = Vec::new();
        let mut read = 0;
        for entry in range.take(STEP) {
            read += 1;
            let (k, v) = entry?;
            let ino = k.value();
            if unsummed(v.value()) {
                step.push((ino, encode(ino, &decode(ino, v.value())?)));
            }
            after = Some(ino);
        }
        for (ino, bytes) in &step {
            inodes.insert(*ino, bytes.as_slice())?;
        }
        fixed += step.len() as u64;
        if read < STEP {
            return Ok(fixed);
        }
    }
}

/// Whether a record holds a recipe, without decoding it.
pub(crate) fn holds_recipe(b: &[u8]) -> bool {
    b.get(CONTENT_TAG_AT) == Some(&TAG_RECIPE)
}

/// Whether a record was written without a checksum (an older store's).
pub(crate) fn unsummed(b: &[u8]) -> bool {
    b.first() == Some(&FORMAT_UNSUMMED)
}

/// The kind in a record, without decoding the rest.
pub(crate) fn record_kind(ino: u64, b: &[u8]) -> Result<FileKind> {
    match b {
        [FORMAT | FORMAT_UNSUMMED, k, ..] => FileKind::from_code(*k),
        _ => None,
    }
    .ok_or_else(|| corrupt(format!("inode {ino}: bad record")))
}

pub(crate) fn dkey(parent: InodeId, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.0.to_be_bytes());
    k.extend_from_slice(name);
    k
}

pub(crate) fn dval(ino: InodeId, kind: FileKind) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[..8].copy_from_slice(&ino.0.to_le_bytes());
    v[8] = kind.code();
    v
}

pub(crate) fn dval_decode(v: [u8; 9]) -> Result<(InodeId, FileKind)> {
    let ino = InodeId(u64::from_le_bytes(v[..8].try_into().unwrap()));
    let kind =
        FileKind::from_code(v[8]).ok_or_else(|| corrupt(format!("entry of {ino:?}: bad kind")))?;
    Ok((ino, kind))
}

/// The key range of everything under the 8-byte big-endian prefix `id`.
pub(crate) fn prefix_range(id: u64) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lo = Bound::Included(id.to_be_bytes().to_vec());
    let hi = match id.checked_add(1) {
        Some(n) => Bound::Excluded(n.to_be_bytes().to_vec()),
        None => Bound::Unbounded,
    };
    (lo, hi)
}

pub(crate) fn as_slices(r: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        r.0.as_ref().map(|v| v.as_slice()),
        r.1.as_ref().map(|v| v.as_slice()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Timestamp};

    fn rec(kind: FileKind, content: Content, parent: Option<InodeId>) -> Rec {
        let ts = |s| Timestamp {
            secs: s,
            nanos: 999_999_999,
        };
        Rec {
            inode: Inode {
                id: InodeId(u64::MAX - 1),
                attr: Attr {
                    kind,
                    perm: 0o7777,
                    uid: u32::MAX,
                    gid: 7,
                    size: u64::MAX,
                    nlink: 3,
                    rdev: 0x1234_5678,
                    atime: ts(-1),
                    mtime: ts(i64::MAX),
                    ctime: ts(i64::MIN),
                    crtime: ts(0),
                },
                content,
            },
            parent,
        }
    }

    #[test]
    fn records_round_trip() {
        let kinds = [
            FileKind::File,
            FileKind::Dir,
            FileKind::Symlink,
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDevice,
            FileKind::BlockDevice,
        ];
        let contents = [
            Content::Empty,
            Content::Inline(Vec::new()),
            Content::Inline(b"some bytes".to_vec()),
            Content::Recipe(ChunkId::from_bytes([0xab; 32])),
        ];
        for kind in kinds {
            for content in &contents {
                let r = rec(kind, content.clone(), Some(InodeId(42)));
                assert_eq!(
                    decode(
                        1,
                        &encode(
                            1,
                            &Rec {
                                parent: None,
                                ..r.clone()
                            }
                        )
                    )
                    .unwrap()
                    .parent,
                    None
                );
                let bytes = encode(r.inode.id.0, &r);
                let back = decode(r.inode.id.0, &bytes).unwrap();
                assert_eq!(back.inode, r.inode);
                assert_eq!(back.parent, r.parent);
                assert_eq!(record_kind(1, &bytes).unwrap(), kind);
                assert_eq!(
                    bytes[CONTENT_TAG_AT] == TAG_RECIPE,
                    matches!(content, Content::Recipe(_))
                );
            }
        }
        // The fixed part is small: 85 bytes and the checksum.
        assert_eq!(
            encode(1, &rec(FileKind::File, Content::Empty, None)).len(),
            85 + SUM_LEN
        );
    }

    #[test]
    fn bad_records_are_errors_not_panics() {
        let good = encode(
            5,
            &rec(
                FileKind::File,
                Content::Recipe(ChunkId::from_bytes([1; 32])),
                None,
            ),
        );
        for len in 0..good.len() {
            assert!(decode(5, &good[..len]).is_err(), "truncated to {len}");
        }
        let mut bad = good.clone();
        bad[0] = 9;
        assert!(decode(5, &bad).is_err(), "unknown format");
        assert!(record_kind(5, &bad).is_err());
        let mut bad = good.clone();
        bad[1] = 0;
        assert!(decode(5, &bad).is_err(), "unknown kind");
        let mut bad = good.clone();
        bad[CONTENT_TAG_AT] = 3;
        assert!(decode(5, &bad).is_err(), "unknown content tag");
        let mut bad = good.clone();
        bad.push(0);
        assert!(decode(5, &bad).is_err(), "a recipe id of 33 bytes");
        assert!(decode(6, &good).is_err(), "another inode's record");
        assert!(dval_decode([0; 9]).is_err());
    }

    proptest::proptest! {
        /// Any one bit flipped anywhere in a record is refused, never
        /// decoded into another inode, size or content.
        #[test]
        fn a_flipped_bit_is_never_a_record(
            inline in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            bit in 0usize..1000,
        ) {
            let good = encode(9, &rec(FileKind::File, Content::Inline(inline), Some(InodeId(2))));
            let bit = bit % (good.len() * 8);
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            proptest::prop_assert!(decode(9, &bad).is_err());
        }
    }

    /// A record of a store from before records were summed is read as it
    /// was written, and written again with its checksum.
    #[test]
    fn unsummed_records_are_read() {
        let r = rec(
            FileKind::File,
            Content::Inline(b"old".to_vec()),
            Some(InodeId(3)),
        );
        let mut old = encode(7, &r);
        old.truncate(old.len() - SUM_LEN);
        old[0] = FORMAT_UNSUMMED;
        assert!(unsummed(&old));
        let back = decode(7, &old).unwrap();
        assert_eq!(
            (back.inode.attr, &back.inode.content),
            (r.inode.attr, &r.inode.content)
        );
        assert!(!unsummed(&encode(7, &back)));
    }

    #[test]
    fn entry_keys_sort_by_parent_then_name() {
        let mut keys = [
            dkey(InodeId(256), b"a"),
            dkey(InodeId(1), b"zz"),
            dkey(InodeId(255), b"\xff"),
            dkey(InodeId(1), b"z"),
            dkey(InodeId(2), b""),
        ];
        keys.sort();
        let parents: Vec<u64> = keys
            .iter()
            .map(|k| u64::from_be_bytes(k[..8].try_into().unwrap()))
            .collect();
        assert_eq!(parents, [1, 1, 2, 255, 256]);
        assert_eq!(&keys[0][8..], b"z");
        let (lo, hi) = prefix_range(u64::MAX);
        assert_eq!(lo, Bound::Included(vec![0xff; 8]));
        assert_eq!(hi, Bound::Unbounded);
    }

    /// The bytes of a record as every store so far holds them, between
    /// its format byte and its checksum.
    #[test]
    fn stored_bytes_are_the_layout_written_before() {
        let r = rec(
            FileKind::Symlink,
            Content::Inline(b"t".to_vec()),
            Some(InodeId(3)),
        );
        let hex: String = encode(r.inode.id.0, &r)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(&hex[..2], "02");
        assert_eq!(&hex[2..hex.len() - 2 * SUM_LEN], "03ff0fffffffff07000000ffffffffffffffff0300000078563412ffffffffffffffffffc99a3bffffffffffffff7fffc99a3b0000000000000080ffc99a3b0000000000000000ffc99a3b03000000000000000174");
    }
}

//! The namespace as a Merkle tree in the chunk store: what a version and a
//! snapshot are.
//!
//! A directory is stored as a *listing*: its entries in name order, each
//! with the inode's number, attributes, extended attributes and content (a
//! file's recipe root or inline bytes, a symlink's target, a subdirectory's
//! listing root). The listing's bytes are content-defined-chunked and stored
//! under a recipe tree like a file, so a directory that did not change
//! produces the very same root id and costs nothing, and a huge directory
//! where one entry changed re-stores a chunk or two.
//!
//! A *version record* is one chunk: magic `CVER`, format, creation time,
//! counters and the root directory as an entry. Roots (`version/<n>`,
//! `snapshot/<name>`) point at records.
//!
//! Formats (little-endian): a listing is `CDIR`, format u8, entry count u32,
//! entries. An entry is name (u16 length + bytes), ino u64, the attributes
//! in `meta::codec`'s layout without links (kind u8, perm u16, uid u32, gid
//! u32, size u64, rdev u32, atime/mtime/ctime/crtime as i64 secs + u32
//! nanos; the engine's records use the same codec), content (tag u8: 0 none, 1 inline u32+bytes, 2 recipe
//! 32 bytes, 3 directory listing 32 bytes), xattrs (u16 count, each name
//! u16+bytes and value u32+bytes). Link counts are not stored: they follow
//! from the entries.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use cas::{ChunkId, Store, StreamWriter};
use chunking::ChunkerParams;
use meta::codec::{put_attr, put_time, AttrLayout, CodecError, Reader};
use meta::{Attr, Content, DirEntry, FileKind, Inode, InodeId, MetaView, Timestamp};
use recipe::Recipe;

use crate::{Damage, FsError, Result};

const LISTING_MAGIC: &[u8; 4] = b"CDIR";
const RECORD_MAGIC: &[u8; 4] = b"CVER";
const FORMAT: u8 = 1;

/// What an entry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeContent {
    Empty,
    Inline(Vec<u8>),
    Recipe(ChunkId),
    /// A directory: the root of its listing.
    Dir(ChunkId),
}

/// One name in a stored directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub name: Vec<u8>,
    pub ino: InodeId,
    /// Attributes as they were (`nlink` is not stored and reads as 1).
    pub attr: Attr,
    pub content: TreeContent,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl TreeEntry {
    /// The entry's content as the metadata engine holds it (a directory's
    /// content is its entries, which the engine keeps apart).
    pub fn meta_content(&self) -> Content {
        match &self.content {
            TreeContent::Empty | TreeContent::Dir(_) => Content::Empty,
            TreeContent::Inline(b) => Content::Inline(b.clone()),
            TreeContent::Recipe(id) => Content::Recipe(*id),
        }
    }

    /// Whether two entries describe the same file as far as a user can see,
    /// apart from their name and inode number.
    pub fn same_as(&self, other: &TreeEntry) -> bool {
        let (a, b) = (&self.attr, &other.attr);
        self.content == other.content
            && self.xattrs == other.xattrs
            && (a.kind, a.perm, a.uid, a.gid, a.size, a.rdev, a.mtime)
                == (b.kind, b.perm, b.uid, b.gid, b.size, b.rdev, b.mtime)
    }
}

/// A version record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub created: Timestamp,
    pub files: u64,
    pub dirs: u64,
    /// Sum of the sizes of regular files (hard links counted once).
    pub logical_bytes: u64,
    pub root: TreeEntry,
}

/// What storing a tree cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeStats {
    pub dirs_written: u64,
    pub new_bytes: u64,
}

fn encode_entry(e: &TreeEntry, out: &mut Vec<u8>) {
    out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
    out.extend_from_slice(&e.name);
    out.extend_from_slice(&e.ino.0.to_le_bytes());
    put_attr(out, &e.attr, AttrLayout::WithoutLinks);
    match &e.content {
        TreeContent::Empty => out.push(0),
        TreeContent::Inline(b) => {
            out.push(1);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        TreeContent::Recipe(id) => {
            out.push(2);
            out.extend_from_slice(id.as_bytes());
        }
        TreeContent::Dir(id) => {
            out.push(3);
            out.extend_from_slice(id.as_bytes());
        }
    }
    out.extend_from_slice(&(e.xattrs.len() as u16).to_le_bytes());
    for (name, value) in &e.xattrs {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
}

/// A cursor over stored bytes whose every read names what is wrong.
struct Cursor<'a> {
    r: Reader<'a>,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Cursor {
            r: Reader::new(bytes),
            what,
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.r.take(n).map_err(|e| self.codec(e))
    }
    fn u8(&mut self) -> Result<u8> {
        self.r.u8().map_err(|e| self.codec(e))
    }
    fn u16(&mut self) -> Result<u16> {
        self.r.u16().map_err(|e| self.codec(e))
    }
    fn u32(&mut self) -> Result<u32> {
        self.r.u32().map_err(|e| self.codec(e))
    }
    fn u64(&mut self) -> Result<u64> {
        self.r.u64().map_err(|e| self.codec(e))
    }
    fn time(&mut self) -> Result<Timestamp> {
        self.r.time().map_err(|e| self.codec(e))
    }
    fn attr(&mut self) -> Result<Attr> {
        self.r
            .attr(AttrLayout::WithoutLinks)
            .map_err(|e| self.codec(e))
    }
    fn id(&mut self) -> Result<ChunkId> {
        self.r
            .array()
            .map(ChunkId::from_bytes)
            .map_err(|e| self.codec(e))
    }
    fn codec(&self, e: CodecError) -> FsError {
        self.bad(match e {
            CodecError::EndsEarly => Damage::EndsEarly,
            CodecError::UnknownKind(_) => Damage::UnknownKind,
        })
    }
    fn bad(&self, damage: Damage) -> FsError {
        FsError::Malformed {
            what: self.what,
            damage,
        }
    }
}

fn decode_entry(c: &mut Cursor<'_>) -> Result<TreeEntry> {
    let name_len = c.u16()? as usize;
    let name = c.take(name_len)?.to_vec();
    let ino = InodeId(c.u64()?);
    let attr = c.attr()?;
    let kind = attr.kind;
    let content = match c.u8()? {
        0 => TreeContent::Empty,
        1 => {
            let n = c.u32()? as usize;
            TreeContent::Inline(c.take(n)?.to_vec())
        }
        2 => TreeContent::Recipe(c.id()?),
        3 => TreeContent::Dir(c.id()?),
        _ => return Err(c.bad(Damage::UnknownContentTag)),
    };
    if (kind == FileKind::Dir) != matches!(content, TreeContent::Dir(_)) {
        return Err(c.bad(Damage::KindContentDisagree));
    }
    let count = c.u16()?;
    let mut xattrs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let n = c.u16()? as usize;
        let name = c.take(n)?.to_vec();
        let n = c.u32()? as usize;
        xattrs.push((name, c.take(n)?.to_vec()));
    }
    Ok(TreeEntry {
        name,
        ino,
        attr,
        content,
        xattrs,
    })
}

pub fn encode_listing(entries: &[TreeEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(LISTING_MAGIC);
    out.push(FORMAT);
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        encode_entry(e, &mut out);
    }
    out
}

pub fn decode_listing(bytes: &[u8]) -> Result<Vec<TreeEntry>> {
    let mut c = Cursor::new(bytes, "directory listing");
    if c.take(4)? != LISTING_MAGIC || c.u8()? != FORMAT {
        return Err(c.bad(Damage::NotListing));
    }
    let count = c.u32()?;
    let mut out = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        out.push(decode_entry(&mut c)?);
    }
    if !c.r.rest().is_empty() {
        return Err(c.bad(Damage::TrailingBytes));
    }
    Ok(out)
}

pub fn encode_record(r: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(RECORD_MAGIC);
    out.push(FORMAT);
    put_time(&mut out, r.created);
    out.extend_from_slice(&r.files.to_le_bytes());
    out.extend_from_slice(&r.dirs.to_le_bytes());
    out.extend_from_slice(&r.logical_bytes.to_le_bytes());
    encode_entry(&r.root, &mut out);
    out
}

/// Whether a chunk is a version record (by its magic).
pub fn is_record(bytes: &[u8]) -> bool {
    bytes.starts_with(RECORD_MAGIC)
}

pub fn decode_record(bytes: &[u8]) -> Result<Record> {
    let mut c = Cursor::new(bytes, "version record");
    if c.take(4)? != RECORD_MAGIC || c.u8()? != FORMAT {
        return Err(c.bad(Damage::NotRecord));
    }
    let created = c.time()?;
    let (files, dirs, logical_bytes) = (c.u64()?, c.u64()?, c.u64()?);
    let root = decode_entry(&mut c)?;
    if !matches!(root.content, TreeContent::Dir(_)) {
        return Err(c.bad(Damage::RootNotDir));
    }
    Ok(Record {
        created,
        files,
        dirs,
        logical_bytes,
        root,
    })
}

pub fn read_record(store: &Store, id: &ChunkId) -> Result<Record> {
    decode_record(&store.read_chunk(id)?)
}

/// The entries of a stored directory, in name order.
pub fn read_listing(store: &Store, root: &ChunkId) -> Result<Vec<TreeEntry>> {
    let recipe = Recipe::open(store, *root)?;
    decode_listing(&recipe.read_at(0, recipe.len())?)
}

/// A file as a program last left it whole (closed or fsynced).
#[derive(Debug, Clone)]
pub struct LeftWhole {
    pub content: Content,
    pub size: u64,
    pub mtime: Timestamp,
}

/// Writes the namespace seen by `view` into the store through `writer`
/// (not flushed), dated `created`, and returns the record's chunk id and
/// the record. A file in `taken` is written as given there, not as the
/// view has it (an open file as of its last close or fsync).
pub fn write_tree(
    view: &dyn MetaView,
    taken: &HashMap<InodeId, LeftWhole>,
    writer: &mut StreamWriter,
    params: ChunkerParams,
    created: Timestamp,
) -> Result<(ChunkId, Record, TreeStats)> {
    let root_inode = view.get(InodeId::ROOT)?;
    let mut w = TreeWriter {
        view,
        taken,
        writer,
        params,
        stats: TreeStats::default(),
        files: 0,
        dirs: 1,
        logical: 0,
        seen_links: HashSet::new(),
    };
    let root = w.tree(root_inode)?;
    let record = Record {
        created,
        files: w.files,
        dirs: w.dirs,
        logical_bytes: w.logical,
        root,
    };
    let before = w.writer.stats().new_bytes;
    let id = w.writer.write_chunk(Bytes::from(encode_record(&record)))?;
    w.stats.new_bytes += w.writer.stats().new_bytes - before;
    Ok((id, record, w.stats))
}

struct TreeWriter<'a> {
    view: &'a dyn MetaView,
    taken: &'a HashMap<InodeId, LeftWhole>,
    writer: &'a mut StreamWriter,
    params: ChunkerParams,
    stats: TreeStats,
    files: u64,
    dirs: u64,
    logical: u64,
    seen_links: HashSet<InodeId>,
}

/// A directory on the way down from the root whose listing is not stored
/// yet: the names left to visit and the entries of those done.
struct OpenDir {
    name: Vec<u8>,
    inode: Inode,
    left: std::vec::IntoIter<DirEntry>,
    done: Vec<TreeEntry>,
}

impl TreeWriter<'_> {
    fn entry(&self, name: Vec<u8>, inode: &Inode, content: TreeContent) -> Result<TreeEntry> {
        Ok(TreeEntry {
            name,
            ino: inode.id,
            attr: Attr {
                nlink: 1,
                ..inode.attr
            },
            content,
            xattrs: self.view.xattrs(inode.id)?,
        })
    }

    fn open(&self, name: Vec<u8>, inode: Inode) -> Result<OpenDir> {
        Ok(OpenDir {
            left: self.view.entries(inode.id)?.into_iter(),
            name,
            inode,
            done: Vec::new(),
        })
    }

    /// Stores the tree under the root directory, each listing after its
    /// subdirectories' (depth first, in name order), and returns the
    /// root's entry. The directories on the way down are an explicit
    /// stack: a tree is as deep as its users make it.
    fn tree(&mut self, root: Inode) -> Result<TreeEntry> {
        let mut path = vec![self.open(Vec::new(), root)?];
        let mut on_path = HashSet::from([InodeId::ROOT]);
        loop {
            let top = path.last_mut().expect("the root is open until the end");
            if let Some(e) = top.left.next() {
                let mut inode = self.view.get(e.ino)?;
                if let Some(s) = self.taken.get(&inode.id) {
                    inode.content = s.content.clone();
                    inode.attr.size = s.size;
                    inode.attr.mtime = s.mtime;
                }
                if inode.attr.kind == FileKind::Dir {
                    if !on_path.insert(inode.id) {
                        return Err(FsError::DirectoryCycle(inode.id));
                    }
                    self.dirs += 1;
                    let below = self.open(e.name, inode)?;
                    path.push(below);
                    continue;
                }
                self.files += 1;
                if inode.attr.kind == FileKind::File && self.seen_links.insert(inode.id) {
                    self.logical += inode.attr.size;
                }
                let content = match &inode.content {
                    Content::Empty => TreeContent::Empty,
                    Content::Inline(b) => TreeContent::Inline(b.clone()),
                    Content::Recipe(id) => TreeContent::Recipe(*id),
                };
                let entry = self.entry(e.name, &inode, content)?;
                top.done.push(entry);
                continue;
            }
            let dir = path.pop().expect("the top");
            on_path.remove(&dir.inode.id);
            let listing = self.store_listing(&encode_listing(&dir.done))?;
            let entry = self.entry(dir.name, &dir.inode, TreeContent::Dir(listing))?;
            match path.last_mut() {
                Some(parent) => parent.done.push(entry),
                None => return Ok(entry),
            }
        }
    }

    fn store_listing(&mut self, bytes: &[u8]) -> Result<ChunkId> {
        let before = self.writer.stats().new_bytes;
        let mut chunks = Vec::new();
        let mut start = 0;
        for end in chunking::cut_points(bytes, self.params) {
            chunks.push(Bytes::copy_from_slice(&bytes[start..end]));
            start = end;
        }
        let ids = self.writer.write_batch(&chunks)?;
        let root = recipe::store_tree(
            self.writer,
            chunks
                .iter()
                .zip(ids)
                .map(|(c, id)| (c.len() as u64, Some(id))),
        )?;
        self.stats.dirs_written += 1;
        self.stats.new_bytes += self.writer.stats().new_bytes - before;
        Ok(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry_strategy() -> impl Strategy<Value = TreeEntry> {
        (
            proptest::collection::vec(any::<u8>(), 1..40),
            any::<u64>(),
            0u8..4,
            any::<u16>(),
            any::<(u32, u32, u64, u32)>(),
            any::<(i64, u32)>(),
            proptest::collection::vec(any::<u8>(), 0..100),
            any::<[u8; 32]>(),
            proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 1..20),
                    proptest::collection::vec(any::<u8>(), 0..50),
                ),
                0..3,
            ),
        )
            .prop_map(
                |(name, ino, tag, perm, (uid, gid, size, rdev), (s, n), inline, id, xattrs)| {
                    let t = Timestamp { secs: s, nanos: n };
                    let (kind, content) = match tag {
                        0 => (FileKind::File, TreeContent::Empty),
                        1 => (FileKind::Symlink, TreeContent::Inline(inline)),
                        2 => (FileKind::File, TreeContent::Recipe(ChunkId::from_bytes(id))),
                        _ => (FileKind::Dir, TreeContent::Dir(ChunkId::from_bytes(id))),
                    };
                    TreeEntry {
                        name,
                        ino: InodeId(ino),
                        attr: Attr {
                            kind,
                            perm,
                            uid,
                            gid,
                            size,
                            nlink: 1,
                            rdev,
                            atime: t,
                            mtime: t,
                            ctime: t,
                            crtime: t,
                        },
                        content,
                        xattrs,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn listings_round_trip(entries in proptest::collection::vec(entry_strategy(), 0..20)) {
            let bytes = encode_listing(&entries);
            prop_assert_eq!(decode_listing(&bytes).unwrap(), entries);
        }

        #[test]
        fn truncated_listings_are_errors(entries in proptest::collection::vec(entry_strategy(), 1..5), cut in 1usize..200) {
            let bytes = encode_listing(&entries);
            let cut = cut.min(bytes.len());
            prop_assert!(decode_listing(&bytes[..bytes.len() - cut]).is_err());
        }

        #[test]
        fn records_round_trip(mut root in entry_strategy(), files in any::<u64>(), dirs in any::<u64>()) {
            root.attr.kind = FileKind::Dir;
            root.content = TreeContent::Dir(ChunkId::from_bytes([7; 32]));
            let r = Record { created: Timestamp { secs: 5, nanos: 6 }, files, dirs, logical_bytes: 9, root };
            prop_assert_eq!(decode_record(&encode_record(&r)).unwrap(), r);
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The bytes of a listing and a record written before the attribute
    /// codec moved into `meta`: stored trees must read as they did.
    #[test]
    fn stored_bytes_are_the_layout_written_before() {
        let t = |secs, nanos| Timestamp { secs, nanos };
        let entry = TreeEntry {
            name: b"a".to_vec(),
            ino: InodeId(0x0102),
            attr: Attr {
                kind: FileKind::File,
                perm: 0o644,
                uid: 1000,
                gid: 100,
                size: 2,
                nlink: 1,
                rdev: 0,
                atime: t(1, 2),
                mtime: t(-3, 4),
                ctime: t(5, 6),
                crtime: t(7, 8),
            },
            content: TreeContent::Inline(b"hi".to_vec()),
            xattrs: vec![(b"user.k".to_vec(), b"v".to_vec())],
        };
        let listing = encode_listing(std::slice::from_ref(&entry));
        assert_eq!(hex(&listing), "434449520101000000010061020100000000000001a401e803000064000000020000000000000000000000010000000000000002000000fdffffffffffffff040000000500000000000000060000000700000000000000080000000102000000686901000600757365722e6b0100000076");
        assert_eq!(decode_listing(&listing).unwrap(), vec![entry.clone()]);
        let mut root = entry;
        root.attr.kind = FileKind::Dir;
        root.content = TreeContent::Dir(ChunkId::from_bytes([9; 32]));
        root.xattrs.clear();
        let record = Record {
            created: t(10, 11),
            files: 1,
            dirs: 2,
            logical_bytes: 3,
            root,
        };
        let bytes = encode_record(&record);
        assert_eq!(hex(&bytes), "43564552010a000000000000000b000000010000000000000002000000000000000300000000000000010061020100000000000002a401e803000064000000020000000000000000000000010000000000000002000000fdffffffffffffff040000000500000000000000060000000700000000000000080000000309090909090909090909090909090909090909090909090909090909090909090000");
        assert_eq!(decode_record(&bytes).unwrap(), record);
    }
}

//! The path index (hashFS): a regular file found by a hash of its full path
//! in one read, kept exact by the operations that change the namespace, in
//! their own transaction ([`crate::MetaStore::lookup_path`]).
//!
//! Tables:
//! - `paths`: 16-byte key -> entry. The key is BLAKE3 keyed with a fixed
//!   domain key, of the full path (names joined by `/`, no leading `/`).
//!   The entry is the rename generation it was written at, the inode
//!   number, the path itself (a collision is seen by comparing it) and the
//!   inode's record (attributes and content: inline bytes or recipe id)
//!   and its extended attributes when they fit in [`MAX_ENTRY_XATTRS`]
//!   bytes (the S3 gateway's ETag, Content-Type and user metadata), so a
//!   hit answers a GET or HEAD without another read. Every change to the
//!   inode or its xattrs rewrites the entry in the same transaction. The
//!   entry of a small file stored in chunks (at most [`MAX_HINTED_CHUNKS`]
//!   chunks, [`MAX_HINTED_SIZE`] bytes) may also carry where its data
//!   chunks were ([`ContentHints`]: ids, lengths, opaque locations from
//!   the chunk store, and the recipe root they were computed from), so a
//!   cold GET reads the entry and then the chunks, never the recipe or
//!   the chunk index. `fs` gives them ([`crate::MetaStore::set_path_hints`])
//!   once the chunks are in sealed containers, or again after a hint led
//!   nowhere (garbage collection moved the chunk); a rewrite of the entry
//!   keeps them only while they describe the record (its recipe root and
//!   size), a new entry (a rename, a walk) starts without. A location is
//!   never trusted: the reader verifies each chunk by its id.
//!
//!   Each optional block is flagged in the path length's top bits, so an
//!   entry written before a block existed decodes as one without it.
//! - `path_keys`: inode -> the key of its one entry, so a change to the
//!   inode (a write, a truncate, a chmod) rewrites its entry, and a name
//!   it loses drops it, without knowing its path.
//! - `moved_prefixes`: generation -> (old path, new path) of a directory
//!   rename, the last [`MAX_MOVES`] of them; `meta` keeps `path_gen` (the
//!   renames of directories so far) and `path_floor`.
//!
//! Only regular files with one name have entries. An entry is written when
//! a file is renamed (its directory's path comes from parent pointers,
//! cached; the gateway's PUT ends in a rename) and by a lookup that missed,
//! not when a file is created: an entry holds a copy of the record, inline
//! bytes included, which doubled the metadata written per small file
//! created through the mount (20,000 creates and writes of 4 KB files,
//! release build: 2.5 s with an entry per create, 1.2 s without, 1.15 s
//! before the index). A store with no entries skips the index's work. A directory rename does
//! not touch the entries below it: it records the move, and an entry older
//! than a move whose old or new path is above it is doubted; so is every
//! entry older than the floor (moves forgotten past the bound). A doubted
//! entry, a collision or a miss is answered by the walk, which rewrites the
//! entry.
//!
//! The key is keyed with a fixed domain key, not a per-repository secret:
//! the engine holds no secret, an entry names its full path so a collision
//! is always seen, and a crafted one (2^64 work for 128 bits) costs only a
//! walk.

use std::collections::{HashMap, VecDeque};
use std::sync::OnceLock;

use ids::ChunkId;
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::batch::W;
use crate::record::{corrupt, decode, encode, Rec, DIRS};
use crate::rules::check_name;
use crate::{
    ChunkHint, Content, ContentHints, FileKind, Inode, InodeId, MetaError, PathFound, Result,
    Xattrs, LOCATION_LEN,
};

pub(crate) const PATHS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("paths");
pub(crate) const PATH_KEYS: TableDefinition<u64, &[u8]> = TableDefinition::new("path_keys");
pub(crate) const MOVES: TableDefinition<u64, &[u8]> = TableDefinition::new("moved_prefixes");
pub(crate) const PATH_GEN: &str = "path_gen";
pub(crate) const PATH_FLOOR: &str = "path_floor";

/// Directory renames remembered one by one; past this, the oldest is
/// forgotten and every entry older than it is doubted.
pub const MAX_MOVES: usize = 1024;
/// Directory paths cached for writing entries; the cache is emptied when
/// full.
const MAX_DIR_PATHS: usize = 1 << 16;

const DOMAIN: &str = "cairn meta path index v1";

pub(crate) type Key = [u8; 16];

/// The index key of a path.
pub(crate) fn key(path: &[u8]) -> Key {
    static K: OnceLock<[u8; 32]> = OnceLock::new();
    let k = K.get_or_init(|| blake3::derive_key(DOMAIN, b""));
    let h = blake3::keyed_hash(k, path);
    let mut out = [0; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

/// The most bytes of encoded xattrs an entry carries; an inode with more
/// has an entry without them, and its reader asks for them apart.
pub const MAX_ENTRY_XATTRS: usize = 1024;
/// Set in an entry's path length when an xattr block follows the path
/// (entries written before xattrs were carried have it clear).
const HAS_XATTRS: u32 = 1 << 31;
/// Set in an entry's path length when a hints block follows the path and
/// xattrs (entries written before hints were carried have it clear).
const HAS_HINTS: u32 = 1 << 30;
const FLAGS: u32 = HAS_XATTRS | HAS_HINTS;

/// The most data chunks, and bytes, of a file whose entry carries where
/// its chunks are ([`ContentHints`]); a larger file is read the usual way.
pub const MAX_HINTED_CHUNKS: usize = 8;
pub const MAX_HINTED_SIZE: u64 = 256 << 10;
/// A hinted chunk's bytes in a hints block: id, length, location.
const HINT_LEN: usize = ChunkId::LEN + 4 + LOCATION_LEN;

/// An entry's bytes: generation (8), inode (8), path length (4, with
/// [`HAS_XATTRS`] and [`HAS_HINTS`]), path, [the xattr block's length (4),
/// the block ([`encode_xattrs`])], [the hints block's length (4), the
/// block ([`encode_hints`])], then the inode record
/// ([`crate::record::encode`]); little-endian.
fn encode_entry(
    gen: u64,
    ino: u64,
    path: &[u8],
    xattrs: Option<&[u8]>,
    hints: Option<&[u8]>,
    rec: &[u8],
) -> Vec<u8> {
    let block = |b: Option<&[u8]>| b.map_or(0, |b| 4 + b.len());
    let mut out = Vec::with_capacity(20 + path.len() + block(xattrs) + block(hints) + rec.len());
    out.extend_from_slice(&gen.to_le_bytes());
    out.extend_from_slice(&ino.to_le_bytes());
    let flag = |b: Option<&[u8]>, f| if b.is_some() { f } else { 0 };
    let flags = flag(xattrs, HAS_XATTRS) | flag(hints, HAS_HINTS);
    out.extend_from_slice(&(path.len() as u32 | flags).to_le_bytes());
    out.extend_from_slice(path);
    for b in [xattrs, hints].into_iter().flatten() {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(rec);
    out
}

/// A hints block: the recipe root (32), then per chunk its id (32), length
/// (4) and location ([`LOCATION_LEN`]).
fn encode_hints(h: &ContentHints) -> Vec<u8> {
    let mut out = Vec::with_capacity(ChunkId::LEN + h.chunks.len() * HINT_LEN);
    out.extend_from_slice(h.root.as_bytes());
    for c in &h.chunks {
        out.extend_from_slice(c.id.as_bytes());
        out.extend_from_slice(&c.len.to_le_bytes());
        out.extend_from_slice(&c.location);
    }
    out
}

fn decode_hints(b: &[u8]) -> Result<ContentHints> {
    let bad = || corrupt("a path index entry's hints are cut short".into());
    let (root, rest) = b.split_first_chunk::<32>().ok_or_else(bad)?;
    if rest.len() % HINT_LEN != 0 {
        return Err(bad());
    }
    let chunks = rest
        .chunks_exact(HINT_LEN)
        .map(|c| {
            let (id, c) = c.split_first_chunk::<32>().expect("HINT_LEN");
            let (len, location) = c.split_first_chunk::<4>().expect("HINT_LEN");
            ChunkHint {
                id: ChunkId::from_bytes(*id),
                len: u32::from_le_bytes(*len),
                location: location.try_into().expect("HINT_LEN"),
            }
        })
        .collect();
    Ok(ContentHints {
        root: ChunkId::from_bytes(*root),
        chunks,
    })
}

/// Whether `h` describes `inode`'s content as it is: its recipe root, at
/// most [`MAX_HINTED_CHUNKS`] chunks covering its size exactly, a size up
/// to [`MAX_HINTED_SIZE`].
fn describes(h: &ContentHints, inode: &Inode) -> bool {
    let size = inode.attr.size;
    inode.content == Content::Recipe(h.root)
        && (1..=MAX_HINTED_CHUNKS).contains(&h.chunks.len())
        && size <= MAX_HINTED_SIZE
        && h.chunks.iter().map(|c| u64::from(c.len)).sum::<u64>() == size
}

/// An old entry's hints block, if it still describes `rec`: a rewrite of
/// the entry keeps it.
fn kept_hints<'a>(hints: Option<&'a [u8]>, rec: &Rec) -> Option<&'a [u8]> {
    let block = hints?;
    let h = decode_hints(block).ok()?;
    describes(&h, &rec.inode).then_some(block)
}

/// An inode's xattrs (name order) as an entry carries them: per xattr the
/// name's length (2), the name, the value's length (4), the value; `None`
/// past [`MAX_ENTRY_XATTRS`].
fn encode_xattrs<'a>(
    xattrs: impl IntoIterator<Item = Result<(&'a [u8], &'a [u8])>>,
) -> Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    for x in xattrs {
        let (name, value) = x?;
        if out.len() + 6 + name.len() + value.len() > MAX_ENTRY_XATTRS {
            return Ok(None);
        }
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    Ok(Some(out))
}

fn decode_xattrs(mut b: &[u8]) -> Result<Xattrs> {
    let bad = || corrupt("a path index entry's xattrs are cut short".into());
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = u16::from_le_bytes(b.get(..2).ok_or_else(bad)?.try_into().expect("2")) as usize;
        let name = b.get(2..2 + n).ok_or_else(bad)?;
        let at = 2 + n;
        let v =
            u32::from_le_bytes(b.get(at..at + 4).ok_or_else(bad)?.try_into().expect("4")) as usize;
        let value = b.get(at + 4..at + 4 + v).ok_or_else(bad)?;
        out.push((name.to_vec(), value.to_vec()));
        b = &b[at + 4 + v..];
    }
    Ok(out)
}

pub(crate) struct Entry<'a> {
    pub gen: u64,
    pub ino: u64,
    pub path: &'a [u8],
    /// The encoded xattrs, if the entry carries them.
    pub xattrs: Option<&'a [u8]>,
    /// The encoded hints, if the entry carries them.
    pub hints: Option<&'a [u8]>,
    pub rec: &'a [u8],
}

/// Writes again, with its checksum, every path index entry whose copy of
/// the inode record has none (a store from before records were summed;
/// see `record`). Returns how many.
pub(crate) fn sum_entries(
    paths: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
) -> Result<u64> {
    let mut fixed = 0;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let range = match &after {
            Some(k) => paths.range::<&[u8]>((
                std::ops::Bound::Excluded(k.as_slice()),
                std::ops::Bound::Unbounded,
            ))?,
            None => paths.range::<&[u8]>(..)?,
        };
        let mut step = Vec::new();
        let mut read = 0;
        for entry in range.take(SUM_STEP) {
            read += 1;
            let (k, v) = entry?;
            let key = k.value().to_vec();
            let e = decode_entry(v.value())?;
            if crate::record::unsummed(e.rec) {
                let rec = crate::record::decode(e.ino, e.rec)?;
                let rec = crate::record::encode(e.ino, &rec);
                step.push((
                    key.clone(),
                    encode_entry(e.gen, e.ino, e.path, e.xattrs, e.hints, &rec),
                ));
            }
            after = Some(key);
        }
        for (k, v) in &step {
            paths.insert(k.as_slice(), v.as_slice())?;
        }
        fixed += step.len() as u64;
        if read < SUM_STEP {
            return Ok(fixed);
        }
    }
}

/// Entries read per step of [`sum_entries`].
const SUM_STEP: usize = 4096;

pub(crate) fn decode_entry(b: &[u8]) -> Result<Entry<'_>> {
    let bad = || corrupt("a path index entry is cut short".into());
    let word = |at: usize| -> Result<u64> {
        Ok(u64::from_le_bytes(
            b.get(at..at + 8).ok_or_else(bad)?.try_into().expect("8"),
        ))
    };
    let u32_at = |at: usize| -> Result<u32> {
        Ok(u32::from_le_bytes(
            b.get(at..at + 4).ok_or_else(bad)?.try_into().expect("4"),
        ))
    };
    let (gen, ino) = (word(0)?, word(8)?);
    let flagged = u32_at(16)?;
    let len = (flagged & !FLAGS) as usize;
    let path = b.get(20..20 + len).ok_or_else(bad)?;
    let mut at = 20 + len;
    let mut block = |flag: u32| -> Result<Option<&[u8]>> {
        if flagged & flag == 0 {
            return Ok(None);
        }
        let n = u32_at(at)? as usize;
        let x = b.get(at + 4..at + 4 + n).ok_or_else(bad)?;
        at += 4 + n;
        Ok(Some(x))
    };
    let xattrs = block(HAS_XATTRS)?;
    let hints = block(HAS_HINTS)?;
    Ok(Entry {
        gen,
        ino,
        path,
        xattrs,
        hints,
        rec: &b[at..],
    })
}

/// Whether `path` is `prefix` or lies below it.
fn under(path: &[u8], prefix: &[u8]) -> bool {
    path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/')
}

struct Move {
    gen: u64,
    old: Vec<u8>,
    new: Vec<u8>,
}

fn encode_move(old: &[u8], new: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + old.len() + new.len());
    out.extend_from_slice(&(old.len() as u32).to_le_bytes());
    out.extend_from_slice(old);
    out.extend_from_slice(new);
    out
}

fn decode_move(gen: u64, b: &[u8]) -> Result<Move> {
    let bad = || corrupt(format!("moved prefix {gen} is cut short"));
    let len = u32::from_le_bytes(b.get(..4).ok_or_else(bad)?.try_into().expect("4")) as usize;
    let old = b.get(4..4 + len).ok_or_else(bad)?.to_vec();
    Ok(Move {
        gen,
        old,
        new: b[4 + len..].to_vec(),
    })
}

/// The directory renames an entry may be older than, in generation order.
#[derive(Default)]
pub(crate) struct Moves {
    floor: u64,
    list: VecDeque<Move>,
}

impl Moves {
    pub(crate) fn load(
        meta: &impl ReadableTable<&'static str, u64>,
        moves: &impl ReadableTable<u64, &'static [u8]>,
    ) -> Result<Moves> {
        let floor = meta.get(PATH_FLOOR)?.map_or(0, |v| v.value());
        let mut list = VecDeque::new();
        for m in moves.iter()? {
            let (k, v) = m?;
            list.push_back(decode_move(k.value(), v.value())?);
        }
        Ok(Moves { floor, list })
    }

    /// Whether an entry for `path` written at generation `gen` may be
    /// stale: a directory above it was renamed since (or too long ago to
    /// remember).
    pub(crate) fn doubts(&self, gen: u64, path: &[u8]) -> bool {
        gen < self.floor
            || self
                .list
                .iter()
                .rev()
                .take_while(|m| m.gen > gen)
                .any(|m| under(path, &m.old) || under(path, &m.new))
    }

    fn push(&mut self, m: Move) -> Vec<u64> {
        self.list.push_back(m);
        let mut dropped = Vec::new();
        while self.list.len() > MAX_MOVES {
            let m = self.list.pop_front().expect("over the bound");
            self.floor = self.floor.max(m.gen);
            dropped.push(m.gen);
        }
        dropped
    }

    fn raise_floor(&mut self, gen: u64) -> Vec<u64> {
        self.floor = self.floor.max(gen);
        let mut dropped = Vec::new();
        while self.list.front().is_some_and(|m| m.gen <= self.floor) {
            dropped.push(self.list.pop_front().expect("checked").gen);
        }
        dropped
    }
}

/// What the engine keeps in memory for the index, consistent with the
/// open batch: emptied ([`IndexMem::reset`]) whenever a batch is lost.
#[derive(Default)]
pub(crate) struct IndexMem {
    /// `None` until loaded (and after a reset).
    pub(crate) moves: Option<Moves>,
    /// Directory inode -> its path; a directory rename drops the paths
    /// below the old and the new name.
    dirs: HashMap<u64, Vec<u8>>,
}

impl IndexMem {
    pub(crate) fn reset(&mut self) {
        self.moves = None;
        self.dirs.clear();
    }

    /// The moves, loaded from `meta` and `moves` if not in memory.
    pub(crate) fn moves(
        &mut self,
        meta: &impl ReadableTable<&'static str, u64>,
        moves: &impl ReadableTable<u64, &'static [u8]>,
    ) -> Result<&mut Moves> {
        if self.moves.is_none() {
            self.moves = Some(Moves::load(meta, moves)?);
        }
        Ok(self.moves.as_mut().expect("loaded"))
    }
}

/// A trusted entry for `path` in `paths`: the inode it names, or `None`
/// for a miss, a collision or a doubt.
pub(crate) fn hit(
    paths: &impl ReadableTable<&'static [u8], &'static [u8]>,
    moves: &Moves,
    path: &[u8],
) -> Result<Option<PathFound>> {
    let Some(v) = paths.get(key(path).as_slice())? else {
        return Ok(None);
    };
    let e = decode_entry(v.value())?;
    if e.path != path || moves.doubts(e.gen, path) {
        return Ok(None);
    }
    let inode = decode(e.ino, e.rec)?.inode;
    // Damaged hints are only a lost shortcut: the reader gives new ones.
    let hints = e.hints.and_then(|h| decode_hints(h).ok());
    Ok(Some(PathFound {
        hints: hints.filter(|h| describes(h, &inode)),
        xattrs: e.xattrs.map(decode_xattrs).transpose()?,
        inode,
    }))
}

/// The encoded xattrs of `ino` in `xattrs` for its entry; `None` past the
/// bound.
fn xattrs_of(
    xattrs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    ino: u64,
) -> Result<Option<Vec<u8>>> {
    let range = crate::record::prefix_range(ino);
    let found = xattrs.range::<&[u8]>(crate::record::as_slices(&range))?;
    let pairs: Vec<_> = found
        .map(|x| x.map_err(MetaError::from))
        .collect::<Result<_>>()?;
    encode_xattrs(pairs.iter().map(|(k, v)| Ok((&k.value()[8..], v.value()))))
}

/// `path` joined with `name`.
fn join(mut path: Vec<u8>, name: &[u8]) -> Vec<u8> {
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

impl W<'_> {
    fn gen(&self) -> Result<u64> {
        Ok(self.meta.get(PATH_GEN)?.map_or(0, |v| v.value()))
    }

    /// The name `ino` has in `dir`, if any: a scan of `dir`'s entries.
    fn name_in(&self, dir: InodeId, ino: InodeId) -> Result<Option<Vec<u8>>> {
        let range = crate::record::prefix_range(dir.0);
        for entry in self
            .dirents
            .range::<&[u8]>(crate::record::as_slices(&range))?
        {
            let (k, v) = entry?;
            if crate::record::dval_decode(v.value())?.0 == ino {
                return Ok(Some(k.value()[8..].to_vec()));
            }
        }
        Ok(None)
    }

    /// The path of directory `dir` ("" for the root), from the cache or
    /// its parent pointers; `None` if unknown (a damaged store).
    fn dir_path(&mut self, dir: InodeId) -> Result<Option<Vec<u8>>> {
        let index = self.index.clone();
        if let Some(p) = index.lock().dirs.get(&dir.0) {
            return Ok(Some(p.clone()));
        }
        let bound = self
            .meta
            .get(DIRS)?
            .map_or(0, |v| v.value())
            .saturating_add_signed(self.dirs_delta)
            .saturating_add(1);
        let mut names = Vec::new();
        let mut at = dir;
        let mut base = None;
        for _ in 0..=bound {
            if at == InodeId::ROOT {
                base = Some(Vec::new());
                break;
            }
            if let Some(p) = index.lock().dirs.get(&at.0) {
                base = Some(p.clone());
                break;
            }
            let rec = self.rec(at)?;
            if !rec.is_dir() {
                return Ok(None);
            }
            let Some(parent) = rec.parent else {
                return Ok(None);
            };
            let Some(name) = self.name_in(parent, at)? else {
                return Ok(None);
            };
            names.push(name);
            at = parent;
        }
        let Some(mut path) = base else {
            return Err(corrupt(format!("a parent-pointer cycle above {dir:?}")));
        };
        for name in names.iter().rev() {
            path = join(path, name);
        }
        let mut mem = index.lock();
        if mem.dirs.len() >= MAX_DIR_PATHS {
            mem.dirs.clear();
        }
        mem.dirs.insert(dir.0, path.clone());
        Ok(Some(path))
    }

    /// The path `name` in directory `dir` has; `None` if unknown.
    pub(crate) fn path_in(&mut self, dir: InodeId, name: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.dir_path(dir)?.map(|p| join(p, name)))
    }

    /// `ino` has the name `path` after this operation: its entry is written
    /// at the end if it is then a regular file with one name.
    pub(crate) fn index_as(&mut self, ino: InodeId, path: Option<Vec<u8>>) {
        if let Some(path) = path {
            self.new_paths.insert(ino.0, path);
        }
    }

    /// `ino` lost a name (or its only one changed): its entry goes.
    pub(crate) fn unindex(&mut self, ino: InodeId) -> Result<()> {
        self.new_paths.remove(&ino.0);
        let Some(k) = self.path_keys.remove(ino.0)?.map(|v| v.value().to_vec()) else {
            return Ok(());
        };
        self.mutated = true;
        let ours = match self.paths.get(k.as_slice())? {
            Some(v) => decode_entry(v.value())?.ino == ino.0,
            None => false,
        };
        if ours {
            self.paths.remove(k.as_slice())?;
        }
        Ok(())
    }

    /// A directory (or a file exchanged with one) moved from `old` to
    /// `new`: entries below either, written before, are doubted from now.
    pub(crate) fn moved(&mut self, old: Option<Vec<u8>>, new: Option<Vec<u8>>) -> Result<()> {
        let index = self.index.clone();
        let mut mem = index.lock();
        match (&old, &new) {
            (Some(o), Some(n)) => mem.dirs.retain(|_, p| !under(p, o) && !under(p, n)),
            _ => mem.dirs.clear(),
        }
        mem.moves(&self.meta, &self.moves)?;
        let gen = self.gen()? + 1;
        self.mutated = true;
        self.meta.insert(PATH_GEN, gen)?;
        let moves = mem.moves.as_mut().expect("loaded");
        let dropped = match (old, new) {
            (Some(old), Some(new)) => {
                self.moves.insert(gen, encode_move(&old, &new).as_slice())?;
                moves.push(Move { gen, old, new })
            }
            // A path not known: every entry so far is doubted.
            _ => moves.raise_floor(gen),
        };
        if !dropped.is_empty() || moves.floor == gen {
            self.meta.insert(PATH_FLOOR, moves.floor)?;
        }
        for g in dropped {
            self.moves.remove(g)?;
        }
        Ok(())
    }

    /// Writes `rec`'s entry at `path` (dropping the one it had elsewhere
    /// and the entry of another inode at that key).
    fn put_entry_for(&mut self, rec: &Rec, path: &[u8], gen: u64) -> Result<()> {
        let ino = rec.inode.id.0;
        let k = key(path);
        self.mutated = true;
        // The hints of the inode's entry so far go on while they hold.
        let mut hints = None;
        if let Some(old) = self.path_keys.get(ino)?.map(|v| v.value().to_vec()) {
            let ours = match self.paths.get(old.as_slice())? {
                Some(v) => {
                    let e = decode_entry(v.value())?;
                    hints = kept_hints(e.hints, rec).map(<[u8]>::to_vec);
                    e.ino == ino
                }
                None => false,
            };
            if ours && old != k {
                self.paths.remove(old.as_slice())?;
            } else if !ours {
                hints = None;
            }
        }
        let other = match self.paths.get(k.as_slice())? {
            Some(v) => Some(decode_entry(v.value())?.ino).filter(|&o| o != ino),
            None => None,
        };
        if let Some(other) = other {
            let theirs = self.path_keys.get(other)?.map(|v| v.value().to_vec());
            if theirs.as_deref() == Some(k.as_slice()) {
                self.path_keys.remove(other)?;
            }
        }
        let x = xattrs_of(&self.xattrs, ino)?;
        let entry = encode_entry(
            gen,
            ino,
            path,
            x.as_deref(),
            hints.as_deref(),
            &encode(ino, rec),
        );
        self.paths.insert(k.as_slice(), entry.as_slice())?;
        self.path_keys.insert(ino, k.as_slice())?;
        Ok(())
    }

    /// Brings the entries of the regular files this operation changed up
    /// to date: new names written, changed records rewritten in place
    /// (keeping their generation and path), files with other than one
    /// name dropped. Called once at the end of the operation.
    pub(crate) fn flush_index(&mut self) -> Result<()> {
        let changed: Vec<(InodeId, u32)> = self
            .cache
            .values()
            .filter(|(r, dirty)| *dirty && r.inode.attr.kind == FileKind::File)
            .map(|(r, _)| (r.inode.id, r.inode.attr.nlink))
            .collect();
        // A store no lookup by path has filled pays nothing more.
        if changed.is_empty() || (self.new_paths.is_empty() && self.path_keys.len()? == 0) {
            return Ok(());
        }
        let mut gen = None;
        for (ino, nlink) in changed {
            let fresh = self.new_paths.remove(&ino.0);
            if nlink != 1 {
                self.unindex(ino)?;
                continue;
            }
            if let Some(path) = fresh {
                let g = match gen {
                    Some(g) => g,
                    None => *gen.insert(self.gen()?),
                };
                let rec = self.cache[&ino.0].0.clone();
                self.put_entry_for(&rec, &path, g)?;
                continue;
            }
            let Some(k) = self.path_keys.get(ino.0)?.map(|v| v.value().to_vec()) else {
                continue;
            };
            let x = xattrs_of(&self.xattrs, ino.0)?;
            let rewritten = match self.paths.get(k.as_slice())? {
                Some(v) => {
                    let e = decode_entry(v.value())?;
                    (e.ino == ino.0).then(|| {
                        let rec = &self.cache[&ino.0].0;
                        let hints = kept_hints(e.hints, rec);
                        encode_entry(
                            e.gen,
                            e.ino,
                            e.path,
                            x.as_deref(),
                            hints,
                            &encode(ino.0, rec),
                        )
                    })
                }
                None => None,
            };
            self.mutated = true;
            match rewritten {
                Some(v) => {
                    self.paths.insert(k.as_slice(), v.as_slice())?;
                }
                None => {
                    self.path_keys.remove(ino.0)?;
                }
            }
        }
        Ok(())
    }

    /// Whether `ino` has a path-index entry.
    pub(crate) fn indexed(&self, ino: InodeId) -> Result<bool> {
        Ok(self.path_keys.get(ino.0)?.is_some())
    }

    /// Gives `ino`'s entry `hints`, if it has an entry and they describe
    /// its content now; whether the entry holds them then.
    pub(crate) fn set_hints(&mut self, ino: InodeId, hints: &ContentHints) -> Result<bool> {
        let Some(k) = self.path_keys.get(ino.0)?.map(|v| v.value().to_vec()) else {
            return Ok(false);
        };
        if !describes(hints, &self.rec(ino)?.inode) {
            return Ok(false);
        }
        let block = encode_hints(hints);
        let rewritten = match self.paths.get(k.as_slice())? {
            Some(v) => {
                let e = decode_entry(v.value())?;
                match (e.ino == ino.0, e.hints == Some(&block[..])) {
                    (false, _) => return Ok(false),
                    (true, true) => return Ok(true),
                    (true, false) => {
                        encode_entry(e.gen, e.ino, e.path, e.xattrs, Some(&block), e.rec)
                    }
                }
            }
            None => return Ok(false),
        };
        self.mutated = true;
        self.paths.insert(k.as_slice(), rewritten.as_slice())?;
        Ok(true)
    }

    /// The walk a lookup that missed the index does, name by name from the
    /// root, in this operation; writes the entry of the regular file it
    /// finds if that has one name.
    pub(crate) fn walk_and_index(&mut self, path: &[u8]) -> Result<Inode> {
        let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
        for p in &parts {
            check_name(p)?;
        }
        let mut at = InodeId::ROOT;
        let (last, above) = parts.split_last().expect("split gives one part");
        for part in above {
            match self.entry(at, part)?.ok_or(MetaError::NotFound)? {
                (ino, FileKind::Dir) => at = ino,
                _ => return Err(MetaError::NotDir),
            }
        }
        let (ino, kind) = self.entry(at, last)?.ok_or(MetaError::NotFound)?;
        let rec = self.rec(ino)?.clone();
        if kind == FileKind::File && rec.inode.attr.nlink == 1 {
            let gen = self.gen()?;
            self.put_entry_for(&rec, path, gen)?;
        }
        Ok(rec.inode)
    }
}

/// The fsck of the index (invariant 6): every entry the index would
/// trust names, by a walk of `dirents`, the inode it holds, with that
/// inode's record as it is; every entry is the one its inode's key leads
/// to, and every such key leads to an entry of its inode.
pub(crate) fn verify(
    tx: &redb::ReadTransaction,
    recs: &HashMap<u64, Rec>,
    problems: &mut Vec<String>,
) -> Result<()> {
    let dirents = tx.open_table(crate::record::DIRENTS)?;
    let moves = Moves::load(&tx.open_table(crate::record::META)?, &tx.open_table(MOVES)?)?;
    let path_keys = tx.open_table(PATH_KEYS)?;
    let xattrs = tx.open_table(crate::record::XATTRS)?;
    for entry in tx.open_table(PATHS)?.iter()? {
        let (k, v) = entry?;
        let Ok(e) = decode_entry(v.value()) else {
            problems.push(format!("path index entry {:?} is cut short", k.value()));
            continue;
        };
        let shown = String::from_utf8_lossy(e.path);
        if key(e.path).as_slice() != k.value() {
            problems.push(format!(
                "path index entry for {shown:?} is under another key"
            ));
        }
        // Without its inode's key the entry would not follow the inode.
        let followed = path_keys
            .get(e.ino)?
            .is_some_and(|v| v.value() == k.value());
        if !followed {
            problems.push(format!(
                "path index entry for {shown:?} is not the one inode {} leads to",
                e.ino
            ));
        }
        if moves.doubts(e.gen, e.path) {
            continue;
        }
        let mut at = Some(InodeId::ROOT);
        for part in e.path.split(|&b| b == b'/') {
            at = match at {
                Some(dir) => dirents
                    .get(crate::record::dkey(dir, part).as_slice())?
                    .map(|v| crate::record::dval_decode(v.value()))
                    .transpose()?
                    .map(|(ino, _)| ino),
                None => None,
            };
        }
        if at != Some(InodeId(e.ino)) {
            problems.push(format!(
                "path index says {shown:?} is inode {}; the tree says {at:?}",
                e.ino
            ));
        }
        match recs.get(&e.ino) {
            Some(rec) if encode(e.ino, rec) == e.rec => {}
            _ => problems.push(format!(
                "path index entry for {shown:?} holds an old record of inode {}",
                e.ino
            )),
        }
        if let Some(h) = e.hints {
            let holds = decode_hints(h).is_ok_and(|h| {
                recs.get(&e.ino)
                    .is_some_and(|rec| describes(&h, &rec.inode))
            });
            if !holds {
                problems.push(format!(
                    "path index entry for {shown:?} holds chunk hints that do not describe inode {}",
                    e.ino
                ));
            }
        }
        if e.xattrs.is_some() && xattrs_of(&xattrs, e.ino)?.as_deref() != e.xattrs {
            problems.push(format!(
                "path index entry for {shown:?} holds old xattrs of inode {}",
                e.ino
            ));
        }
    }
    for entry in path_keys.iter()? {
        let (ino, k) = entry?;
        let ours = match tx.open_table(PATHS)?.get(k.value())? {
            Some(v) => decode_entry(v.value()).is_ok_and(|e| e.ino == ino.value()),
            None => false,
        };
        if !ours {
            problems.push(format!(
                "inode {}'s path index key leads to no entry of it",
                ino.value()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_and_a_short_one_is_damage() {
        let b = encode_entry(7, 42, b"a/b", None, None, b"rec");
        let e = decode_entry(&b).unwrap();
        assert_eq!(
            (e.gen, e.ino, e.path, e.xattrs, e.hints, e.rec),
            (7, 42, &b"a/b"[..], None, None, &b"rec"[..])
        );
        assert!(decode_entry(&b[..10]).is_err());
        assert!(decode_entry(&b[..21]).is_err());
        let pairs = [(&b"user.a"[..], &b"1"[..]), (b"user.b", b"")];
        let x = encode_xattrs(pairs.map(Ok)).unwrap().unwrap();
        let b = encode_entry(7, 42, b"a/b", Some(&x), None, b"rec");
        let e = decode_entry(&b).unwrap();
        assert_eq!((e.path, e.rec), (&b"a/b"[..], &b"rec"[..]));
        let back = decode_xattrs(e.xattrs.unwrap()).unwrap();
        assert_eq!(back, pairs.map(|(k, v)| (k.to_vec(), v.to_vec())));
        assert!(decode_entry(&b[..25]).is_err());
    }

    /// Entries written before xattrs and hints were carried keep their
    /// meaning: the same bytes, decoded with neither.
    #[test]
    fn an_entry_of_the_first_format_still_decodes() {
        let mut old = Vec::new();
        old.extend_from_slice(&7u64.to_le_bytes());
        old.extend_from_slice(&42u64.to_le_bytes());
        old.extend_from_slice(&3u32.to_le_bytes());
        old.extend_from_slice(b"a/brec");
        let e = decode_entry(&old).unwrap();
        assert_eq!(
            (e.path, e.xattrs, e.hints, e.rec),
            (&b"a/b"[..], None, None, &b"rec"[..])
        );
    }

    #[test]
    fn hints_read_back_beside_xattrs_and_a_short_block_is_damage() {
        let hints = ContentHints {
            root: ChunkId::from_bytes([1; 32]),
            chunks: (0..3)
                .map(|i| ChunkHint {
                    id: ChunkId::from_bytes([i; 32]),
                    len: 100 + u32::from(i),
                    location: [i + 7; LOCATION_LEN],
                })
                .collect(),
        };
        let block = encode_hints(&hints);
        let x = encode_xattrs([Ok((&b"user.a"[..], &b"1"[..]))])
            .unwrap()
            .unwrap();
        let b = encode_entry(7, 42, b"a/b", Some(&x), Some(&block), b"rec");
        let e = decode_entry(&b).unwrap();
        assert_eq!(
            (e.path, e.xattrs, e.rec),
            (&b"a/b"[..], Some(&x[..]), &b"rec"[..])
        );
        assert_eq!(decode_hints(e.hints.unwrap()).unwrap(), hints);
        assert!(decode_hints(&block[..block.len() - 1]).is_err());
        assert!(decode_hints(&block[..10]).is_err());
        let b = encode_entry(7, 42, b"a/b", None, Some(&block), b"rec");
        let e = decode_entry(&b).unwrap();
        assert_eq!(
            (e.xattrs, e.hints, e.rec),
            (None, Some(&block[..]), &b"rec"[..])
        );
    }

    #[test]
    fn hints_describe_only_the_content_they_were_computed_for() {
        let now = crate::Timestamp::now();
        let root = ChunkId::from_bytes([1; 32]);
        let chunk = |len| ChunkHint {
            id: ChunkId::from_bytes([2; 32]),
            len,
            location: [0; LOCATION_LEN],
        };
        let inode = |content, size| Inode {
            id: InodeId(9),
            attr: crate::Attr {
                kind: FileKind::File,
                perm: 0o644,
                uid: 0,
                gid: 0,
                size,
                nlink: 1,
                rdev: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
            },
            content,
        };
        let h = ContentHints {
            root,
            chunks: vec![chunk(10), chunk(20)],
        };
        assert!(describes(&h, &inode(Content::Recipe(root), 30)));
        // Another recipe, another size, inline bytes: not this content.
        let other = ChunkId::from_bytes([3; 32]);
        assert!(!describes(&h, &inode(Content::Recipe(other), 30)));
        assert!(!describes(&h, &inode(Content::Recipe(root), 31)));
        assert!(!describes(&h, &inode(Content::Inline(vec![0; 30]), 30)));
        let many = ContentHints {
            root,
            chunks: vec![chunk(1); MAX_HINTED_CHUNKS + 1],
        };
        let n = many.chunks.len() as u64;
        assert!(!describes(&many, &inode(Content::Recipe(root), n)));
    }

    #[test]
    fn xattrs_past_the_bound_are_not_carried() {
        let big = vec![0u8; MAX_ENTRY_XATTRS];
        assert_eq!(
            encode_xattrs([Ok((&b"user.a"[..], &big[..]))]).unwrap(),
            None
        );
    }

    #[test]
    fn under_means_the_prefix_or_below_it() {
        assert!(under(b"a/b", b"a"));
        assert!(under(b"a", b"a"));
        assert!(!under(b"ab", b"a"));
        assert!(!under(b"b/a", b"a"));
    }

    #[test]
    fn only_entries_older_than_a_move_above_them_are_doubted() {
        let mut m = Moves::default();
        m.push(Move {
            gen: 3,
            old: b"x/y".to_vec(),
            new: b"z".to_vec(),
        });
        assert!(m.doubts(2, b"x/y/f"));
        assert!(m.doubts(2, b"z/f"));
        assert!(!m.doubts(3, b"x/y/f"));
        assert!(!m.doubts(2, b"x/yy/f"));
        assert!(!m.doubts(2, b"x/f"));
    }

    #[test]
    fn forgotten_moves_raise_the_floor() {
        let mut m = Moves::default();
        for gen in 1..=(MAX_MOVES as u64 + 5) {
            m.push(Move {
                gen,
                old: b"a".to_vec(),
                new: b"b".to_vec(),
            });
        }
        assert_eq!(m.list.len(), MAX_MOVES);
        assert_eq!(m.floor, 5);
        // Older than a forgotten move, anywhere: doubted.
        assert!(m.doubts(4, b"elsewhere/f"));
        assert!(!m.doubts(5, b"elsewhere/f"));
        m.raise_floor(100);
        assert!(m.list.iter().all(|x| x.gen > 100));
        assert!(m.doubts(99, b"elsewhere/f"));
    }

    /// A collision: the key of one path holding another path's entry.
    #[test]
    fn an_entry_for_another_path_under_the_key_is_a_miss() {
        let db = redb::Builder::new()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let tx = db.begin_write().unwrap();
        let mut t = tx.open_table(PATHS).unwrap();
        let now = crate::Timestamp::now();
        let rec = |ino| Rec {
            inode: Inode {
                id: InodeId(ino),
                attr: crate::Attr {
                    kind: FileKind::File,
                    perm: 0o644,
                    uid: 0,
                    gid: 0,
                    size: 1,
                    nlink: 1,
                    rdev: 0,
                    atime: now,
                    mtime: now,
                    ctime: now,
                    crtime: now,
                },
                content: crate::Content::Inline(b"x".to_vec()),
            },
            parent: Some(InodeId::ROOT),
        };
        let put = |t: &mut redb::Table<&[u8], &[u8]>, at: &[u8], path: &[u8], ino| {
            t.insert(
                key(at).as_slice(),
                encode_entry(0, ino, path, None, None, &encode(ino, &rec(ino))).as_slice(),
            )
            .unwrap();
        };
        put(&mut t, b"b/x", b"a/x", 5);
        put(&mut t, b"c", b"c", 6);
        let moves = Moves::default();
        assert!(hit(&t, &moves, b"b/x").unwrap().is_none());
        let found = hit(&t, &moves, b"c").unwrap();
        assert_eq!(found, Some(PathFound::walked(rec(6).inode)));
        assert!(hit(&t, &moves, b"a/x").unwrap().is_none());
    }

    #[test]
    fn keys_differ_by_path_and_are_stable() {
        assert_eq!(key(b"a/b"), key(b"a/b"));
        assert_ne!(key(b"a/b"), key(b"a/c"));
    }
}

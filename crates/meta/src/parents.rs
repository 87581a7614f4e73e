//! Parent pointers read back: the directory holding a directory, and a
//! path from the root to any inode ([`MetaStore::parent`],
//! [`MetaStore::path_of`]).
//!
//! Every inode record keeps a parent pointer. A directory's is the
//! directory holding its one name, always current. A non-directory's is
//! the directory of the name it was last given (create, link, rename); it
//! may have lost that name since (an unlink of one of several hard links),
//! so a path is only given when the entry is still there: a path is never
//! wrong, at worst unknown. A store from before non-directories kept one
//! has them filled in from their names once, when it is opened
//! ([`fill_file_parents`]).
//!
//! [`MetaStore::parent`]: crate::MetaStore::parent
//! [`MetaStore::path_of`]: crate::MetaStore::path_of

use redb::ReadableTable;

use crate::record::corrupt;
use crate::record::{as_slices, decode, dval_decode, encode, prefix_range, Rec, DIRS};
use crate::{FileKind, InodeId, MetaError, Result};

/// The tables a parent walk reads, from a read transaction or the open
/// write batch alike.
pub(crate) struct Tables<'a, I, D, M> {
    pub inodes: &'a I,
    pub dirents: &'a D,
    pub meta: &'a M,
}

impl<I, D, M> Tables<'_, I, D, M>
where
    I: ReadableTable<u64, &'static [u8]>,
    D: ReadableTable<&'static [u8], [u8; 9]>,
    M: ReadableTable<&'static str, u64>,
{
    fn rec(&self, ino: InodeId) -> Result<Rec> {
        match self.inodes.get(ino.0)? {
            Some(v) => decode(ino.0, v.value()),
            None => Err(MetaError::NotFound),
        }
    }

    /// See [`crate::MetaStore::parent`].
    pub fn parent(&self, dir: InodeId) -> Result<InodeId> {
        let rec = self.rec(dir)?;
        if rec.inode.attr.kind != FileKind::Dir {
            return Err(MetaError::NotDir);
        }
        rec.parent
            .ok_or_else(|| corrupt(format!("directory {dir:?} has no parent pointer")))
    }

    /// The name `ino` has in `dir`, if any: a scan of `dir`'s entries.
    fn name_in(&self, dir: InodeId, ino: InodeId) -> Result<Option<Vec<u8>>> {
        let range = prefix_range(dir.0);
        for entry in self.dirents.range::<&[u8]>(as_slices(&range))? {
            let (k, v) = entry?;
            if dval_decode(v.value())?.0 == ino {
                return Ok(Some(k.value()[8..].to_vec()));
            }
        }
        Ok(None)
    }

    /// See [`crate::MetaStore::path_of`]. Walked in a loop, bounded by the
    /// number of directories (a longer chain goes round a cycle, which
    /// only a damaged store holds).
    pub fn path_of(&self, ino: InodeId) -> Result<Option<Vec<Vec<u8>>>> {
        let dirs = self.meta.get(DIRS)?.map(|v| v.value()).unwrap_or(0);
        let mut names = Vec::new();
        let mut at = ino;
        let mut rec = self.rec(at)?;
        for _ in 0..=dirs {
            if at == InodeId::ROOT {
                names.reverse();
                return Ok(Some(names));
            }
            let Some(parent) = rec.parent else {
                return Ok(None);
            };
            let Some(name) = self.name_in(parent, at)? else {
                return Ok(None);
            };
            names.push(name);
            at = parent;
            rec = match self.rec(at) {
                Ok(r) => r,
                // A non-directory's last parent, deleted since.
                Err(MetaError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        Err(corrupt(format!("a parent-pointer cycle above {ino:?}")))
    }
}

/// The `meta` key set once every non-directory's parent pointer was
/// filled in from its names (records written before non-directories kept
/// one hold 0).
const FILE_PARENTS: &str = "file_parents";
/// Entries read per step of that fill, so its memory stays bounded.
const FILL_STEP: usize = 4096;

/// Gives every non-directory whose parent pointer is 0 the directory of
/// one of its names, once per store (a walk of every entry, in steps).
pub(crate) fn fill_file_parents(
    inodes: &mut redb::Table<'_, u64, &'static [u8]>,
    dirents: &redb::Table<'_, &'static [u8], [u8; 9]>,
    meta: &mut redb::Table<'_, &'static str, u64>,
) -> Result<()> {
    if meta.get(FILE_PARENTS)?.is_some() {
        return Ok(());
    }
    let mut after: Option<Vec<u8>> = None;
    loop {
        let range = match &after {
            Some(k) => dirents.range::<&[u8]>((
                std::ops::Bound::Excluded(k.as_slice()),
                std::ops::Bound::Unbounded,
            ))?,
            None => dirents.range::<&[u8]>(..)?,
        };
        let mut step = Vec::with_capacity(FILL_STEP);
        let mut read = 0;
        for entry in range.take(FILL_STEP) {
            read += 1;
            let (k, v) = entry?;
            let key = k.value().to_vec();
            let (ino, kind) = dval_decode(v.value())?;
            if kind != FileKind::Dir && key.len() >= 8 {
                let parent = u64::from_be_bytes(key[..8].try_into().expect("8 bytes"));
                step.push((ino, InodeId(parent)));
            }
            after = Some(key);
        }
        for (ino, parent) in step {
            let rec = match inodes.get(ino.0)? {
                Some(v) => decode(ino.0, v.value())?,
                None => continue,
            };
            if rec.parent.is_none() {
                let rec = Rec {
                    parent: Some(parent),
                    ..rec
                };
                inodes.insert(ino.0, encode(ino.0, &rec).as_slice())?;
            }
        }
        if read < FILL_STEP {
            break;
        }
    }
    meta.insert(FILE_PARENTS, 1)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{
        Content, FileKind, InodeId, MetaError, MetaStore, NewInode, RedbMeta, RenameFlags,
        Timestamp,
    };

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

    fn path(m: &RedbMeta, ino: InodeId) -> Option<String> {
        m.path_of(ino).unwrap().map(|names| {
            let names: Vec<String> = names
                .iter()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect();
            names.join("/")
        })
    }

    #[test]
    fn paths_follow_creates_renames_links_and_unlinks() {
        let dir = tempfile::tempdir().unwrap();
        let m = RedbMeta::open(&dir.path().join("fs.redb"), 0, 0).unwrap();
        let t = Timestamp::default();
        let a = m
            .create(InodeId::ROOT, b"a", new(FileKind::Dir), t)
            .unwrap();
        let b = m.create(a.id, b"b", new(FileKind::Dir), t).unwrap();
        let f = m.create(b.id, b"f.txt", new(FileKind::File), t).unwrap();
        assert_eq!(path(&m, InodeId::ROOT).as_deref(), Some(""));
        assert_eq!(path(&m, f.id).as_deref(), Some("a/b/f.txt"));
        assert_eq!(m.parent(b.id).unwrap(), a.id);
        assert_eq!(m.parent(InodeId::ROOT).unwrap(), InodeId::ROOT);
        assert!(matches!(m.parent(f.id), Err(MetaError::NotDir)));

        // A directory moved carries its files' paths along.
        let flags = RenameFlags::default();
        m.rename(a.id, b"b", InodeId::ROOT, b"c", flags, &|_| false, t)
            .unwrap();
        assert_eq!(m.parent(b.id).unwrap(), InodeId::ROOT);
        assert_eq!(path(&m, f.id).as_deref(), Some("c/f.txt"));
        m.rename(b.id, b"f.txt", a.id, b"g.txt", flags, &|_| false, t)
            .unwrap();
        assert_eq!(path(&m, f.id).as_deref(), Some("a/g.txt"));

        // A hard link: the name last given, until it goes; the file is
        // then unknown rather than named wrongly.
        m.link(f.id, b.id, b"h.txt", t).unwrap();
        assert_eq!(path(&m, f.id).as_deref(), Some("c/h.txt"));
        m.unlink(b.id, b"h.txt", false, t).unwrap();
        assert_eq!(path(&m, f.id), None);
        m.rename(a.id, b"g.txt", a.id, b"k.txt", flags, &|_| false, t)
            .unwrap();
        assert_eq!(path(&m, f.id).as_deref(), Some("a/k.txt"));

        // An exchange swaps both pointers; an orphan has no path.
        let x = m.create(b.id, b"x", new(FileKind::File), t).unwrap();
        let exchange = RenameFlags {
            noreplace: false,
            exchange: true,
        };
        m.rename(a.id, b"k.txt", b.id, b"x", exchange, &|_| false, t)
            .unwrap();
        assert_eq!(path(&m, f.id).as_deref(), Some("c/x"));
        assert_eq!(path(&m, x.id).as_deref(), Some("a/k.txt"));
        m.unlink(b.id, b"x", true, t).unwrap();
        assert_eq!(path(&m, f.id), None);
        assert!(m.verify().unwrap().is_empty());
    }

    /// A store from before non-directories kept a parent pointer: each
    /// file gets one from its names when the store is opened.
    #[test]
    fn an_older_store_gets_its_files_parents_on_open() {
        use crate::record::{decode, encode, INODES, META};
        use redb::ReadableTable;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fs.redb");
        let m = RedbMeta::open(&file, 0, 0).unwrap();
        let t = Timestamp::default();
        let d = m
            .create(InodeId::ROOT, b"d", new(FileKind::Dir), t)
            .unwrap();
        let f = m.create(d.id, b"f", new(FileKind::File), t).unwrap();
        m.sync().unwrap();
        // Made old: the file's pointer 0, the fill not yet run.
        let db = m.db().unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut inodes = tx.open_table(INODES).unwrap();
            let old = inodes.get(f.id.0).unwrap().unwrap().value().to_vec();
            let rec = crate::record::Rec {
                parent: None,
                ..decode(f.id.0, &old).unwrap()
            };
            inodes
                .insert(f.id.0, encode(f.id.0, &rec).as_slice())
                .unwrap();
            tx.open_table(META)
                .unwrap()
                .remove(super::FILE_PARENTS)
                .unwrap();
        }
        tx.commit().unwrap();
        drop(db);
        assert_eq!(path(&m, f.id), None);
        drop(m);

        let m = RedbMeta::open(&file, 0, 0).unwrap();
        assert_eq!(path(&m, f.id).as_deref(), Some("d/f"));
        assert!(m.verify().unwrap().is_empty());
    }
}

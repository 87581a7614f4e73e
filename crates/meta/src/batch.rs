//! One operation's view of the open write transaction: its tables, the
//! inodes it touched (written back once at the end) and the counter deltas.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::pathindex::{IndexMem, MOVES, PATHS, PATH_KEYS};
use crate::record::{
    as_slices, corrupt, decode, dkey, dval, dval_decode, encode, prefix_range, Rec, DIRENTS, DIRS,
    FILES, INODES, INTENTS, META, NEXT_INO, ORPHANS, XATTRS,
};
use crate::unsynced::{Before, Unsynced};
use crate::{FileKind, Inode, InodeId, MetaError, Result, Timestamp};

/// The tables of one write transaction, with the inodes it touched cached so
/// that every change to an inode in the transaction applies to one copy
/// (a rename within one directory updates that directory twice).
pub(crate) struct W<'t> {
    /// For the tables few operations open (the intent log).
    tx: &'t WriteTransaction,
    pub(crate) inodes: Table<'t, u64, &'static [u8]>,
    pub(crate) dirents: Table<'t, &'static [u8], [u8; 9]>,
    pub(crate) xattrs: Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) orphans: Table<'t, u64, ()>,
    pub(crate) meta: Table<'t, &'static str, u64>,
    pub(crate) paths: Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) path_keys: Table<'t, u64, &'static [u8]>,
    pub(crate) moves: Table<'t, u64, &'static [u8]>,
    /// The engine's memory of the path index (`pathindex`).
    pub(crate) index: Arc<Mutex<IndexMem>>,
    /// Files given a name by this operation, with its path.
    pub(crate) new_paths: HashMap<u64, Vec<u8>>,
    /// Loaded records, with whether they changed.
    pub(crate) cache: HashMap<u64, (Rec, bool)>,
    pub(crate) files_delta: i64,
    pub(crate) dirs_delta: i64,
    /// A table was changed directly (not through the record cache): if the
    /// operation then fails, its batch cannot be kept.
    pub(crate) mutated: bool,
    /// The content records set since the last sync (the engine's).
    unsynced: Arc<Mutex<Unsynced>>,
}

impl<'t> W<'t> {
    pub(crate) fn open(
        tx: &'t WriteTransaction,
        index: Arc<Mutex<IndexMem>>,
        unsynced: Arc<Mutex<Unsynced>>,
    ) -> Result<Self> {
        Ok(W {
            tx,
            inodes: tx.open_table(INODES)?,
            dirents: tx.open_table(DIRENTS)?,
            xattrs: tx.open_table(XATTRS)?,
            orphans: tx.open_table(ORPHANS)?,
            meta: tx.open_table(META)?,
            paths: tx.open_table(PATHS)?,
            path_keys: tx.open_table(PATH_KEYS)?,
            moves: tx.open_table(MOVES)?,
            index,
            new_paths: HashMap::new(),
            cache: HashMap::new(),
            files_delta: 0,
            dirs_delta: 0,
            mutated: false,
            unsynced,
        })
    }

    fn load(&mut self, ino: InodeId) -> Result<&mut (Rec, bool)> {
        if !self.cache.contains_key(&ino.0) {
            let rec = match self.inodes.get(ino.0)? {
                Some(v) => decode(ino.0, v.value())?,
                None => return Err(MetaError::NotFound),
            };
            self.cache.insert(ino.0, (rec, false));
        }
        Ok(self.cache.get_mut(&ino.0).unwrap())
    }

    /// An inode, to read.
    pub(crate) fn rec(&mut self, ino: InodeId) -> Result<&Rec> {
        Ok(&self.load(ino)?.0)
    }

    /// An inode, to change: it is written back at the end.
    pub(crate) fn rec_mut(&mut self, ino: InodeId) -> Result<&mut Rec> {
        let slot = self.load(ino)?;
        slot.1 = true;
        Ok(&mut slot.0)
    }

    /// `ino`, which must be a directory.
    pub(crate) fn dir(&mut self, ino: InodeId) -> Result<&Rec> {
        let rec = self.rec(ino)?;
        if !rec.is_dir() {
            return Err(MetaError::NotDir);
        }
        Ok(rec)
    }

    pub(crate) fn entry(
        &self,
        parent: InodeId,
        name: &[u8],
    ) -> Result<Option<(InodeId, FileKind)>> {
        match self.dirents.get(dkey(parent, name).as_slice())? {
            Some(v) => Ok(Some(dval_decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub(crate) fn put_entry(
        &mut self,
        parent: InodeId,
        name: &[u8],
        ino: InodeId,
        kind: FileKind,
    ) -> Result<()> {
        self.mutated = true;
        self.dirents
            .insert(dkey(parent, name).as_slice(), dval(ino, kind))?;
        Ok(())
    }

    pub(crate) fn del_entry(&mut self, parent: InodeId, name: &[u8]) -> Result<()> {
        self.mutated = true;
        self.dirents.remove(dkey(parent, name).as_slice())?;
        Ok(())
    }

    pub(crate) fn is_empty_dir(&self, dir: InodeId) -> Result<bool> {
        let range = prefix_range(dir.0);
        Ok(self
            .dirents
            .range::<&[u8]>(as_slices(&range))?
            .next()
            .is_none())
    }

    /// A directory's contents changed.
    pub(crate) fn touch_dir(&mut self, dir: InodeId, now: Timestamp) -> Result<()> {
        let a = &mut self.rec_mut(dir)?.inode.attr;
        a.mtime = now;
        a.ctime = now;
        Ok(())
    }

    pub(crate) fn add_nlink(&mut self, ino: InodeId, delta: i32) -> Result<()> {
        let a = &mut self.rec_mut(ino)?.inode.attr;
        a.nlink = a
            .nlink
            .checked_add_signed(delta)
            .ok_or(MetaError::Invalid("too many links"))?;
        Ok(())
    }

    pub(crate) fn alloc_ino(&mut self) -> Result<InodeId> {
        let next = self.meta.get(NEXT_INO)?.map(|v| v.value()).unwrap_or(2);
        self.mutated = true;
        self.meta.insert(NEXT_INO, next + 1)?;
        Ok(InodeId(next))
    }

    pub(crate) fn insert_new(&mut self, rec: Rec) {
        if rec.is_dir() {
            self.dirs_delta += 1;
        } else {
            self.files_delta += 1;
        }
        self.cache.insert(rec.inode.id.0, (rec, true));
    }

    /// Deletes an inode, its xattrs and its orphan mark (not its names).
    pub(crate) fn delete_inode(&mut self, ino: InodeId) -> Result<()> {
        if self.rec(ino)?.is_dir() {
            self.dirs_delta -= 1;
        } else {
            self.files_delta -= 1;
        }
        self.unindex(ino)?;
        self.cache.remove(&ino.0);
        self.mutated = true;
        self.inodes.remove(ino.0)?;
        self.orphans.remove(ino.0)?;
        let range = prefix_range(ino.0);
        self.xattrs
            .retain_in::<&[u8], _>(as_slices(&range), |_, _| false)?;
        self.clear_intents(ino)
    }

    /// Drops the intent records of `ino`: its content was set, or it is
    /// gone.
    pub(crate) fn clear_intents(&mut self, ino: InodeId) -> Result<()> {
        self.unsynced.lock().forget(ino);
        let mut intents = self.tx.open_table(INTENTS)?;
        let mut some = false;
        intents.retain_in((ino.0, 0)..=(ino.0, u64::MAX), |_, _| {
            some = true;
            false
        })?;
        self.mutated |= some;
        Ok(())
    }

    /// The sequence number of the last intent record of `ino`.
    fn last_intent(&self, ino: InodeId) -> Result<Option<u64>> {
        let intents = self.tx.open_table(INTENTS)?;
        let last = intents.range((ino.0, 0)..=(ino.0, u64::MAX))?.next_back();
        Ok(match last {
            Some(last) => Some(last?.0.value().1),
            None => None,
        })
    }

    /// Notes that the content of `ino` is about to be set: its record as
    /// of the last sync is kept for [`W::revert_content`], and its intent
    /// log is hidden (deleted by the sync; see `unsynced`).
    pub(crate) fn content_set(&mut self, ino: InodeId) -> Result<()> {
        let last = self.last_intent(ino)?;
        let inode = &self.rec(ino)?.inode;
        let before = Before {
            content: inode.content.clone(),
            size: inode.attr.size,
            mtime: inode.attr.mtime,
            ctime: inode.attr.ctime,
            log_upto: last,
        };
        self.unsynced.lock().content_set(ino, before, last);
        Ok(())
    }

    /// Puts the content of `ino` back as of the last sync: content, size,
    /// times, and the intent log it had (records appended since go).
    pub(crate) fn revert_content(&mut self, ino: InodeId) -> Result<Option<Inode>> {
        let Some(before) = self.unsynced.lock().take(ino) else {
            return Ok(None);
        };
        let rec = match self.rec_mut(ino) {
            Err(MetaError::NotFound) => return Ok(None),
            other => other?,
        };
        rec.inode.content = before.content;
        let a = &mut rec.inode.attr;
        a.size = before.size;
        a.mtime = before.mtime;
        a.ctime = before.ctime;
        let inode = rec.inode.clone();
        let from = before.log_upto.map_or(0, |s| s + 1);
        let mut intents = self.tx.open_table(INTENTS)?;
        intents.retain_in((ino.0, from)..=(ino.0, u64::MAX), |_, _| false)?;
        self.mutated = true;
        Ok(Some(inode))
    }

    /// Appends `record` to the intent log of `ino`.
    pub(crate) fn append_intent(&mut self, ino: InodeId, record: &[u8]) -> Result<()> {
        self.rec(ino)?;
        let mut intents = self.tx.open_table(INTENTS)?;
        let next = match intents.range((ino.0, 0)..=(ino.0, u64::MAX))?.next_back() {
            Some(last) => last?.0.value().1 + 1,
            None => 0,
        };
        self.mutated = true;
        intents.insert((ino.0, next), record)?;
        Ok(())
    }

    /// A non-directory lost one name: lowers its link count and, at zero,
    /// keeps it as an orphan or deletes it. Returns it as it is after.
    pub(crate) fn drop_link(
        &mut self,
        ino: InodeId,
        keep_orphan: bool,
        now: Timestamp,
    ) -> Result<Inode> {
        self.unindex(ino)?;
        let rec = self.rec_mut(ino)?;
        let a = &mut rec.inode.attr;
        a.nlink = a.nlink.saturating_sub(1);
        a.ctime = now;
        let out = rec.inode.clone();
        if out.attr.nlink == 0 {
            if keep_orphan {
                self.mutated = true;
                self.orphans.insert(ino.0, ())?;
            } else {
                self.delete_inode(ino)?;
            }
        }
        Ok(out)
    }

    /// Whether `dir` is `ancestor` or lies below it, following parent
    /// pointers up to the root: a loop, not a call per level, since a tree
    /// is as deep as its users make it.
    pub(crate) fn is_within(&mut self, mut dir: InodeId, ancestor: InodeId) -> Result<bool> {
        // A chain longer than there are directories goes round a cycle,
        // which only a damaged store holds.
        let dirs = self.meta.get(DIRS)?.map(|v| v.value()).unwrap_or(0);
        let steps = dirs
            .saturating_add_signed(self.dirs_delta)
            .saturating_add(1);
        for _ in 0..steps {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == InodeId::ROOT {
                return Ok(false);
            }
            dir = self
                .rec(dir)?
                .parent
                .ok_or_else(|| corrupt(format!("directory {dir:?} has no parent pointer")))?;
        }
        Err(corrupt(format!("a parent-pointer cycle above {dir:?}")))
    }

    /// Writes what the operation changed; whether it changed anything.
    pub(crate) fn flush(mut self) -> Result<bool> {
        self.flush_index()?;
        let mut changed = self.mutated;
        for (ino, (rec, dirty)) in &self.cache {
            if *dirty {
                self.inodes.insert(*ino, encode(*ino, rec).as_slice())?;
                changed = true;
            }
        }
        for (key, delta) in [(FILES, self.files_delta), (DIRS, self.dirs_delta)] {
            if delta != 0 {
                let n = self.meta.get(key)?.map(|v| v.value()).unwrap_or(0);
                self.meta.insert(key, n.saturating_add_signed(delta))?;
                changed = true;
            }
        }
        Ok(changed)
    }
}

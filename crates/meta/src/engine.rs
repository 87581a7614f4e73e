//! [`RedbMeta`]: the [`MetaStore`] over one redb file: opening it, batching
//! operations into write transactions, and the operations themselves. The
//! tables' bytes are in `record`, one operation's transaction in `batch`,
//! the fsck in `verify`.
//!
//! Every mutation is one write transaction committed with
//! [`Durability::None`]; [`MetaStore::sync`] commits an empty transaction
//! with [`Durability::Immediate`], which makes every earlier commit durable.

use parking_lot::{Mutex, RwLock};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, WriteTransaction,
};

use crate::batch::W;
use crate::pathindex::{IndexMem, MOVES, PATHS};
use crate::record::{
    as_slices, corrupt, decode, dkey, dval_decode, holds_recipe, prefix_range, record_kind, Rec,
    DIRENTS, DIRS, FILES, INODES, INTENTS, META, NEXT_INO, RECORDS_SUMMED, XATTRS,
};
use crate::rules::{check_name, check_xattr_name, new_size};
use crate::unsynced::Unsynced;
use crate::{
    Attr, Content, ContentHints, Counts, DirEntry, FileKind, Inode, InodeId, MetaError, MetaStore,
    NewInode, PathFound, RenameFlags, Result, SetAttr, Timestamp, XattrChange, XattrFlags,
};
use counted::Counted;

macro_rules! redb_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self {
                MetaError::Store(redb::Error::from(e))
            }
        }
    )*};
}
redb_errors!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

// ---------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------

/// The metadata store in one redb file.
///
/// Changes are batched: each operation runs in the one open write
/// transaction, and that transaction is committed (without fsync) when a
/// read needs to see it, after [`MAX_BATCH`] operations, or durably by
/// [`MetaStore::sync`]. A redb commit costs several times the operation it
/// commits (dirty-page checksums, allocator bookkeeping), and a file
/// created, written and closed is two operations with no read between.
/// Durability is what it was: nothing is durable before `sync`.
///
/// A write that fails for an operating-system reason (a full disk) leaves
/// redb refusing every later write ("Previous I/O error occurred") until
/// the database is reopened. So the database is dropped at such an error
/// and reopened by the next operation: what was applied since the last
/// `sync` is lost, as after a crash, and everything synced stays. A full
/// disk then costs the operations that met it, not the file system.
pub struct RedbMeta {
    /// `None` after an I/O error, until the next operation reopens it.
    db: RwLock<Option<Arc<Database>>>,
    /// The file, when the store is one (not a test's storage backend).
    path: Option<PathBuf>,
    /// Bytes of redb's page cache, also when the database is reopened.
    cache_bytes: usize,
    batch: Mutex<Batch>,
    /// The path index's memory, consistent with the open batch (reset
    /// whenever a batch is lost). Locked after `batch`, never before.
    index: Arc<Mutex<IndexMem>>,
    /// Reads of the storage backend so far (see [`Counted`]).
    reads: Arc<AtomicU64>,
    /// Operations that changed something so far ([`MetaStore::changes`]).
    changes: AtomicU64,
    /// The content records set since the last sync (`unsynced`). Locked
    /// after `batch` and `index`, never before.
    unsynced: Arc<Mutex<Unsynced>>,
}

/// Operations applied but not yet committed.
#[derive(Default)]
struct Batch {
    tx: Option<WriteTransaction>,
    ops: usize,
    /// Something was committed without fsync since the last `sync`: a
    /// `sync` with nothing to make durable costs no disk flush (a program
    /// that fsyncs a directory after every fsync of a file).
    unsynced: bool,
}

/// Free bytes under which operations that grow the namespace are refused.
/// Branches keep at least twice this free (`branch::reserve`), so data
/// fills a disk before metadata does.
pub const GROWTH_FLOOR: u64 = 1 << 20;

/// Free bytes for an unprivileged user on the disk holding `dir`; `None`
/// if statvfs fails (the operation then goes ahead and redb reports).
fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer statvfs fills on success.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised the buffer.
    let st = unsafe { st.assume_init() };
    // statvfs's field types differ by target (32 bits on some): the casts
    // are no-ops only here.
    #[allow(clippy::unnecessary_cast)]
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    Some(free)
}

/// Operations per commit at most, which bounds redb's dirty pages.
const MAX_BATCH: usize = 256;

/// The default of redb's page cache for the metadata engine
/// (`memory.metadata_cache`). redb's own default is 1 GiB: with many inline
/// files it grew the daemon by that much. 64 MiB keeps the hot namespace in
/// memory.
pub const DEFAULT_CACHE: usize = 64 << 20;

fn builder(cache_bytes: usize) -> redb::Builder {
    let mut b = redb::Builder::new();
    b.set_cache_size(cache_bytes);
    b
}

impl Drop for RedbMeta {
    /// Leaves nothing applied but uncommitted (a process that exits without
    /// `sync` loses it anyway; one that reopens the store sees it).
    fn drop(&mut self) {
        if let Err(e) = self.settle() {
            tracing::error!(error = %e, "committing the last metadata changes failed");
        }
    }
}

impl std::fmt::Debug for RedbMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbMeta").finish_non_exhaustive()
    }
}

impl RedbMeta {
    /// Opens the store at `path`, creating it (with a root directory owned by
    /// `root_uid`/`root_gid`, mode 0755) if it does not exist.
    ///
    /// A new store is built under a temporary name and renamed into place,
    /// so a process killed while creating it leaves either no file or a
    /// whole one, never a half-written file that would read as damage.
    pub fn open(path: &Path, root_uid: u32, root_gid: u32) -> Result<Self> {
        Self::open_cached(path, root_uid, root_gid, DEFAULT_CACHE)
    }

    /// [`RedbMeta::open`] with a page cache of `cache_bytes` (redb keeps
    /// the pages it read or wrote there, up to that many bytes).
    pub fn open_cached(
        path: &Path,
        root_uid: u32,
        root_gid: u32,
        cache_bytes: usize,
    ) -> Result<Self> {
        if !path.exists() {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".creating");
            let tmp = std::path::PathBuf::from(tmp);
            let io = |source: std::io::Error| MetaError::Open {
                path: path.to_path_buf(),
                source: redb::Error::Io(source),
            };
            match std::fs::remove_file(&tmp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
                _ => {}
            }
            drop(Self::open_at(&tmp, root_uid, root_gid, cache_bytes)?);
            std::fs::rename(&tmp, path).map_err(io)?;
            if let Some(dir) = path.parent() {
                std::fs::File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io)?;
            }
        }
        Self::open_at(path, root_uid, root_gid, cache_bytes)
    }

    fn open_db(path: &Path, reads: &Arc<AtomicU64>, cache_bytes: usize) -> Result<Database> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| MetaError::Open {
                path: path.to_path_buf(),
                source: redb::Error::Io(e),
            })?;
        let opened = redb::backends::FileBackend::new(file)
            .and_then(|b| builder(cache_bytes).create_with_backend(Counted::new(b, reads.clone())));
        match opened {
            Ok(db) => Ok(db),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                Err(MetaError::Busy(path.to_path_buf()))
            }
            Err(e) => Err(MetaError::Open {
                path: path.to_path_buf(),
                source: e.into(),
            }),
        }
    }

    /// The database, reopened first if an I/O error closed it.
    pub(crate) fn db(&self) -> Result<Arc<Database>> {
        if let Some(db) = self.db.read().as_ref() {
            return Ok(db.clone());
        }
        let mut slot = self.db.write();
        if let Some(db) = slot.as_ref() {
            return Ok(db.clone());
        }
        let path = self
            .path
            .as_deref()
            .ok_or(MetaError::Store(redb::Error::PreviousIo))?;
        let db = Arc::new(Self::open_db(path, &self.reads, self.cache_bytes)?);
        tracing::warn!(path = %path.display(), "reopened the metadata engine after an I/O error; changes since the last commit were lost");
        *slot = Some(db.clone());
        Ok(db)
    }

    /// Closes the database after an I/O error, so that the next operation
    /// reopens it (see the type's docs); other errors pass through. A store
    /// over a backend (tests) cannot be reopened and stays as it is.
    fn after(&self, e: MetaError) -> MetaError {
        if let Some(path) = &self.path {
            if matches!(
                e,
                MetaError::Store(redb::Error::Io(_) | redb::Error::PreviousIo)
            ) {
                tracing::error!(path = %path.display(), error = %e, "the metadata engine failed to write; reopening it");
                *self.db.write() = None;
                self.index.lock().reset();
                self.unsynced.lock().clear();
            }
        }
        e
    }

    fn open_at(path: &Path, root_uid: u32, root_gid: u32, cache_bytes: usize) -> Result<Self> {
        let reads = Arc::new(AtomicU64::new(0));
        let db = Self::open_db(path, &reads, cache_bytes)?;
        let path = Some(path.to_path_buf());
        Self::with_database(db, path, cache_bytes, reads, root_uid, root_gid)
    }

    /// [`RedbMeta::open`] over a redb storage backend instead of a file
    /// (the power-loss tests give it one that loses unsynced writes); an
    /// empty backend gets a new store. The bytes are the same as the file's.
    pub fn open_on(
        backend: impl redb::StorageBackend,
        root_uid: u32,
        root_gid: u32,
    ) -> Result<Self> {
        let name = format!("{backend:?}");
        let reads = Arc::new(AtomicU64::new(0));
        let db = builder(DEFAULT_CACHE)
            .create_with_backend(Counted::new(backend, reads.clone()))
            .map_err(|e| MetaError::Open {
                path: name.into(),
                source: e.into(),
            })?;
        Self::with_database(db, None, DEFAULT_CACHE, reads, root_uid, root_gid)
    }

    fn with_database(
        db: Database,
        path: Option<PathBuf>,
        cache_bytes: usize,
        reads: Arc<AtomicU64>,
        root_uid: u32,
        root_gid: u32,
    ) -> Result<Self> {
        let index = Arc::new(Mutex::new(IndexMem::default()));
        let tx = db.begin_write()?;
        {
            let mut w = W::open(&tx, index.clone(), Arc::default())?;
            if w.inodes.get(InodeId::ROOT.0)?.is_none() {
                let others = w.inodes.len()?;
                if others > 0 {
                    return Err(MetaError::RootMissing(others));
                }
                let now = Timestamp::now();
                w.insert_new(Rec {
                    inode: Inode {
                        id: InodeId::ROOT,
                        attr: Attr {
                            kind: FileKind::Dir,
                            perm: 0o755,
                            uid: root_uid,
                            gid: root_gid,
                            size: 0,
                            nlink: 2,
                            rdev: 0,
                            atime: now,
                            mtime: now,
                            ctime: now,
                            crtime: now,
                        },
                        content: Content::Empty,
                    },
                    parent: Some(InodeId::ROOT),
                });
                if w.meta.get(NEXT_INO)?.is_none() {
                    w.meta.insert(NEXT_INO, InodeId::ROOT.0 + 1)?;
                }
            }
            crate::parents::fill_file_parents(&mut w.inodes, &w.dirents, &mut w.meta)?;
            if w.meta.get(RECORDS_SUMMED)?.is_none() {
                let records = crate::record::sum_records(&mut w.inodes)?
                    + crate::pathindex::sum_entries(&mut w.paths)?;
                w.meta.insert(RECORDS_SUMMED, 1)?;
                if records > 0 {
                    tracing::info!(
                        records,
                        "the metadata's records were written again, each with its checksum"
                    );
                }
            }
            w.flush()?;
        }
        tx.commit()?;
        Ok(RedbMeta {
            db: RwLock::new(Some(Arc::new(db))),
            path,
            cache_bytes,
            batch: Mutex::new(Batch::default()),
            index,
            reads,
            changes: AtomicU64::new(0),
            unsynced: Arc::default(),
        })
    }

    /// Runs `f` as one operation of the open batch. A failed operation
    /// leaves the batch as it was, since operations check everything before
    /// they change a table; one that fails after changing one (a storage
    /// error) takes the whole uncommitted batch down with it, as a crash
    /// would.
    fn write<T>(&self, f: impl FnOnce(&mut W<'_>) -> Result<T>) -> Result<T> {
        self.write_batched(f).map_err(|e| self.after(e))
    }

    /// [`RedbMeta::write`] of an operation that grows the namespace:
    /// refused while the disk has less than [`GROWTH_FLOOR`] free, so that
    /// redb never meets ENOSPC in the middle of a batch (which would lose
    /// the batch) and removals still find room for their pages.
    fn write_growing<T>(&self, f: impl FnOnce(&mut W<'_>) -> Result<T>) -> Result<T> {
        if let Some(path) = &self.path {
            let dir = path.parent().unwrap_or(Path::new("."));
            if let Some(free) = free_bytes(dir) {
                if free < GROWTH_FLOOR {
                    return Err(MetaError::NoSpace {
                        path: path.clone(),
                        free,
                    });
                }
            }
        }
        self.write(f)
    }

    fn write_batched<T>(&self, f: impl FnOnce(&mut W<'_>) -> Result<T>) -> Result<T> {
        let mut batch = self.batch.lock();
        let tx = match batch.tx.take() {
            Some(tx) => tx,
            None => {
                let mut tx = self.db()?.begin_write()?;
                tx.set_durability(Durability::None)?;
                tx
            }
        };
        let (out, clean) = match W::open(&tx, self.index.clone(), self.unsynced.clone()) {
            Err(e) => (Err(e), false),
            Ok(mut w) => match f(&mut w) {
                Ok(v) => {
                    // Counted before the commit: a count that moves
                    // without a change only costs a caller a look.
                    let flushed = w.flush().inspect(|&changed| {
                        if changed {
                            self.changes.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    (flushed.map(|_| v), false)
                }
                Err(e) => {
                    let clean = !w.mutated && !matches!(e, MetaError::Store(_));
                    (Err(e), clean)
                }
            },
        };
        match out {
            Ok(v) => {
                batch.ops += 1;
                batch.unsynced = true;
                if batch.ops >= MAX_BATCH {
                    batch.ops = 0;
                    tx.commit().inspect_err(|_| self.index.lock().reset())?;
                } else {
                    batch.tx = Some(tx);
                }
                Ok(v)
            }
            Err(e) if clean && batch.ops > 0 => {
                batch.tx = Some(tx);
                Err(e)
            }
            Err(e) => {
                batch.ops = 0;
                self.index.lock().reset();
                // The error of the operation is the one that matters.
                let _ = tx.abort();
                Err(e)
            }
        }
    }

    /// Commits the open batch (without fsync), so read transactions see it.
    fn settle(&self) -> Result<()> {
        let mut batch = self.batch.lock();
        batch.ops = 0;
        match batch.tx.take() {
            Some(tx) => tx.commit().map_err(|e| {
                self.index.lock().reset();
                self.after(e.into())
            }),
            None => Ok(()),
        }
    }

    /// A trusted path-index entry for `path`, read from the open batch
    /// when there is one; `None` for a miss, a collision or a doubt.
    fn index_hit(&self, path: &[u8]) -> Result<Option<PathFound>> {
        let batch = self.batch.lock();
        if let Some(tx) = &batch.tx {
            let mut mem = self.index.lock();
            let moves = mem.moves(&tx.open_table(META)?, &tx.open_table(MOVES)?)?;
            return crate::pathindex::hit(&tx.open_table(PATHS)?, moves, path);
        }
        // The moves are loaded under the batch lock, so that no batch
        // adds one meanwhile; the read that follows is as new as they or
        // newer (a commit after it brings its moves with it).
        if self.index.lock().moves.is_none() {
            let tx = self.db()?.begin_read()?;
            let mut mem = self.index.lock();
            mem.moves(&tx.open_table(META)?, &tx.open_table(MOVES)?)?;
        }
        drop(batch);
        let tx = self.db()?.begin_read()?;
        let mem = self.index.lock();
        // Reset meanwhile: loading now could miss a move (see above).
        let Some(moves) = mem.moves.as_ref() else {
            return Ok(None);
        };
        crate::pathindex::hit(&tx.open_table(PATHS)?, moves, path)
    }

    /// `path` looked up name by name (on a full disk, where the index
    /// cannot be written).
    fn walk(&self, path: &[u8]) -> Result<Inode> {
        let mut inode = self.get(InodeId::ROOT)?;
        for part in path.split(|&b| b == b'/') {
            inode = self.lookup(inode.id, part)?;
        }
        Ok(inode)
    }

    pub(crate) fn begin_read(&self) -> Result<redb::ReadTransaction> {
        self.settle()?;
        Ok(self.db()?.begin_read()?)
    }
}

/// Runs a parent walk (`$walk` on a [`crate::parents::Tables`]) from the
/// open batch when there is one (as [`MetaStore::get`]), else from a read
/// transaction.
macro_rules! read_parents {
    ($self:ident, |$t:ident| $walk:expr) => {{
        let batch = $self.batch.lock();
        if let Some(tx) = &batch.tx {
            let (i, d, m) = (
                tx.open_table(INODES)?,
                tx.open_table(DIRENTS)?,
                tx.open_table(META)?,
            );
            let $t = crate::parents::Tables {
                inodes: &i,
                dirents: &d,
                meta: &m,
            };
            return $walk;
        }
        drop(batch);
        let tx = $self.db()?.begin_read()?;
        let (i, d, m) = (
            tx.open_table(INODES)?,
            tx.open_table(DIRENTS)?,
            tx.open_table(META)?,
        );
        let $t = crate::parents::Tables {
            inodes: &i,
            dirents: &d,
            meta: &m,
        };
        $walk
    }};
}

/// Reads both a read transaction and the open batch serve.
fn get_in(inodes: &impl ReadableTable<u64, &'static [u8]>, ino: InodeId) -> Result<Inode> {
    match inodes.get(ino.0)? {
        Some(v) => Ok(decode(ino.0, v.value())?.inode),
        None => Err(MetaError::NotFound),
    }
}

fn lookup_in(
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    dirents: &impl ReadableTable<&'static [u8], [u8; 9]>,
    parent: InodeId,
    name: &[u8],
) -> Result<Inode> {
    match inodes.get(parent.0)? {
        None => return Err(MetaError::NotFound),
        Some(v) if record_kind(parent.0, v.value())? != FileKind::Dir => {
            return Err(MetaError::NotDir)
        }
        Some(_) => {}
    }
    let Some(v) = dirents.get(dkey(parent, name).as_slice())? else {
        return Err(MetaError::NotFound);
    };
    let (ino, _) = dval_decode(v.value())?;
    match inodes.get(ino.0)? {
        Some(v) => Ok(decode(ino.0, v.value())?.inode),
        None => Err(corrupt(format!("entry for missing inode {}", ino.0))),
    }
}

fn xattr_in(
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    xattrs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    ino: InodeId,
    name: &[u8],
) -> Result<Vec<u8>> {
    if inodes.get(ino.0)?.is_none() {
        return Err(MetaError::NotFound);
    }
    let v = xattrs.get(dkey(ino, name).as_slice())?;
    v.map(|v| v.value().to_vec()).ok_or(MetaError::NoXattr)
}

impl MetaStore for RedbMeta {
    // The reads file operations start with are served from the open batch
    // when there is one, so they do not force a commit.
    fn get(&self, ino: InodeId) -> Result<Inode> {
        let batch = self.batch.lock();
        if let Some(tx) = &batch.tx {
            return get_in(&tx.open_table(INODES)?, ino);
        }
        drop(batch);
        let tx = self.db()?.begin_read()?;
        get_in(&tx.open_table(INODES)?, ino)
    }

    fn get_many(&self, inos: &[InodeId]) -> Vec<Result<Inode>> {
        // One transaction for all; a table that cannot be opened falls back
        // to `get`, which reports its error per inode.
        {
            let batch = self.batch.lock();
            if let Some(tx) = &batch.tx {
                // The open batch holds writes no read transaction sees.
                if let Ok(t) = tx.open_table(INODES) {
                    return inos.iter().map(|i| get_in(&t, *i)).collect();
                }
                drop(batch);
                return inos.iter().map(|i| self.get(*i)).collect();
            }
        }
        let table = self
            .db()
            .and_then(|db| Ok(db.begin_read()?))
            .and_then(|tx| Ok(tx.open_table(INODES)?));
        match table {
            Ok(t) => inos.iter().map(|i| get_in(&t, *i)).collect(),
            Err(_) => inos.iter().map(|i| self.get(*i)).collect(),
        }
    }

    fn lookup(&self, parent: InodeId, name: &[u8]) -> Result<Inode> {
        check_name(name)?;
        let batch = self.batch.lock();
        if let Some(tx) = &batch.tx {
            return lookup_in(
                &tx.open_table(INODES)?,
                &tx.open_table(DIRENTS)?,
                parent,
                name,
            );
        }
        drop(batch);
        let tx = self.db()?.begin_read()?;
        lookup_in(
            &tx.open_table(INODES)?,
            &tx.open_table(DIRENTS)?,
            parent,
            name,
        )
    }

    fn create(
        &self,
        parent: InodeId,
        name: &[u8],
        mut new: NewInode,
        now: Timestamp,
    ) -> Result<Inode> {
        check_name(name)?;
        let size = new_size(&new)?;
        for (xattr, _) in &new.xattrs {
            check_xattr_name(xattr)?;
        }
        let xattrs = std::mem::take(&mut new.xattrs);
        self.write_growing(|w| {
            w.dir(parent)?;
            if w.entry(parent, name)?.is_some() {
                return Err(MetaError::Exists);
            }
            let ino = w.alloc_ino()?;
            let is_dir = new.kind == FileKind::Dir;
            let rec = Rec {
                inode: Inode {
                    id: ino,
                    attr: Attr {
                        kind: new.kind,
                        perm: new.perm & 0o7777,
                        uid: new.uid,
                        gid: new.gid,
                        size,
                        nlink: if is_dir { 2 } else { 1 },
                        rdev: new.rdev,
                        atime: now,
                        mtime: now,
                        ctime: now,
                        crtime: now,
                    },
                    content: new.content,
                },
                parent: Some(parent),
            };
            let out = rec.inode.clone();
            w.put_entry(parent, name, ino, new.kind)?;
            if is_dir {
                w.add_nlink(parent, 1)?;
            }
            w.touch_dir(parent, now)?;
            w.insert_new(rec);
            for (xattr, value) in &xattrs {
                w.xattrs
                    .insert(dkey(ino, xattr).as_slice(), value.as_slice())?;
            }
            Ok(out)
        })
    }

    fn link(
        &self,
        ino: InodeId,
        new_parent: InodeId,
        new_name: &[u8],
        now: Timestamp,
    ) -> Result<Inode> {
        check_name(new_name)?;
        self.write_growing(|w| {
            let rec = w.rec(ino)?;
            if rec.is_dir() {
                return Err(MetaError::Invalid("a directory cannot be hard-linked"));
            }
            if rec.inode.attr.nlink == 0 {
                // Linux refuses to give an unlinked file a name again.
                return Err(MetaError::NotFound);
            }
            let kind = rec.inode.attr.kind;
            w.dir(new_parent)?;
            if w.entry(new_parent, new_name)?.is_some() {
                return Err(MetaError::Exists);
            }
            w.unindex(ino)?;
            w.put_entry(new_parent, new_name, ino, kind)?;
            w.touch_dir(new_parent, now)?;
            w.add_nlink(ino, 1)?;
            let rec = w.rec_mut(ino)?;
            rec.inode.attr.ctime = now;
            rec.parent = Some(new_parent);
            Ok(rec.inode.clone())
        })
    }

    fn unlink(
        &self,
        parent: InodeId,
        name: &[u8],
        keep_orphan: bool,
        now: Timestamp,
    ) -> Result<Inode> {
        check_name(name)?;
        self.write(|w| {
            w.dir(parent)?;
            let (ino, kind) = w.entry(parent, name)?.ok_or(MetaError::NotFound)?;
            if kind == FileKind::Dir {
                return Err(MetaError::IsDir);
            }
            w.del_entry(parent, name)?;
            w.touch_dir(parent, now)?;
            w.drop_link(ino, keep_orphan, now)
        })
    }

    fn rmdir(&self, parent: InodeId, name: &[u8], now: Timestamp) -> Result<()> {
        check_name(name)?;
        self.write(|w| {
            w.dir(parent)?;
            let (ino, kind) = w.entry(parent, name)?.ok_or(MetaError::NotFound)?;
            if kind != FileKind::Dir {
                return Err(MetaError::NotDir);
            }
            if !w.is_empty_dir(ino)? {
                return Err(MetaError::NotEmpty);
            }
            w.del_entry(parent, name)?;
            w.add_nlink(parent, -1)?;
            w.touch_dir(parent, now)?;
            w.delete_inode(ino)
        })
    }

    fn rename(
        &self,
        parent: InodeId,
        name: &[u8],
        new_parent: InodeId,
        new_name: &[u8],
        flags: RenameFlags,
        keep_orphan: &dyn Fn(InodeId) -> bool,
        now: Timestamp,
    ) -> Result<Option<Inode>> {
        check_name(name)?;
        check_name(new_name)?;
        if flags.exchange && flags.noreplace {
            return Err(MetaError::Invalid("RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        self.write_growing(|w| {
            w.dir(parent)?;
            w.dir(new_parent)?;
            let (src, src_kind) = w.entry(parent, name)?.ok_or(MetaError::NotFound)?;
            let dst = w.entry(new_parent, new_name)?;
            if flags.noreplace && dst.is_some() {
                return Err(MetaError::Exists);
            }
            if flags.exchange && dst.is_none() {
                return Err(MetaError::NotFound);
            }
            if dst.is_some_and(|(d, _)| d == src) {
                // The same name, or two hard links of one inode: nothing to do.
                return Ok(None);
            }
            let src_dir = src_kind == FileKind::Dir;
            if src_dir && w.is_within(new_parent, src)? {
                return Err(MetaError::Invalid("a directory cannot move into itself"));
            }
            // Paths as they are before the rename (for the path index).
            let from = w.path_in(parent, name)?;
            let to = w.path_in(new_parent, new_name)?;

            if flags.exchange {
                let (dst, dst_kind) = dst.unwrap();
                let dst_dir = dst_kind == FileKind::Dir;
                if dst_dir && w.is_within(parent, dst)? {
                    return Err(MetaError::Invalid("a directory cannot move into itself"));
                }
                w.unindex(src)?;
                w.unindex(dst)?;
                if src_dir || dst_dir {
                    w.moved(from.clone(), to.clone())?;
                }
                if !src_dir {
                    w.index_as(src, to);
                }
                if !dst_dir {
                    w.index_as(dst, from);
                }
                w.put_entry(parent, name, dst, dst_kind)?;
                w.put_entry(new_parent, new_name, src, src_kind)?;
                if parent != new_parent {
                    if src_dir {
                        w.add_nlink(parent, -1)?;
                        w.add_nlink(new_parent, 1)?;
                    }
                    if dst_dir {
                        w.add_nlink(new_parent, -1)?;
                        w.add_nlink(parent, 1)?;
                    }
                }
                w.touch_dir(parent, now)?;
                w.touch_dir(new_parent, now)?;
                for (ino, dir) in [(src, new_parent), (dst, parent)] {
                    let rec = w.rec_mut(ino)?;
                    rec.inode.attr.ctime = now;
                    rec.parent = Some(dir);
                }
                return Ok(None);
            }

            let mut gone = None;
            if let Some((dst, dst_kind)) = dst {
                let dst_dir = dst_kind == FileKind::Dir;
                match (src_dir, dst_dir) {
                    (true, false) => return Err(MetaError::NotDir),
                    (false, true) => return Err(MetaError::IsDir),
                    _ => {}
                }
                if dst_dir {
                    if !w.is_empty_dir(dst)? {
                        return Err(MetaError::NotEmpty);
                    }
                    w.add_nlink(new_parent, -1)?;
                    let mut out = w.rec(dst)?.inode.clone();
                    out.attr.nlink = 0;
                    out.attr.ctime = now;
                    w.delete_inode(dst)?;
                    gone = Some(out);
                } else {
                    let keep = w.rec(dst)?.inode.attr.nlink == 1 && keep_orphan(dst);
                    let out = w.drop_link(dst, keep, now)?;
                    if out.attr.nlink == 0 {
                        gone = Some(out);
                    }
                }
            }
            w.del_entry(parent, name)?;
            w.put_entry(new_parent, new_name, src, src_kind)?;
            if src_dir {
                w.moved(from, to)?;
            } else {
                w.unindex(src)?;
                w.index_as(src, to);
            }
            if src_dir && parent != new_parent {
                w.add_nlink(parent, -1)?;
                w.add_nlink(new_parent, 1)?;
            }
            w.touch_dir(parent, now)?;
            w.touch_dir(new_parent, now)?;
            let moved = w.rec_mut(src)?;
            moved.inode.attr.ctime = now;
            moved.parent = Some(new_parent);
            Ok(gone)
        })
    }

    fn parent(&self, dir: InodeId) -> Result<InodeId> {
        read_parents!(self, |t| t.parent(dir))
    }

    fn path_of(&self, ino: InodeId) -> Result<Option<Vec<Vec<u8>>>> {
        read_parents!(self, |t| t.path_of(ino))
    }

    fn readdir(&self, dir: InodeId, after: Option<&[u8]>, limit: usize) -> Result<Vec<DirEntry>> {
        let tx = self.begin_read()?;
        let inodes = tx.open_table(INODES)?;
        let dirents = tx.open_table(DIRENTS)?;
        match inodes.get(dir.0)? {
            None => return Err(MetaError::NotFound),
            Some(v) if record_kind(dir.0, v.value())? != FileKind::Dir => {
                return Err(MetaError::NotDir)
            }
            Some(_) => {}
        }
        let mut range = prefix_range(dir.0);
        if let Some(after) = after {
            range.0 = Bound::Excluded(dkey(dir, after));
        }
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for entry in dirents.range::<&[u8]>(as_slices(&range))? {
            let (k, v) = entry?;
            let (ino, kind) = dval_decode(v.value())?;
            out.push(DirEntry {
                name: k.value()[8..].to_vec(),
                ino,
                kind,
            });
            if out.len() == limit {
                break;
            }
        }
        Ok(out)
    }

    fn set_attr(&self, ino: InodeId, changes: &SetAttr, now: Timestamp) -> Result<Inode> {
        self.update(ino, changes, &[], now)
    }

    fn update(
        &self,
        ino: InodeId,
        changes: &SetAttr,
        xattrs: &[XattrChange],
        now: Timestamp,
    ) -> Result<Inode> {
        for x in xattrs {
            check_xattr_name(&x.name)?;
        }
        self.write(|w| {
            let rec = w.rec_mut(ino)?;
            let a = &mut rec.inode.attr;
            if let Some(perm) = changes.perm {
                a.perm = perm & 0o7777;
            }
            if let Some(uid) = changes.uid {
                a.uid = uid;
            }
            if let Some(gid) = changes.gid {
                a.gid = gid;
            }
            if let Some(atime) = changes.atime {
                a.atime = atime;
            }
            if let Some(mtime) = changes.mtime {
                a.mtime = mtime;
            }
            a.ctime = now;
            let out = rec.inode.clone();
            for x in xattrs {
                let key = dkey(ino, &x.name);
                w.mutated = true;
                match &x.value {
                    Some(v) => w.xattrs.insert(key.as_slice(), v.as_slice())?,
                    None => w.xattrs.remove(key.as_slice())?,
                };
            }
            Ok(out)
        })
    }

    fn set_content(
        &self,
        ino: InodeId,
        content: Content,
        size: u64,
        mtime: Timestamp,
    ) -> Result<Inode> {
        // Inline bytes grow the store; a recipe id or nothing does not, so
        // a truncate still works on a full disk.
        let grows = matches!(content, Content::Inline(_));
        let op = |w: &mut W<'_>| {
            let rec = w.rec_mut(ino)?;
            match rec.inode.attr.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(MetaError::IsDir),
                _ => {
                    return Err(MetaError::Invalid(
                        "only a regular file's content can be set",
                    ))
                }
            }
            w.content_set(ino)?;
            let rec = w.rec_mut(ino)?;
            rec.inode.content = content;
            let a = &mut rec.inode.attr;
            a.size = size;
            a.mtime = mtime;
            a.ctime = mtime;
            Ok(rec.inode.clone())
        };
        if grows {
            self.write_growing(op)
        } else {
            self.write(op)
        }
    }

    fn get_xattr(&self, ino: InodeId, name: &[u8]) -> Result<Vec<u8>> {
        check_xattr_name(name)?;
        // The kernel asks for security.capability before every write.
        let batch = self.batch.lock();
        if let Some(tx) = &batch.tx {
            return xattr_in(&tx.open_table(INODES)?, &tx.open_table(XATTRS)?, ino, name);
        }
        drop(batch);
        let tx = self.db()?.begin_read()?;
        xattr_in(&tx.open_table(INODES)?, &tx.open_table(XATTRS)?, ino, name)
    }

    fn set_xattr(
        &self,
        ino: InodeId,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        now: Timestamp,
    ) -> Result<()> {
        check_xattr_name(name)?;
        self.write_growing(|w| {
            w.rec_mut(ino)?.inode.attr.ctime = now;
            let key = dkey(ino, name);
            let exists = w.xattrs.get(key.as_slice())?.is_some();
            match flags {
                XattrFlags::Create if exists => return Err(MetaError::Exists),
                XattrFlags::Replace if !exists => return Err(MetaError::NoXattr),
                _ => {}
            }
            w.mutated = true;
            w.xattrs.insert(key.as_slice(), value)?;
            Ok(())
        })
    }

    fn list_xattr(&self, ino: InodeId) -> Result<Vec<Vec<u8>>> {
        let tx = self.begin_read()?;
        if tx.open_table(INODES)?.get(ino.0)?.is_none() {
            return Err(MetaError::NotFound);
        }
        let xattrs = tx.open_table(XATTRS)?;
        let range = prefix_range(ino.0);
        let mut out = Vec::new();
        for entry in xattrs.range::<&[u8]>(as_slices(&range))? {
            out.push(entry?.0.value()[8..].to_vec());
        }
        Ok(out)
    }

    fn remove_xattr(&self, ino: InodeId, name: &[u8], now: Timestamp) -> Result<()> {
        check_xattr_name(name)?;
        self.write(|w| {
            w.rec_mut(ino)?.inode.attr.ctime = now;
            // A removal that found nothing changed nothing.
            if w.xattrs.remove(dkey(ino, name).as_slice())?.is_none() {
                return Err(MetaError::NoXattr);
            }
            w.mutated = true;
            Ok(())
        })
    }

    fn drop_orphan(&self, ino: InodeId) -> Result<()> {
        self.write(|w| {
            if w.orphans.get(ino.0)?.is_some() {
                w.delete_inode(ino)?;
            }
            Ok(())
        })
    }

    fn purge_orphans(&self) -> Result<u64> {
        self.write(|w| {
            let mut all = Vec::new();
            for entry in w.orphans.iter()? {
                all.push(InodeId(entry?.0.value()));
            }
            for &ino in &all {
                w.delete_inode(ino)?;
            }
            Ok(all.len() as u64)
        })
    }

    fn for_each_content(&self, f: &mut dyn FnMut(InodeId, &Content, u64)) -> Result<()> {
        let tx = self.begin_read()?;
        let inodes = tx.open_table(INODES)?;
        for entry in inodes.iter()? {
            let (k, v) = entry?;
            let bytes = v.value();
            // Decode only the records that hold a recipe.
            if holds_recipe(bytes) {
                let rec = decode(k.value(), bytes)?;
                f(rec.inode.id, &rec.inode.content, rec.inode.attr.size);
            }
        }
        Ok(())
    }

    fn counts(&self) -> Result<Counts> {
        let tx = self.begin_read()?;
        let meta = tx.open_table(META)?;
        let get = |key: &str| -> Result<u64> { Ok(meta.get(key)?.map(|v| v.value()).unwrap_or(0)) };
        Ok(Counts {
            files: get(FILES)?,
            dirs: get(DIRS)?,
        })
    }

    fn view(&self) -> Result<Box<dyn crate::MetaView>> {
        Ok(Box::new(crate::view::RedbView(self.begin_read()?)))
    }

    fn sync(&self) -> Result<()> {
        let mut batch = self.batch.lock();
        batch.ops = 0;
        if batch.tx.is_none() && !batch.unsynced {
            return Ok(());
        }
        let synced = (|| -> Result<()> {
            let mut tx = match batch.tx.take() {
                Some(tx) => tx,
                None => self.db()?.begin_write()?,
            };
            let dropped = self.unsynced.lock().dropped_logs();
            if !dropped.is_empty() {
                let mut intents = tx.open_table(INTENTS)?;
                for (ino, upto) in dropped {
                    intents.retain_in((ino, 0)..=(ino, upto), |_, _| false)?;
                }
            }
            tx.set_durability(Durability::Immediate)?;
            tx.commit()?;
            Ok(())
        })();
        batch.unsynced = synced.is_err();
        if synced.is_ok() {
            self.unsynced.lock().clear();
        }
        synced.map_err(|e| {
            self.index.lock().reset();
            self.after(e)
        })
    }

    fn append_intent(&self, ino: InodeId, record: &[u8]) -> Result<bool> {
        self.write_growing(|w| w.append_intent(ino, record))?;
        Ok(true)
    }

    fn intents(&self) -> Result<Vec<(InodeId, Vec<Vec<u8>>)>> {
        let tx = self.begin_read()?;
        let table = match tx.open_table(INTENTS) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => other?,
        };
        let unsynced = self.unsynced.lock();
        let mut out: Vec<(InodeId, Vec<Vec<u8>>)> = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            let (ino, seq) = key.value();
            if unsynced.hides(ino, seq) {
                continue;
            }
            let ino = InodeId(ino);
            match out.last_mut() {
                Some((last, records)) if *last == ino => records.push(value.value().to_vec()),
                _ => out.push((ino, vec![value.value().to_vec()])),
            }
        }
        Ok(out)
    }

    fn intents_of(&self, ino: InodeId) -> Result<Vec<Vec<u8>>> {
        let tx = self.begin_read()?;
        let table = match tx.open_table(INTENTS) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            other => other?,
        };
        let unsynced = self.unsynced.lock();
        let mut out = Vec::new();
        for entry in table.range((ino.0, 0)..=(ino.0, u64::MAX))? {
            let (key, value) = entry?;
            if !unsynced.hides(ino.0, key.value().1) {
                out.push(value.value().to_vec());
            }
        }
        Ok(out)
    }

    fn clear_intents(&self, ino: InodeId) -> Result<()> {
        self.write(|w| w.clear_intents(ino))
    }

    fn unsynced_contents(&self) -> Vec<InodeId> {
        self.unsynced.lock().files()
    }

    fn revert_content(&self, ino: InodeId) -> Result<Option<Inode>> {
        self.write(|w| w.revert_content(ino))
    }

    fn lookup_path(&self, path: &[u8]) -> Result<PathFound> {
        if path.is_empty() {
            return self.get(InodeId::ROOT).map(PathFound::walked);
        }
        if let Some(found) = self.index_hit(path)? {
            return Ok(found);
        }
        match self.write_growing(|w| w.walk_and_index(path)) {
            Err(e) if e.is_no_space() => self.walk(path),
            other => other,
        }
        .map(PathFound::walked)
    }

    fn path_indexed(&self, ino: InodeId) -> Result<bool> {
        self.write(|w| w.indexed(ino))
    }

    fn set_path_hints(&self, ino: InodeId, hints: &ContentHints) -> Result<bool> {
        self.write(|w| w.set_hints(ino, hints))
    }

    fn storage_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn changes(&self) -> Option<u64> {
        Some(self.changes.load(Ordering::Relaxed))
    }

    fn page_cache(&self) -> Option<redb::CacheStats> {
        self.db.read().as_ref().map(|db| db.cache_stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_creation_cut_short_leaves_no_damaged_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs.redb");
        // What a process killed while creating the store leaves behind.
        std::fs::write(dir.path().join("fs.redb.creating"), b"half a header").unwrap();
        let meta = RedbMeta::open(&path, 1, 2).unwrap();
        assert_eq!(meta.get(InodeId::ROOT).unwrap().attr.uid, 1);
        drop(meta);
        assert!(!dir.path().join("fs.redb.creating").exists());
        assert_eq!(
            RedbMeta::open(&path, 3, 4)
                .unwrap()
                .get(InodeId::ROOT)
                .unwrap()
                .attr
                .gid,
            2
        );
    }

    /// Debug builds of redb read every page when they open a file (to
    /// mark them), so a cold cache is had here by giving redb none.
    #[test]
    fn a_lookup_through_the_index_reads_less_than_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let file = |content| NewInode {
            kind: FileKind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            content,
            xattrs: Vec::new(),
        };
        let reads = Arc::new(AtomicU64::new(0));
        let mut b = redb::Builder::new();
        b.set_cache_size(0);
        let backend = redb::backends::FileBackend::new(
            std::fs::File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.path().join("m.redb"))
                .unwrap(),
        )
        .unwrap();
        let db = b
            .create_with_backend(Counted::new(backend, reads.clone()))
            .unwrap();
        let m = RedbMeta::with_database(db, None, 0, reads, 0, 0).unwrap();
        let now = Timestamp::now();
        let mut at = InodeId::ROOT;
        let mut path = Vec::new();
        for i in 0..6 {
            let name = format!("dir{i}");
            let mut d = file(Content::Empty);
            d.kind = FileKind::Dir;
            at = m.create(at, name.as_bytes(), d, now).unwrap().id;
            for j in 0..200 {
                let sib = format!("sibling{j}");
                m.create(at, sib.as_bytes(), file(Content::Empty), now)
                    .unwrap();
            }
            path.extend_from_slice(name.as_bytes());
            path.push(b'/');
        }
        path.extend_from_slice(b"leaf");
        let leaf = m
            .create(at, b"leaf", file(Content::Inline(b"x".to_vec())), now)
            .unwrap()
            .id;
        m.sync().unwrap();
        // The first lookup loads the moves; measure the second.
        m.lookup_path(b"dir0").unwrap();
        let before = m.storage_reads();
        assert_eq!(m.lookup_path(&path).unwrap().inode.id, leaf);
        let by_index = m.storage_reads() - before;
        let before = m.storage_reads();
        let mut inode = m.get(InodeId::ROOT).unwrap();
        for part in path.split(|&c| c == b'/') {
            inode = m.lookup(inode.id, part).unwrap();
        }
        assert_eq!(inode.id, leaf);
        let by_walk = m.storage_reads() - before;
        eprintln!("storage reads of an uncached lookup: index {by_index}, walk {by_walk}");
        assert!(by_index > 0, "reads are counted");
        assert!(by_index < by_walk, "index {by_index}, walk {by_walk}");
    }

    #[test]
    fn intent_records_last_until_the_content_is_set_or_the_file_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let m = RedbMeta::open(&dir.path().join("m.redb"), 0, 0).unwrap();
        let now = Timestamp::now();
        let a = m
            .create(InodeId::ROOT, b"a", NewInode::empty(FileKind::File), now)
            .unwrap()
            .id;
        let b = m
            .create(InodeId::ROOT, b"b", NewInode::empty(FileKind::File), now)
            .unwrap()
            .id;
        for r in [&b"one"[..], b"two"] {
            assert!(m.append_intent(a, r).unwrap());
        }
        assert!(m.append_intent(b, b"three").unwrap());
        assert_eq!(
            m.append_intent(InodeId(999), b"x").unwrap_err().to_string(),
            MetaError::NotFound.to_string()
        );
        m.sync().unwrap();
        drop(m);
        let m = RedbMeta::open(&dir.path().join("m.redb"), 0, 0).unwrap();
        assert_eq!(
            m.intents().unwrap(),
            vec![
                (a, vec![b"one".to_vec(), b"two".to_vec()]),
                (b, vec![b"three".to_vec()])
            ]
        );
        m.set_content(a, Content::Inline(b"new".to_vec()), 3, now)
            .unwrap();
        m.unlink(InodeId::ROOT, b"b", false, now).unwrap();
        assert_eq!(m.intents().unwrap(), vec![]);
    }

    #[test]
    fn a_content_set_since_the_sync_is_put_back_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        let (t1, t2) = (
            Timestamp { secs: 1, nanos: 0 },
            Timestamp { secs: 2, nanos: 0 },
        );
        let a = m
            .create(InodeId::ROOT, b"a", NewInode::empty(FileKind::File), t1)
            .unwrap()
            .id;
        m.set_content(a, Content::Inline(b"old".to_vec()), 3, t1)
            .unwrap();
        m.append_intent(a, b"logged").unwrap();
        m.sync().unwrap();
        assert!(m.unsynced_contents().is_empty());

        m.set_content(a, Content::Inline(b"newer".to_vec()), 5, t2)
            .unwrap();
        m.append_intent(a, b"after").unwrap();
        m.set_content(a, Content::Inline(b"newest".to_vec()), 6, t2)
            .unwrap();
        let perm = SetAttr {
            perm: Some(0o600),
            uid: None,
            gid: None,
            atime: None,
            mtime: None,
        };
        m.set_attr(a, &perm, t2).unwrap();
        assert_eq!(m.unsynced_contents(), vec![a]);
        assert_eq!(
            m.intents().unwrap(),
            vec![],
            "the set content holds the log"
        );

        let back = m.revert_content(a).unwrap().expect("set since the sync");
        assert_eq!(back.content, Content::Inline(b"old".to_vec()));
        assert_eq!((back.attr.size, back.attr.mtime), (3, t1));
        assert_eq!(back.attr.perm, 0o600, "only the content goes back");
        assert_eq!(m.intents().unwrap(), vec![(a, vec![b"logged".to_vec()])]);
        assert_eq!(m.intents_of(a).unwrap(), vec![b"logged".to_vec()]);
        assert!(m.revert_content(a).unwrap().is_none(), "reverted once");
        m.sync().unwrap();
        drop(m);
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        assert_eq!(m.get(a).unwrap().content, Content::Inline(b"old".to_vec()));
        assert_eq!(m.intents().unwrap(), vec![(a, vec![b"logged".to_vec()])]);

        // A content set and synced drops the log for good; a file gone
        // has nothing to put back.
        m.set_content(a, Content::Inline(b"kept".to_vec()), 4, t2)
            .unwrap();
        m.sync().unwrap();
        drop(m);
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        assert_eq!(m.intents().unwrap(), vec![]);
        m.set_content(a, Content::Empty, 0, t2).unwrap();
        m.unlink(InodeId::ROOT, b"a", false, t2).unwrap();
        assert!(m.revert_content(a).unwrap().is_none());
    }

    #[test]
    fn an_older_stores_records_get_their_checksums_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        let now = Timestamp::now();
        let a = m
            .create(InodeId::ROOT, b"a", NewInode::empty(FileKind::File), now)
            .unwrap()
            .id;
        m.set_content(a, Content::Inline(b"kept".to_vec()), 4, now)
            .unwrap();
        assert_eq!(m.lookup_path(b"a").unwrap().inode.id, a, "indexed");
        m.sync().unwrap();
        // As an older store holds them: no checksum, no mark.
        {
            let tx = m.db().unwrap().begin_write().unwrap();
            {
                let mut inodes = tx.open_table(INODES).unwrap();
                let old: Vec<(u64, Vec<u8>)> = inodes
                    .iter()
                    .unwrap()
                    .map(|e| {
                        let (k, v) = e.unwrap();
                        let mut b = v.value().to_vec();
                        b.truncate(b.len() - 8);
                        b[0] = 1;
                        (k.value(), b)
                    })
                    .collect();
                for (ino, b) in &old {
                    inodes.insert(*ino, b.as_slice()).unwrap();
                }
                tx.open_table(META).unwrap().remove(RECORDS_SUMMED).unwrap();
            }
            tx.commit().unwrap();
        }
        drop(m);
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        let tx = m.begin_read().unwrap();
        for e in tx.open_table(INODES).unwrap().iter().unwrap() {
            let (_, v) = e.unwrap();
            assert!(!crate::record::unsummed(v.value()));
        }
        assert_eq!(m.get(a).unwrap().content, Content::Inline(b"kept".to_vec()));
        assert_eq!(m.lookup_path(b"a").unwrap().inode.id, a);
        assert!(m.verify().unwrap().is_empty(), "{:?}", m.verify());
    }

    #[test]
    fn a_sync_with_nothing_new_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        m.sync().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let header = std::fs::read(&path).unwrap()[..512].to_vec();
        m.sync().unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap()[..512],
            header[..],
            "the header was rewritten"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        m.create(
            InodeId::ROOT,
            b"x",
            NewInode::empty(FileKind::File),
            Timestamp::now(),
        )
        .unwrap();
        m.sync().unwrap();
        assert_ne!(
            std::fs::read(&path).unwrap()[..512],
            header[..],
            "a change was synced"
        );
    }

    #[test]
    fn an_xattr_change_rewrites_the_path_index_entry() {
        let dir = tempfile::tempdir().unwrap();
        let m = RedbMeta::open(&dir.path().join("m.redb"), 0, 0).unwrap();
        let now = Timestamp::now();
        let new = |kind| NewInode {
            kind,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            content: Content::Empty,
            xattrs: Vec::new(),
        };
        let d = m
            .create(InodeId::ROOT, b"d", new(FileKind::Dir), now)
            .unwrap();
        let f = m.create(d.id, b"f", new(FileKind::File), now).unwrap().id;
        let carried = |m: &RedbMeta| {
            // The first lookup may walk and fill the entry; the second hits.
            m.lookup_path(b"d/f").unwrap();
            let found = m.lookup_path(b"d/f").unwrap();
            assert_eq!(found.inode.id, f);
            found.xattrs
        };
        assert_eq!(carried(&m), Some(Vec::new()));
        m.set_xattr(f, b"user.a", b"1", XattrFlags::Either, now)
            .unwrap();
        assert_eq!(carried(&m), Some(vec![(b"user.a".to_vec(), b"1".to_vec())]));
        let change = XattrChange {
            name: b"user.b".to_vec(),
            value: Some(b"2".to_vec()),
        };
        m.update(f, &SetAttr::default(), &[change], now).unwrap();
        m.remove_xattr(f, b"user.a", now).unwrap();
        assert_eq!(carried(&m), Some(vec![(b"user.b".to_vec(), b"2".to_vec())]));
        let big = vec![7u8; crate::MAX_ENTRY_XATTRS];
        m.set_xattr(f, b"user.big", &big, XattrFlags::Either, now)
            .unwrap();
        assert_eq!(carried(&m), None, "over the bound, the reader asks");
        assert_eq!(m.get_xattr(f, b"user.big").unwrap(), big);
        m.remove_xattr(f, b"user.big", now).unwrap();
        assert_eq!(carried(&m), Some(vec![(b"user.b".to_vec(), b"2".to_vec())]));
        m.sync().unwrap();
        assert_eq!(m.verify().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_lost_root_inode_is_damage_not_a_fresh_root() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs.redb");
        let meta = RedbMeta::open(&path, 0, 0).unwrap();
        let file = NewInode {
            kind: FileKind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            content: Content::Inline(b"x".to_vec()),
            xattrs: Vec::new(),
        };
        meta.create(InodeId::ROOT, b"f", file, Timestamp::now())
            .unwrap();
        meta.sync().unwrap();
        drop(meta);
        let db = Database::open(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(INODES)
            .unwrap()
            .remove(InodeId::ROOT.0)
            .unwrap();
        tx.commit().unwrap();
        drop(db);
        let Err(e) = RedbMeta::open(&path, 0, 0) else {
            panic!("a store without its root must be refused");
        };
        assert!(matches!(e, MetaError::RootMissing(1)), "{e}");
        assert!(e.is_damage());
    }
}

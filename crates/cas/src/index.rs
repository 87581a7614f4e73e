//! The persistent fingerprint index and container table, and the roots, in
//! two redb files.
//!
//! `index.redb` is derived state, rebuildable from the containers:
//! - `chunks`: chunk id -> [`ChunkLocation`] (28 bytes).
//! - `containers`: container id -> (stored bytes, raw bytes, chunk count).
//! - `container_policy`: container id -> its redundancy policy as text, for
//!   containers stored under anything but `single`. A missing row means
//!   `single`, so an index written before policies existed reads as it was,
//!   and an older binary simply ignores the table.
//! - `meta`: the container-id high-water mark (re-derived from the branch's
//!   listing when the file is new, so ids are never reused), and the
//!   *indexed mark*: every container of this client with a lower id was
//!   indexed (or forgotten by a collection, or never referenced) as of the
//!   commit that wrote it.
//!
//! **Durability.** The write path records containers without syncing the
//! file ([`Index::commit_containers`] commits with redb's
//! `Durability::None`): the containers are durable on the branch already,
//! and a file sync must not cost an index sync too. A power cut then loses
//! the index's latest commits, never the containers, so the invariant is:
//! *every container the metadata may reference is either in the durable
//! index or at or above its durable indexed mark (and below the id mark),
//! where the store's open finds it on the branch and indexes it from its
//! footer* (`Store::index_unrecorded`). The mark is written in the same
//! transaction as the rows it describes, so whichever commit survives, its
//! mark matches its rows. Every other commit (id reservations, a
//! collection's forgetting, damage records, other clients' containers) is
//! durable, and a durable commit makes every earlier one durable; so do
//! id reservations, every 256 containers, which bounds what a crash can
//! leave to find; and a store closed cleanly leaves nothing to find.
//! - `other_copies`: (chunk id, container id) -> [`ChunkLocation`] of
//!   each stored copy of an indexed chunk that its `chunks` entry does not
//!   name: clients of one file system may each store a chunk (at once, or
//!   before one knew of the other's container), and a rewrite may store
//!   it again. When a collection forgets the container an entry names,
//!   the entry moves to another copy; without this a chunk that lives on
//!   elsewhere would become unknown for good, since a catch-up skips
//!   containers the index knows.
//! - `damaged_chunks`: (container id, chunk id) of each stored copy of a
//!   chunk that failed verification. Such a copy is never deduplicated
//!   against: a writer stores the chunk again and the index entry moves to
//!   the new copy. Kept in RAM as well, as every dedup hit asks.
//! - `damaged_containers`: container id -> why, for containers whose
//!   footer or trailer is damaged (their chunks were recovered from their
//!   region records). Both tables tell garbage collection which containers
//!   to rewrite; a row goes when its container is forgotten.
//!
//! `roots.redb` holds `roots`: label -> chunk id, the entry points users
//! named. It is kept apart so that losing or rebuilding the index never
//! touches it.
//!
//! Both files' reads are counted ([`Counted`], [`Index::storage_reads`]),
//! so a benchmark sees every storage read an operation causes.

use parking_lot::RwLock;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use counted::Counted;

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition,
};

use crate::compact::CompactIndex;
use crate::container::{ChunkLocation, Sealed};
use crate::id::{ChunkId, ContainerId, ShortFp};
use crate::le::{u32_at, u64_at};
use crate::protection::needs_restore;
use crate::store::{INDEX_FILE, ROOTS_FILE};
use crate::{CasError, Result};
use redundancy::Policy;

const CHUNKS: TableDefinition<[u8; 32], [u8; 28]> = TableDefinition::new("chunks");
const CONTAINERS: TableDefinition<u64, [u8; 20]> = TableDefinition::new("containers");
const CONTAINER_POLICY: TableDefinition<u64, &str> = TableDefinition::new("container_policy");
const ROOTS: TableDefinition<&str, [u8; 32]> = TableDefinition::new("roots");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const DAMAGED_CHUNKS: TableDefinition<(u64, [u8; 32]), ()> = TableDefinition::new("damaged_chunks");
const OTHER_COPIES: TableDefinition<([u8; 32], u64), [u8; 28]> =
    TableDefinition::new("other_copies");
const DAMAGED_CONTAINERS: TableDefinition<u64, &str> = TableDefinition::new("damaged_containers");
const CONTAINER_HWM: &str = "container_hwm";
const INDEXED_MARK: &str = "indexed_below";

/// Per-container accounting kept beside the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    pub stored_bytes: u64,
    pub raw_bytes: u64,
    pub chunks: u32,
}

/// Why reading a container row cannot fail.
const ROW: &str = "a 20-byte container row";

impl ContainerInfo {
    fn encode(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.stored_bytes.to_le_bytes());
        b[8..16].copy_from_slice(&self.raw_bytes.to_le_bytes());
        b[16..].copy_from_slice(&self.chunks.to_le_bytes());
        b
    }
    fn decode(b: &[u8; 20]) -> Self {
        ContainerInfo {
            stored_bytes: u64_at(b, 0).expect(ROW),
            raw_bytes: u64_at(b, 8).expect(ROW),
            chunks: u32_at(b, 16).expect(ROW),
        }
    }
}

/// What [`Index::compact`] did; sizes of `index.redb` in bytes, unknown
/// for an index on storage backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    pub before: Option<u64>,
    pub after: Option<u64>,
    pub done: bool,
}

pub struct Index {
    /// Behind a lock only so that [`Index::compact`] can have it to itself;
    /// everything else takes the read side for the moment it begins a
    /// transaction (a redb transaction does not borrow its database).
    db: RwLock<Database>,
    roots: Database,
    /// `index.redb`, when the index lives in a file: its size is what a
    /// compaction reports.
    file: Option<PathBuf>,
    compact: RwLock<CompactIndex>,
    /// The `damaged_chunks` table, for the write path's dedup lookups.
    damaged: RwLock<HashSet<(ContainerId, ChunkId)>>,
    /// Reads of `index.redb` and `roots.redb` (see [`Index::storage_reads`]).
    reads: Arc<AtomicU64>,
    /// The sum of the `containers` table's stored bytes, kept with every
    /// change to the table, for `statfs` (called often; a sum would scan
    /// the table). Signed: two commits' changes may land in either order.
    stored: AtomicI64,
}

/// The default of redb's page caches for `index.redb` and `roots.redb`
/// together (`memory.index_cache`, half each). redb's own default is 1 GiB
/// per database. The compact index already answers "is it new?" from RAM,
/// so the B-tree needs only its upper levels here; leaves come from the OS
/// page cache. 64 MiB per database doubled a gc's peak RSS for no
/// measurable speed.
pub const DEFAULT_CACHE: usize = 32 << 20;

fn builder(cache_bytes: usize) -> redb::Builder {
    let mut b = redb::Builder::new();
    b.set_cache_size(cache_bytes);
    b
}

fn open_db(path: &Path, reads: &Arc<AtomicU64>, cache_bytes: usize) -> Result<Database> {
    if !path.exists() {
        create_whole(path)?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| CasError::IndexOpen {
            path: path.to_path_buf(),
            source: redb::Error::Io(e),
        })?;
    let opened = redb::backends::FileBackend::new(file)
        .and_then(|b| builder(cache_bytes).create_with_backend(Counted::new(b, reads.clone())));
    match opened {
        Ok(db) => Ok(db),
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(CasError::Busy(path.to_path_buf())),
        Err(e) => Err(CasError::IndexOpen {
            path: path.to_path_buf(),
            source: e.into(),
        }),
    }
}

/// A database over a storage backend (created if the backend is empty);
/// `name` stands for it in messages.
fn open_backend(
    backend: impl StorageBackend,
    name: &str,
    reads: &Arc<AtomicU64>,
) -> Result<Database> {
    builder(DEFAULT_CACHE / 2)
        .create_with_backend(Counted::new(backend, reads.clone()))
        .map_err(|e| CasError::IndexOpen {
            path: name.into(),
            source: e.into(),
        })
}

/// Creates an empty database under a temporary name and renames it into
/// place, so a process killed (or a disk filling up) while creating it
/// leaves no half-written file that would later read as damage.
fn create_whole(path: &Path) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".creating");
    let tmp = std::path::PathBuf::from(tmp);
    let failed = |source: redb::DatabaseError| CasError::IndexOpen {
        path: path.to_path_buf(),
        source: source.into(),
    };
    let io = |e: std::io::Error| failed(redb::DatabaseError::Storage(e.into()));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    drop(Database::create(&tmp).map_err(failed)?);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

macro_rules! redb_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for CasError {
            fn from(e: $t) -> Self {
                CasError::Index(redb::Error::from(e))
            }
        }
    )*};
}
redb_errors!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl Index {
    /// Opens (creating if missing) the index and the roots, with redb page
    /// caches of `cache_bytes` together.
    pub fn open(index_path: &Path, roots_path: &Path, cache_bytes: usize) -> Result<Self> {
        let reads = Arc::new(AtomicU64::new(0));
        let mut index = Self::with_databases(
            open_db(index_path, &reads, cache_bytes / 2)?,
            open_db(roots_path, &reads, cache_bytes / 2)?,
            reads,
        )?;
        index.file = Some(index_path.to_path_buf());
        Ok(index)
    }

    /// The index and roots over storage backends instead of files (a test
    /// that simulates power loss gives it its own). The bytes are the same
    /// as in the files.
    pub fn on_backends(index: impl StorageBackend, roots: impl StorageBackend) -> Result<Self> {
        let reads = Arc::new(AtomicU64::new(0));
        Self::with_databases(
            open_backend(index, INDEX_FILE, &reads)?,
            open_backend(roots, ROOTS_FILE, &reads)?,
            reads,
        )
    }

    /// Reads both files' backends have served since they were opened: an
    /// exact count (see [`Counted`]).
    pub fn storage_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// What the page caches of `index.redb` and `roots.redb` did since
    /// they were opened (redb's counts, `/metrics`).
    pub fn page_caches(&self) -> [redb::CacheStats; 2] {
        [self.db.read().cache_stats(), self.roots.cache_stats()]
    }

    fn with_databases(db: Database, roots: Database, reads: Arc<AtomicU64>) -> Result<Self> {
        let tx = db.begin_write()?;
        {
            tx.open_table(CHUNKS)?;
            tx.open_table(CONTAINERS)?;
            tx.open_table(CONTAINER_POLICY)?;
            let mut meta = tx.open_table(META)?;
            // An index written before the mark existed synced every
            // commit: all it handed out is indexed.
            let hwm = meta.get(CONTAINER_HWM)?.map(|v| v.value());
            let marked = meta.get(INDEXED_MARK)?.is_some();
            if let (Some(hwm), false) = (hwm, marked) {
                meta.insert(INDEXED_MARK, hwm)?;
            }
            drop(meta);
            tx.open_table(DAMAGED_CHUNKS)?;
            tx.open_table(DAMAGED_CONTAINERS)?;
            tx.open_table(OTHER_COPIES)?;
        }
        tx.commit()?;
        let tx = roots.begin_write()?;
        tx.open_table(ROOTS)?;
        tx.commit()?;
        let index = Index {
            db: RwLock::new(db),
            roots,
            file: None,
            compact: RwLock::new(CompactIndex::default()),
            damaged: RwLock::new(HashSet::new()),
            reads,
            stored: AtomicI64::new(0),
        };
        index.reload_compact()?;
        index.reload_damaged()?;
        index.reload_stored()?;
        Ok(index)
    }

    /// Sums the container table's stored bytes afresh; like
    /// [`Index::reload_compact`], only while no container is being indexed.
    fn reload_stored(&self) -> Result<()> {
        let sum: u64 = self.containers()?.iter().map(|(_, i)| i.stored_bytes).sum();
        self.stored.store(sum as i64, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes of the containers the index knows, as of its last commit:
    /// what `Index::containers` would sum, without reading the table.
    pub fn stored_bytes(&self) -> u64 {
        self.stored.load(Ordering::Relaxed).max(0) as u64
    }

    /// Rebuilds the compact index from the chunk table. Only while no
    /// container is being indexed (at open, and by the offline index
    /// rebuild): a commit racing the rebuild's read would drop out of it.
    pub(crate) fn reload_compact(&self) -> Result<()> {
        let mut compact = CompactIndex::default();
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(CHUNKS)?;
        for entry in table.iter()? {
            let (k, _) = entry?;
            compact.insert(ShortFp::of(&ChunkId::from_bytes(k.value())));
        }
        *self.compact.write() = compact;
        Ok(())
    }

    /// The location of a stored chunk, asking the compact index first so that
    /// a new chunk costs no disk access.
    pub fn lookup(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        if !self.compact.read().may_contain(ShortFp::of(id)) {
            return Ok(None);
        }
        self.lookup_persistent(id)
    }

    /// [`Index::lookup`] for a writer about to deduplicate: a copy known to
    /// be damaged counts as absent, so the chunk is stored again.
    pub fn lookup_sound(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        let found = self.lookup(id)?;
        let damaged = self.damaged.read();
        Ok(found.filter(|loc| !damaged.contains(&(loc.container, *id))))
    }

    /// [`Index::lookup`] of many chunks, in one read transaction.
    pub fn lookup_many(&self, ids: &[ChunkId]) -> Result<Vec<Option<ChunkLocation>>> {
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(CHUNKS)?;
        let compact = self.compact.read();
        ids.iter()
            .map(|id| {
                if !compact.may_contain(ShortFp::of(id)) {
                    return Ok(None);
                }
                Ok(table
                    .get(id.as_bytes())?
                    .map(|v| ChunkLocation::decode(&v.value())))
            })
            .collect()
    }

    fn lookup_persistent(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(CHUNKS)?;
        Ok(table
            .get(id.as_bytes())?
            .map(|v| ChunkLocation::decode(&v.value())))
    }

    /// Records durable containers: their chunks (a chunk already indexed keeps
    /// its first location) and their accounting, and the indexed mark
    /// `indexed_below`, in one transaction that is not synced (see the
    /// module doc: a power cut may lose it, and the store's open finds
    /// the containers again). A copy in a container of `doomed` (another
    /// client's collection is deleting it) is replaced like a damaged one.
    pub fn commit_containers(
        &self,
        sealed: &[&Sealed],
        indexed_below: u64,
        doomed: &HashSet<ContainerId>,
    ) -> Result<()> {
        let mut tx = self.db.read().begin_write()?;
        tx.set_durability(Durability::None)
            .expect("no persistent savepoints are used");
        tx.open_table(META)?.insert(INDEXED_MARK, indexed_below)?;
        let mut added = Vec::new();
        let mut grown = 0i64;
        let damaged = self.damaged.read();
        {
            let mut chunks = tx.open_table(CHUNKS)?;
            let mut copies = tx.open_table(OTHER_COPIES)?;
            let mut containers = tx.open_table(CONTAINERS)?;
            let mut policies = tx.open_table(CONTAINER_POLICY)?;
            for s in sealed {
                // Recorded first: a later container of this batch compares
                // its strength against this one's.
                if s.protection.policy != Policy::Single {
                    let text = s.protection.policy.to_string();
                    policies.insert(s.id.0, text.as_str())?;
                }
                for (id, loc) in &s.entries {
                    let existing = chunks
                        .get(id.as_bytes())?
                        .map(|v| ChunkLocation::decode(&v.value()));
                    let Some(old) = existing else {
                        chunks.insert(id.as_bytes(), loc.encode())?;
                        added.push(ShortFp::of(id));
                        continue;
                    };
                    let c = old.container;
                    // A copy known bad, or another client's collection is
                    // deleting, is no copy. One this client's collection
                    // is relocating is, until the collection forgets its
                    // container (if it fails first, the container stays).
                    let old_is_gone = damaged.contains(&(c, *id)) || doomed.contains(&c);
                    if s.relocated
                        || old_is_gone
                        || needs_restore(&policy_in(&policies, c)?, &s.protection.policy)
                    {
                        chunks.insert(id.as_bytes(), loc.encode())?;
                        added.push(ShortFp::of(id));
                        if !old_is_gone {
                            copies.insert((*id.as_bytes(), c.0), old.encode())?;
                        }
                    } else if c != s.id {
                        copies.insert((*id.as_bytes(), s.id.0), loc.encode())?;
                    }
                }
                let info = ContainerInfo {
                    stored_bytes: s.bytes.len() as u64,
                    raw_bytes: s.raw_bytes,
                    chunks: s.entries.len() as u32,
                };
                let replaced = containers.insert(s.id.0, info.encode())?;
                grown += info.stored_bytes as i64 - stored_in(replaced);
            }
        }
        drop(damaged);
        tx.commit()?;
        self.stored.fetch_add(grown, Ordering::Relaxed);
        let mut compact = self.compact.write();
        for fp in added {
            compact.insert(fp);
        }
        Ok(())
    }

    /// Records containers another client made (see [`crate::shared`]) and
    /// the chunks found in them, durably, in one transaction: a container
    /// row already there and a chunk indexed already are kept as they are.
    pub fn add_foreign(
        &self,
        rows: &[(ContainerId, ContainerInfo, Policy)],
        entries: &[(ChunkId, ChunkLocation)],
    ) -> Result<()> {
        self.add_found(rows, entries, None)
    }

    /// [`Index::add_foreign`] for this client's own containers that a
    /// crash left unindexed, found at open; raises the indexed mark to
    /// `indexed_below` in the same durable transaction.
    pub fn add_recovered(
        &self,
        rows: &[(ContainerId, ContainerInfo, Policy)],
        entries: &[(ChunkId, ChunkLocation)],
        indexed_below: u64,
    ) -> Result<()> {
        self.add_found(rows, entries, Some(indexed_below))
    }

    /// Records containers found on the branches and their chunks, durably
    /// ([`Index::add_foreign`]); and the indexed mark, if given.
    pub(crate) fn add_found(
        &self,
        rows: &[(ContainerId, ContainerInfo, Policy)],
        entries: &[(ChunkId, ChunkLocation)],
        indexed_below: Option<u64>,
    ) -> Result<()> {
        let mut tx = self.db.read().begin_write()?;
        tx.set_durability(Durability::Immediate)
            .expect("no persistent savepoints are used");
        if let Some(mark) = indexed_below {
            tx.open_table(META)?.insert(INDEXED_MARK, mark)?;
        }
        let mut added = Vec::new();
        let mut grown = 0i64;
        {
            let mut containers = tx.open_table(CONTAINERS)?;
            let mut policies = tx.open_table(CONTAINER_POLICY)?;
            for (id, info, policy) in rows {
                if containers.get(id.0)?.is_some() {
                    continue;
                }
                containers.insert(id.0, info.encode())?;
                grown += info.stored_bytes as i64;
                if *policy != Policy::Single {
                    policies.insert(id.0, policy.to_string().as_str())?;
                }
            }
            let mut chunks = tx.open_table(CHUNKS)?;
            let mut copies = tx.open_table(OTHER_COPIES)?;
            for (id, loc) in entries {
                let named = chunks
                    .get(id.as_bytes())?
                    .map(|v| ChunkLocation::decode(&v.value()).container);
                match named {
                    None => {
                        chunks.insert(id.as_bytes(), loc.encode())?;
                        added.push(ShortFp::of(id));
                    }
                    Some(c) if c != loc.container => {
                        copies.insert((*id.as_bytes(), loc.container.0), loc.encode())?;
                    }
                    Some(_) => {}
                }
            }
        }
        tx.commit()?;
        self.stored.fetch_add(grown, Ordering::Relaxed);
        let mut compact = self.compact.write();
        for fp in added {
            compact.insert(fp);
        }
        Ok(())
    }

    /// Where container `container` holds a copy of `id` that the index
    /// records beside its entry (`other_copies`), if it does.
    pub fn copy_in(&self, id: &ChunkId, container: ContainerId) -> Result<Option<ChunkLocation>> {
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(OTHER_COPIES)?;
        Ok(table
            .get((*id.as_bytes(), container.0))?
            .map(|v| ChunkLocation::decode(&v.value())))
    }

    /// Whether the index has a row for container `id`.
    pub fn has_container(&self, id: ContainerId) -> Result<bool> {
        let tx = self.db.read().begin_read()?;
        Ok(tx.open_table(CONTAINERS)?.get(id.0)?.is_some())
    }

    /// Replaces the chunk and container tables with `entries` and `infos` in
    /// one transaction: a crash midway leaves the old index in place.
    /// Of a chunk stored twice, the copy under the stronger policy wins,
    /// then the one listed first.
    pub fn replace_all(
        &self,
        entries: impl IntoIterator<Item = (ChunkId, ChunkLocation)>,
        infos: &[(ContainerId, ContainerInfo, Policy)],
    ) -> Result<()> {
        let tx = self.db.read().begin_write()?;
        tx.delete_table(CHUNKS)?;
        tx.delete_table(OTHER_COPIES)?;
        tx.delete_table(CONTAINERS)?;
        tx.delete_table(CONTAINER_POLICY)?;
        {
            let mut containers = tx.open_table(CONTAINERS)?;
            let mut policies = tx.open_table(CONTAINER_POLICY)?;
            for (id, info, policy) in infos {
                containers.insert(id.0, info.encode())?;
                if *policy != Policy::Single {
                    policies.insert(id.0, policy.to_string().as_str())?;
                }
            }
            let mut chunks = tx.open_table(CHUNKS)?;
            let mut copies = tx.open_table(OTHER_COPIES)?;
            for (id, loc) in entries {
                let existing = chunks
                    .get(id.as_bytes())?
                    .map(|v| ChunkLocation::decode(&v.value()));
                let Some(old) = existing else {
                    chunks.insert(id.as_bytes(), loc.encode())?;
                    continue;
                };
                if old.container == loc.container {
                    continue;
                }
                let (kept, other) = if needs_restore(
                    &policy_in(&policies, old.container)?,
                    &policy_in(&policies, loc.container)?,
                ) {
                    (loc, old)
                } else {
                    (old, loc)
                };
                chunks.insert(id.as_bytes(), kept.encode())?;
                copies.insert((*id.as_bytes(), other.container.0), other.encode())?;
            }
            // A copy indexed again verified just now; a row of a container
            // left out has nothing more to say.
            let kept: HashSet<u64> = infos.iter().map(|(c, _, _)| c.0).collect();
            tx.open_table(DAMAGED_CHUNKS)?.retain(|(c, id), _| {
                kept.contains(&c)
                    && !matches!(chunks.get(&id), Ok(Some(v)) if ChunkLocation::decode(&v.value()).container.0 == c)
            })?;
            tx.open_table(DAMAGED_CONTAINERS)?
                .retain(|c, _| kept.contains(&c))?;
        }
        tx.commit()?;
        self.reload_compact()?;
        self.reload_stored()?;
        self.reload_damaged()
    }

    fn reload_damaged(&self) -> Result<()> {
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(DAMAGED_CHUNKS)?;
        let mut damaged = HashSet::new();
        for entry in table.iter()? {
            let (k, _) = entry?;
            let (c, id) = k.value();
            damaged.insert((ContainerId(c), ChunkId::from_bytes(id)));
        }
        *self.damaged.write() = damaged;
        Ok(())
    }

    /// Records that the copies of chunks at these locations failed
    /// verification, durably. Returns how many were not known before.
    pub fn mark_damaged_chunks(&self, copies: &[(ChunkId, ContainerId)]) -> Result<usize> {
        let fresh: Vec<(ChunkId, ContainerId)> = {
            let damaged = self.damaged.read();
            copies
                .iter()
                .filter(|(id, c)| !damaged.contains(&(*c, *id)))
                .copied()
                .collect()
        };
        if fresh.is_empty() {
            return Ok(0);
        }
        let tx = self.db.read().begin_write()?;
        {
            let mut table = tx.open_table(DAMAGED_CHUNKS)?;
            for (id, c) in &fresh {
                table.insert((c.0, *id.as_bytes()), ())?;
            }
        }
        tx.commit()?;
        let mut damaged = self.damaged.write();
        for (id, c) in &fresh {
            damaged.insert((*c, *id));
        }
        Ok(fresh.len())
    }

    /// Whether any copy in `container` is recorded as damaged.
    pub fn damaged_in(&self, container: ContainerId) -> bool {
        self.damaged.read().iter().any(|(c, _)| *c == container)
    }

    /// Records that a container's footer or trailer is damaged, and why.
    /// Returns whether it was not known before.
    pub fn mark_damaged_container(&self, container: ContainerId, why: &str) -> Result<bool> {
        let tx = self.db.read().begin_write()?;
        let fresh = tx
            .open_table(DAMAGED_CONTAINERS)?
            .insert(container.0, why)?
            .is_none();
        tx.commit()?;
        Ok(fresh)
    }

    /// Every container known to hold a damaged chunk or to have a damaged
    /// footer, in id order.
    pub fn damaged_containers(&self) -> Result<Vec<ContainerId>> {
        let tx = self.db.read().begin_read()?;
        let mut out: Vec<ContainerId> = Vec::new();
        for entry in tx.open_table(DAMAGED_CONTAINERS)?.iter()? {
            out.push(ContainerId(entry?.0.value()));
        }
        out.extend(self.damaged.read().iter().map(|(c, _)| *c));
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Reserves container ids below a new high-water mark, durably, so an id
    /// is never handed out twice even across crashes. Returns the first id.
    /// `floor` gives the first unused id when the index has no mark yet (a
    /// new or lost index over existing containers).
    pub fn reserve_container_ids(
        &self,
        count: u64,
        floor: impl FnOnce() -> Result<u64>,
    ) -> Result<u64> {
        let tx = self.db.read().begin_write()?;
        let first;
        {
            let mut meta = tx.open_table(META)?;
            let mark = meta.get(CONTAINER_HWM)?.map(|v| v.value());
            first = match mark {
                Some(m) => m,
                None => floor()?,
            };
            meta.insert(CONTAINER_HWM, first + count)?;
            let marked = meta.get(INDEXED_MARK)?.is_some();
            if !marked {
                meta.insert(INDEXED_MARK, first)?;
            }
        }
        tx.commit()?;
        Ok(first)
    }

    /// The container-id high-water mark: every container this index ever
    /// handed out has a lower id. `None` for an index that never allocated
    /// one (new, or lost and recreated empty).
    pub fn container_mark(&self) -> Result<Option<u64>> {
        let tx = self.db.read().begin_read()?;
        let meta = tx.open_table(META)?;
        let mark = meta.get(CONTAINER_HWM)?.map(|v| v.value());
        Ok(mark)
    }

    /// The indexed mark (see the module doc): every container of this
    /// client below it was indexed as of the commit that wrote it. `None`
    /// for an index that never allocated a container id.
    pub fn indexed_mark(&self) -> Result<Option<u64>> {
        let tx = self.db.read().begin_read()?;
        let mark = tx.open_table(META)?.get(INDEXED_MARK)?.map(|v| v.value());
        Ok(mark)
    }

    /// Sets the indexed mark durably (a store closing with nothing left
    /// unindexed sets it to the id mark, so that its next open has
    /// nothing to look for); makes every earlier commit durable too.
    pub fn set_indexed_mark(&self, indexed_below: u64) -> Result<()> {
        let tx = self.db.read().begin_write()?;
        tx.open_table(META)?.insert(INDEXED_MARK, indexed_below)?;
        tx.commit()?;
        Ok(())
    }

    /// Forgets `containers`: removes every index entry that points into
    /// one of them and their accounting rows, durably, in one transaction.
    /// One ordered pass over the chunk table rewrites each of its pages at
    /// most once, where removing ids one by one would touch pages at random.
    /// An entry whose chunk has another copy (`other_copies`) moves to it.
    /// Returns how many entries went.
    pub fn forget_containers(&self, containers: &HashSet<ContainerId>) -> Result<u64> {
        let mut tx = self.db.read().begin_write()?;
        tx.set_durability(Durability::Immediate)
            .expect("no persistent savepoints are used");
        let mut unplaced = Vec::new();
        let mut moved = Vec::new();
        let mut shrunk = 0i64;
        {
            let mut chunks = tx.open_table(CHUNKS)?;
            chunks.retain(|id, v| {
                let gone = containers.contains(&ChunkLocation::decode(&v).container);
                if gone {
                    unplaced.push(id);
                }
                !gone
            })?;
            let mut copies = tx.open_table(OTHER_COPIES)?;
            copies.retain(|(_, c), _| !containers.contains(&ContainerId(c)))?;
            // An entry whose chunk is stored elsewhere too moves there.
            let damaged = self.damaged.read();
            for id in &unplaced {
                for row in copies.range((*id, 0)..=(*id, u64::MAX))? {
                    let (k, v) = row?;
                    let c = ContainerId(k.value().1);
                    if !damaged.contains(&(c, ChunkId::from_bytes(*id))) {
                        moved.push((*id, c, v.value()));
                        break;
                    }
                }
            }
            drop(damaged);
            for (id, c, loc) in &moved {
                chunks.insert(id, loc)?;
                copies.remove((*id, c.0))?;
            }
            let mut table = tx.open_table(CONTAINERS)?;
            let mut policies = tx.open_table(CONTAINER_POLICY)?;
            let mut damaged = tx.open_table(DAMAGED_CONTAINERS)?;
            for container in containers {
                shrunk += stored_in(table.remove(container.0)?);
                policies.remove(container.0)?;
                damaged.remove(container.0)?;
            }
            tx.open_table(DAMAGED_CHUNKS)?
                .retain(|(c, _), _| !containers.contains(&ContainerId(c)))?;
        }
        tx.commit()?;
        self.stored.fetch_sub(shrunk, Ordering::Relaxed);
        let removed = (unplaced.len() - moved.len()) as u64;
        self.compact.write().forget(removed);
        self.damaged
            .write()
            .retain(|(c, _)| !containers.contains(c));
        Ok(removed)
    }

    /// Every index entry, in id order.
    pub fn for_each_chunk(&self, mut f: impl FnMut(ChunkId, ChunkLocation)) -> Result<()> {
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(CHUNKS)?;
        for entry in table.iter()? {
            let (k, v) = entry?;
            f(
                ChunkId::from_bytes(k.value()),
                ChunkLocation::decode(&v.value()),
            );
        }
        Ok(())
    }

    pub fn containers(&self) -> Result<Vec<(ContainerId, ContainerInfo)>> {
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(CONTAINERS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((ContainerId(k.value()), ContainerInfo::decode(&v.value())));
        }
        Ok(out)
    }

    /// The policy container `id` was stored under (`single` when it has
    /// no row).
    pub fn container_policy(&self, id: ContainerId) -> Result<Policy> {
        let tx = self.db.read().begin_read()?;
        policy_in(&tx.open_table(CONTAINER_POLICY)?, id)
    }

    pub fn chunk_count(&self) -> Result<u64> {
        let tx = self.db.read().begin_read()?;
        Ok(redb::ReadableTableMetadata::len(&tx.open_table(CHUNKS)?)?)
    }

    pub fn compact_ram_bytes(&self) -> (usize, f64) {
        let c = self.compact.read();
        (c.ram_bytes(), c.bytes_per_chunk())
    }

    /// Gives the pages of deleted rows back to the file system: redb reuses
    /// them but never shrinks its file, so after a collection dropped most
    /// chunks the file would stay as large as it ever was. Needs the index
    /// to itself: when a transaction begun elsewhere is still open the file
    /// is left as it was ([`Compaction::done`] false), which is not an
    /// error. `roots.redb` is left alone (a few rows).
    pub fn compact(&self) -> Result<Compaction> {
        let size = || {
            self.file
                .as_ref()
                .and_then(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
        };
        let before = size();
        let mut db = self.db.write();
        let done = match db.compact() {
            Ok(_) => true,
            Err(redb::CompactionError::Storage(e)) => return Err(e.into()),
            Err(e) => {
                tracing::info!("index.redb not compacted: {e}");
                false
            }
        };
        drop(db);
        Ok(Compaction {
            before,
            after: size(),
            done,
        })
    }

    pub fn put_root(&self, label: &str, id: &ChunkId) -> Result<()> {
        let tx = self.roots.begin_write()?;
        tx.open_table(ROOTS)?.insert(label, id.as_bytes())?;
        tx.commit()?;
        Ok(())
    }

    pub fn get_root(&self, label: &str) -> Result<Option<ChunkId>> {
        let tx = self.roots.begin_read()?;
        let table = tx.open_table(ROOTS)?;
        Ok(table.get(label)?.map(|v| ChunkId::from_bytes(v.value())))
    }

    pub fn delete_root(&self, label: &str) -> Result<bool> {
        let tx = self.roots.begin_write()?;
        let existed = tx.open_table(ROOTS)?.remove(label)?.is_some();
        tx.commit()?;
        Ok(existed)
    }

    pub fn list_roots(&self) -> Result<Vec<(String, ChunkId)>> {
        let tx = self.roots.begin_read()?;
        let table = tx.open_table(ROOTS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((k.value().to_string(), ChunkId::from_bytes(v.value())));
        }
        Ok(out)
    }
}

/// The stored bytes of a container row a table write returned, if any.
fn stored_in(row: Option<redb::AccessGuard<'_, [u8; 20]>>) -> i64 {
    row.map_or(0, |v| ContainerInfo::decode(&v.value()).stored_bytes as i64)
}

fn policy_in(table: &impl ReadableTable<u64, &'static str>, id: ContainerId) -> Result<Policy> {
    match table.get(id.0)? {
        None => Ok(Policy::Single),
        Some(text) => {
            text.value()
                .parse()
                .map_err(|e: redundancy::PolicyError| CasError::BadPolicyRow {
                    container: id,
                    reason: e.to_string(),
                })
        }
    }
}

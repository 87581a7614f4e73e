//! The file system: POSIX files and directories over the chunk store.
//!
//! **Owns:** the namespace operations (`namespace`: names, attributes,
//! links, listings, xattrs, a directory's parent), open-file state (`open`:
//! extent lists, dirty bytes, one write stream per file), the write path
//! (write-behind through content-defined chunking, re-chunking only the
//! region around a change, admission control on dirty bytes), the read path
//! (an extent list per open file as its range map, a DRAM chunk cache,
//! sequential read-ahead in the background, the persistent cache tier of
//! `crates/cache` below DRAM, and what enters the caches by access
//! pattern: a random reader's neighbours and tier admissions, never a
//! sequential reader's) and the committer that makes
//! data and then metadata durable in batches (`commit`, whose header states
//! the lock order), giving the path-index entries of the small files it
//! made durable their chunks' locations (`hints`, read back by
//! [`Fs::read_small`]). Its errors and their errno values are in `error`.
//! Its figures for `/metrics` (commit latency, admission waits, store and
//! cache counts, and every branch read and write, heard from the
//! redundancy layer's watcher set when the file system opens) are
//! registered by [`Fs::register_metrics`] (`metrics`).
//! It also picks each file's redundancy protection when its write stream
//! opens (`protection`, [`rules`]: the `user.cairn.policy` xattr, inherited
//! by new children, else `cairn.toml`'s rules matched against the path the
//! metadata engine's parent pointers give) and re-stores a file's data when
//! its policy is made stronger. It picks each file's chunking mode when its
//! state loads (`chunkmode`: content-defined, or fixed blocks from the
//! `user.cairn.chunking` xattr, inherited like the policy, or a chunking
//! rule) and switches a large file written at random to fixed blocks, as
//! the access-pattern detector (`pattern`) sees it, recording the switch
//! in the xattr. It applies the POSIX rules the kernel
//! leaves to the file system (`posix`, [`acl`]): the umask or an inherited
//! default ACL on create, a set-group-id directory's group (and bit, on a
//! new directory), the set-id bits a chown, a write or a truncate clears,
//! `fallocate`'s modes and sizes (a punched or zeroed range becomes holes
//! in the extent list, `punch`), `copy_file_range` (a whole file onto an
//! empty one as a recipe clone, onto the end of one held in chunks as a
//! splice of recipes, `reflink`), and access ACLs kept in step
//! with the mode. It writes versions and snapshots of the namespace ([`history`]),
//! restores from them inside the namespace or writes them out to a host
//! directory (`restore --out`),
//! and drops the versions its retention rule no longer keeps
//! ([`retention`], on a clock tests can set), and reports what holds the
//! store's space ([`space`]).
//!
//! **Never:** opens a container or touches a branch (that is `cas`); speaks
//! FUSE (that is the `fuse` crate); checks permissions (the kernel does, with
//! `default_permissions` and the ACLs `fs` keeps).
//!
//! **Invariants:**
//! - Data is durable before metadata that points at it: every commit flushes
//!   the write streams that hold a file's new chunks before it syncs the
//!   metadata engine, and nothing else syncs the metadata engine. A record
//!   that reaches a container waiting for space is put back to the file's
//!   last durable content before the sync (`waiting`).
//! - `fsync` returns only when the file's data and the metadata that reaches
//!   it are durable.
//! - With a metadata engine shared by several clients
//!   ([`FsSettings::close_to_open`]), a file's content is recorded only
//!   after its chunks are durable: the engine makes each record visible
//!   (and durable) at once, so no client ever finds a recipe whose chunks
//!   are not on the branches.
//! - An inode's access ACL, if kept, agrees with its mode (owner, mask or
//!   group, other); both change in one metadata operation. An ACL the mode
//!   says all of is not kept.
//! - A write or truncate by anyone but root clears the file's set-id bits
//!   under the file's lock, before any of its bytes are taken: no caller
//!   reads the mode first.
//! - A rule by path sees the path the metadata engine gives for the file
//!   now, whichever names this mount has looked up: the names `fs` keeps
//!   are hints, each checked against the engine before it is used.
//! - An mtime set explicitly is not overwritten by content written before
//!   it (it is recorded first).
//! - A fixed-mode file's new chunks end on absolute multiples of its block
//!   size (or at the edge of an older extent), so an aligned overwrite
//!   re-stores exactly the blocks it covers; a mode change never makes
//!   stored extents unreadable.
//! - Dirty bytes are bounded: a writer past its file's limit hands them to
//!   an applier thread once the file's previous apply is done (they count
//!   as dirty until stored); a writer past the global limit writes its own
//!   dirty bytes behind, and waits for them, before it continues.
//! - The DRAM cache's bytes, with the read-ahead steps being read (which
//!   reserve their bytes in it first, half the capacity at most), stay
//!   within `fs.cache`.
//! - Retention drops only `version/<n>` roots, never a snapshot nor the
//!   newest version, and nothing while the live namespace is empty.
//! - No recursion whose depth a user controls: a tree is as deep as its
//!   users make it, so every walk of one (writing a version, diff, clone,
//!   restore, marking) keeps the directories on its way down in an explicit
//!   stack on the heap, bounded by the tree, never by the thread's stack
//!   (see `docs/history.md`, "Walking a tree").
//! - Background work is bounded: write-behind and policy migrations run on
//!   fixed threads fed by bounded queues, `.snapshots` remembers a bounded
//!   number of entries, and its inode numbers never wrap
//!   (`docs/engineering.md`, "The bounds").
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).

pub mod acl;
mod ahead;
mod behind;
mod cache;
mod changed;
pub mod chunkmode;
mod commit;
mod coverage;
mod cut;
pub mod damage;
mod error;
mod export;
mod file;
mod hints;
pub mod history;
mod intent;
mod metrics;
mod migrate;
mod namespace;
mod open;
mod pattern;
mod posix;
pub mod problem;
mod protection;
mod punch;
pub mod reach;
mod reflink;
pub mod retention;
pub mod rules;
mod snapview;
pub mod space;
pub mod tree;
mod waiting;

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cas::{Store, StreamWriter};
use chunking::ChunkerParams;
use meta::{Counts, InodeId, MetaStore, Timestamp};

pub use cache::ChunkCache;
pub use error::{FsError, Result};
use file::FileState;
pub use open::Stream;
pub use posix::Caller;
pub use problem::{Damage, Existing, Missing, NameProblem, PolicyProblem};
use retention::{Clock, Retention, SystemClock};
use rules::Rules;
use snapview::is_snapshots_name;
pub use snapview::{is_virtual, SNAPSHOTS_DIR};

/// Tunables of the file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsSettings {
    /// Files up to this size keep their bytes in the inode: one metadata
    /// read serves them and they never touch a container (hashFS's one-I/O
    /// small-file read; most files of a typical tree are this small).
    pub inline_max: usize,
    /// Dirty bytes one file may hold before they are written behind.
    pub file_dirty_max: usize,
    /// Dirty bytes all files together may hold.
    pub total_dirty_max: usize,
    /// How far ahead of a sequential reader chunks are fetched.
    pub readahead: u64,
    /// Bytes of the DRAM chunk cache.
    pub cache_bytes: usize,
    /// How often the committer makes written data and metadata durable.
    pub commit_interval: Duration,
    /// How often the committer writes a version of the namespace (when
    /// anything changed); zero turns periodic versions off.
    pub version_interval: Duration,
    /// Which versions are kept as they age (see [`retention`]).
    pub retention: Retention,
    /// The persistent chunk cache tier below the DRAM cache (`[cache]` in
    /// `cairn.toml`); none when unset.
    pub tier: Option<::cache::TierSettings>,
    /// The metadata engine is shared with other clients (etcd), which see
    /// each record the moment it is written: a file's content is recorded
    /// only once its chunks are durable (each close of a written file
    /// then waits for its data), so another client that opens it after
    /// the close reads it whole (`docs/cluster.md`).
    pub close_to_open: bool,
}

impl Default for FsSettings {
    fn default() -> Self {
        FsSettings {
            inline_max: 16 << 10,
            file_dirty_max: 32 << 20,
            total_dirty_max: 256 << 20,
            readahead: 32 << 20,
            cache_bytes: 256 << 20,
            commit_interval: Duration::from_secs(5),
            version_interval: Duration::from_secs(30),
            retention: Retention::default(),
            tier: None,
            close_to_open: false,
        }
    }
}

/// Counters for `statfs`, cheap enough for every call: what `cairn stats`
/// reports is [`space::report`] (one computation, mounted or not).
#[derive(Debug, Clone, Copy)]
pub struct FsStats {
    pub files: u64,
    pub dirs: u64,
    pub stored_bytes: u64,
}

struct Inner {
    meta: Arc<dyn MetaStore>,
    store: Store,
    params: ChunkerParams,
    settings: FsSettings,
    /// Swapped whole when the branches are reconfigured while mounted.
    rules: parking_lot::RwLock<Rules>,
    files: Mutex<HashMap<InodeId, Arc<Mutex<FileState>>>>,
    /// Streams of closed files whose chunks the next commit must flush.
    pending: Mutex<Vec<StreamWriter>>,
    /// Streams shared by small files, one per protection when idle: each
    /// closed small file sealing a container of its own made a container
    /// (a file, a sync, an index entry) per file, and a 4 MiB buffer each
    /// while it waited for the disk. A commit flushes them.
    small: Mutex<Vec<StreamWriter>>,
    /// Small files recorded since the last commit, whose path-index
    /// entries it gives their chunks' locations ([`hints`]).
    hint_queue: Mutex<Vec<hints::Queued>>,
    /// Held shared while a file's content is recorded (chunks written,
    /// then the metadata pointing at them), exclusively by a commit from
    /// its first flush to the metadata sync, so that everything the sync
    /// makes durable reaches only chunks that are durable already.
    recording: parking_lot::RwLock<()>,
    dirty_total: AtomicUsize,
    /// Bytes of stored data files gave up (see [`Fs::released_bytes`]).
    released: std::sync::atomic::AtomicU64,
    appliers: behind::Appliers,
    migrators: migrate::Migrators,
    cache: Arc<ChunkCache>,
    fetcher: ahead::Fetcher,
    commit_lock: Mutex<()>,
    /// See [`history`]: versions and garbage collection's marking.
    history: Mutex<()>,
    /// Set while another client's collection runs (`gc`'s `peers`):
    /// versions and snapshots are refused meanwhile. Changed and read
    /// under `history`.
    history_paused: Mutex<Option<u64>>,
    /// The newest version and the metadata engine's count of changes
    /// when it was read: while the count stays, nothing changed and no
    /// version is walked again. Changed and read under `history`.
    versioned: Mutex<Option<history::Versioned>>,
    /// The time versions are dated and judged by (see [`Fs::set_clock`]).
    clock: parking_lot::RwLock<Arc<dyn Clock>>,
    /// Whether retention said it holds back because the namespace is empty.
    empty_said: AtomicBool,
    /// Held while an inode's mode and the access ACL that must agree with
    /// it are read and written, so that a chmod and a setfacl cannot
    /// interleave.
    modes: Mutex<()>,
    /// The parent and name each inode was last created or looked up by:
    /// checked hints that spare [`Inner::path_of`] a directory scan.
    names: Mutex<lru::LruCache<InodeId, (InodeId, Vec<u8>)>>,
    snapshots: snapview::SnapView,
    /// How recently written files are being written (see [`pattern`]).
    patterns: Mutex<pattern::Tracker>,
    /// Figures for `/metrics` recorded as things happen.
    recorded: metrics::Recorded,
    stop: (Mutex<bool>, Condvar),
}

/// The file system. Cheap to share between FUSE worker threads.
pub struct Fs {
    inner: Arc<Inner>,
    committer: Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

fn now() -> Timestamp {
    Timestamp::now()
}

/// Refuses changes to anything under `.snapshots`.
fn writable(ino: InodeId) -> Result<()> {
    if is_virtual(ino) {
        Err(FsError::ReadOnly)
    } else {
        Ok(())
    }
}

/// Refuses changes under `.snapshots` and to `.snapshots` itself.
fn writable_name(parent: InodeId, name: &[u8]) -> Result<()> {
    writable(parent)?;
    if is_snapshots_name(parent, name) {
        Err(FsError::ReadOnly)
    } else {
        Ok(())
    }
}

impl Fs {
    /// Opens the file system over a metadata engine and a store; orphans a
    /// crash left behind are deleted, and the committer starts. Every file
    /// gets the store's default protection unless its xattr says otherwise.
    pub fn new(
        meta: Arc<dyn MetaStore>,
        store: Store,
        params: ChunkerParams,
        settings: FsSettings,
    ) -> Result<Fs> {
        let rules = Rules::new(Vec::new(), store.default_protection());
        Self::with_rules(meta, store, params, settings, rules)
    }

    /// [`Fs::new`] with the redundancy rules of `cairn.toml`.
    pub fn with_rules(
        meta: Arc<dyn MetaStore>,
        store: Store,
        params: ChunkerParams,
        settings: FsSettings,
        rules: Rules,
    ) -> Result<Fs> {
        meta.purge_orphans()?;
        let cache = Arc::new(ChunkCache::new(settings.cache_bytes));
        let tier = settings.tier.as_ref().and_then(|t| open_tier(t, &store));
        let inner = Arc::new(Inner {
            meta,
            fetcher: ahead::Fetcher::start(store.clone(), cache.clone(), tier),
            store,
            params,
            cache,
            settings,
            rules: parking_lot::RwLock::new(rules),
            files: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            small: Mutex::new(Vec::new()),
            hint_queue: Mutex::new(Vec::new()),
            recording: parking_lot::RwLock::new(()),
            dirty_total: AtomicUsize::new(0),
            released: std::sync::atomic::AtomicU64::new(0),
            appliers: behind::Appliers::start(),
            migrators: migrate::Migrators::new(migrate::MIGRATORS, migrate::MIGRATE_QUEUE),
            commit_lock: Mutex::new(()),
            history: Mutex::new(()),
            history_paused: Mutex::new(None),
            versioned: Mutex::new(None),
            clock: parking_lot::RwLock::new(Arc::new(SystemClock)),
            empty_said: AtomicBool::new(false),
            modes: Mutex::new(()),
            names: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(namespace::NAMES_HINTED).expect("nonzero"),
            )),
            snapshots: snapview::SnapView::default(),
            patterns: Mutex::new(pattern::Tracker::default()),
            recorded: metrics::Recorded::default(),
            stop: (Mutex::new(false), Condvar::new()),
        });
        inner
            .store
            .layer()
            .watch_io(inner.recorded.branches.clone());
        intent::replay(&inner)?;
        let bg = inner.clone();
        let committer = std::thread::Builder::new()
            .name("fs-commit".into())
            .spawn(move || bg.commit_loop())
            .expect("spawn the committer");
        Ok(Fs {
            inner,
            committer: Mutex::new(Some(committer)),
            stopped: AtomicBool::new(false),
        })
    }

    /// How a log line names a file: its path from the mount root when the
    /// metadata engine knows one, else its inode number.
    pub fn describe(&self, ino: InodeId) -> String {
        self.inner.describe(ino)
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Replaces the clock versions are dated and judged by (tests pass one
    /// they move by hand).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.inner.clock.write() = clock;
    }

    /// Replaces the redundancy rules (and the store's default protection)
    /// after the branches were reconfigured. Streams already open keep
    /// their protection; a retired branch in it is replaced where stored.
    /// The chunking rules the file system was opened with stay.
    pub fn set_rules(&self, rules: Rules) -> Result<()> {
        self.inner
            .store
            .set_default_protection(rules.default_protection().clone())?;
        let mut held = self.inner.rules.write();
        *held = rules.with_chunking(held.chunking_rules().to_vec());
        Ok(())
    }

    /// Bytes of stored data that files gave up since the mount: stored
    /// extents overwritten or truncated away (counted as the change is
    /// recorded), files whose last name was removed or replaced. An upper
    /// bound of the garbage made (a chunk given up may be deduplicated
    /// elsewhere, or held by a version), for deciding when to collect.
    pub fn released_bytes(&self) -> u64 {
        self.inner.released.load(Ordering::Relaxed)
    }

    /// Bytes held in memory as dirty runs, counted against the global
    /// limit: written and not yet stored, or an open inline file's bytes.
    pub fn dirty_bytes(&self) -> usize {
        self.inner.dirty_total.load(Ordering::Relaxed)
    }

    /// Files whose content cannot be read back whole (see [`damage`]), as
    /// last recorded.
    pub fn damaged_files(
        &self,
        known: damage::KnownDamage<'_>,
    ) -> Result<Vec<damage::DamagedFile>> {
        let view = self.inner.meta.view()?;
        damage::damaged_files(&self.inner.store, view.as_ref(), known)
    }

    /// What the store can still take and could hold in all, for
    /// `statfs`; `None` when a branch cannot tell (an object store).
    pub fn space(&self) -> Result<Option<cas::Space>> {
        Ok(self.inner.store.space()?)
    }

    pub fn stats(&self) -> Result<FsStats> {
        let Counts { files, dirs } = self.inner.meta.counts()?;
        Ok(FsStats {
            files,
            dirs,
            stored_bytes: self.inner.store.stored_bytes(),
        })
    }

    /// Reads the metadata engine has made of its storage since it was
    /// opened (exact; a benchmark divides it by the operations it ran).
    pub fn meta_storage_reads(&self) -> u64 {
        self.inner.meta.storage_reads()
    }

    /// What holds the store's space, and the dedup and compression ratios
    /// (see [`space`]), once everything written is recorded: the same
    /// answer [`space::report`] gives on the repository unmounted.
    pub fn space_report(&self) -> Result<space::SpaceReport> {
        match self.inner.sync_all() {
            // On a full disk the rest is recorded; what waits for space is
            // counted once it is stored.
            Err(e)
                if e.errno() == libc::ENOSPC && self.inner.store.waiting_for_space().is_some() =>
            {
                tracing::info!(error = %e, "the space report leaves out the data waiting for space")
            }
            other => other?,
        }
        let _history = self.history_lock();
        let view = self.inner.meta.view()?;
        let mut report = space::report(&self.inner.store, Some(view.as_ref()))?;
        report.read_cache = Some(self.read_cache_report());
        self.inner.recorded.space(&report);
        Ok(report)
    }

    /// The daemon's memory is tight (its RSS near the sum of its budgets)
    /// or no longer: the DRAM chunk cache yields while it is
    /// ([`ChunkCache::set_tight`]).
    pub fn memory_pressure(&self, tight: bool) {
        self.inner.cache.set_tight(tight);
    }

    /// What the read caches did since the mount.
    pub fn read_cache_report(&self) -> space::ReadCacheReport {
        let caches = self.inner.fetcher.figures();
        space::ReadCacheReport {
            dram_bytes: self.inner.cache.bytes() as u64,
            store_chunk_reads: caches.store_reads,
            tier: caches.tier,
        }
    }
}

/// Opens the persistent tier; one that cannot be opened is logged and the
/// file system runs without it (it is a cache: reads go to the store).
fn open_tier(settings: &::cache::TierSettings, store: &Store) -> Option<Arc<::cache::ChunkTier>> {
    let key = store.clone();
    let verify: ::cache::Verify = Arc::new(move |data: &[u8]| key.chunk_id(data));
    match ::cache::ChunkTier::open(settings, verify) {
        Ok(t) => Some(Arc::new(t)),
        Err(e) => {
            tracing::error!(error = %e, "the cache tier cannot be opened; reads go to the store without it");
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use cas::{RepoKey, Store, StoreSettings};
    use chunking::ChunkerParams;
    use meta::RedbMeta;

    use crate::{Fs, FsSettings};

    /// A file system over a plain local branch and a metadata engine in
    /// `dir`.
    pub(crate) fn fs_in(dir: &std::path::Path) -> Fs {
        let (branch, _) = branch::LocalDir::open("local", dir.join("branch")).unwrap();
        std::fs::create_dir(dir.join("meta")).unwrap();
        let store = Store::open(
            Arc::new(branch),
            &dir.join("meta"),
            RepoKey::generate(),
            StoreSettings::default(),
        )
        .unwrap();
        let meta = RedbMeta::open(&dir.join("fs.redb"), 0, 0).unwrap();
        Fs::new(
            Arc::new(meta),
            store,
            ChunkerParams::default(),
            FsSettings::default(),
        )
        .unwrap()
    }
}

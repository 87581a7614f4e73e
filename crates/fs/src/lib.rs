//! The file system: POSIX files and directories over the chunk store.
//!
//! **Owns:** open-file state (extent lists, dirty bytes, one write stream
//! per file), the write path (write-behind through content-defined
//! chunking, re-chunking only the region around a change, admission control
//! on dirty bytes), the read path (an extent list per open file as its range
//! map, a DRAM chunk cache, sequential read-ahead in the background) and the
//! committer that makes data and then metadata durable in batches.
//! It also picks each file's redundancy protection when its write stream
//! opens ([`rules`]: the `user.cairn.policy` xattr, inherited by new
//! children, else `cairn.toml`'s rules) and re-stores a file's data when its
//! policy is made stronger. It applies the POSIX rules the kernel leaves to
//! the file system (`posix`, [`acl`]): the umask or an inherited default
//! ACL on create, a setgid directory's group, set-id bits a chown clears,
//! and access ACLs kept in step with the mode. It writes versions and
//! snapshots of the namespace ([`history`]) and drops the versions its
//! retention rule no longer keeps ([`retention`], on a clock tests can
//! set), and reports what holds the store's space ([`space`]).
//!
//! **Never:** opens a container or touches a branch (that is `cas`); speaks
//! FUSE (that is the `fuse` crate); checks permissions (the kernel does, with
//! `default_permissions` and the ACLs `fs` keeps).
//!
//! **Invariants:**
//! - Data is durable before metadata that points at it: every commit flushes
//!   the write streams that hold a file's new chunks before it syncs the
//!   metadata engine, and nothing else syncs the metadata engine.
//! - `fsync` returns only when the file's data and the metadata that reaches
//!   it are durable.
//! - An inode's access ACL, if kept, agrees with its mode (owner, mask or
//!   group, other); both change in one metadata operation. An ACL the mode
//!   says all of is not kept.
//! - An mtime set explicitly is not overwritten by content written before
//!   it (it is recorded first).
//! - Dirty bytes are bounded: a writer past its file's limit hands them to
//!   an applier thread once the file's previous apply is done (they count
//!   as dirty until stored); a writer past the global limit writes its own
//!   dirty bytes behind, and waits for them, before it continues.
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
mod cut;
pub mod damage;
mod file;
pub mod history;
mod migrate;
mod posix;
pub mod problem;
pub mod reach;
pub mod retention;
pub mod rules;
mod snapview;
pub mod space;
pub mod tree;

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use cas::{CasError, ChunkId, Protection, Store, StreamWriter};
use chunking::ChunkerParams;
use meta::{
    Attr, Content, Counts, DirEntry, FileKind, Inode, InodeId, MetaError, MetaStore, NewInode,
    RenameFlags, SetAttr, Timestamp, XattrFlags,
};
use recipe::{Recipe, RecipeError};

pub use cache::ChunkCache;
use file::FileState;
pub use posix::Caller;
pub use problem::{Damage, Existing, Missing, NameProblem, PolicyProblem};
use retention::{Clock, Retention, SystemClock};
use rules::{Choice, FileFacts, Rules, Source, POLICY_XATTR};
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
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    /// Boxed (as [`FsError::Recipe`]): errors nest, and a store error is
    /// large and rare; a metadata error (a missing name) is common and small.
    Store(Box<CasError>),
    #[error(transparent)]
    Recipe(Box<RecipeError>),
    #[error("not a regular file")]
    NotFile,
    #[error("operation not supported")]
    NotSupported,
    #[error("read-only: snapshots under .snapshots cannot be changed")]
    ReadOnly,
    #[error("{}", .reason.message(.name))]
    BadName { name: String, reason: NameProblem },
    /// A path or snapshot asked for by name that is not there.
    #[error("{}", .missing.message(.name))]
    NotFoundNamed { name: String, missing: Missing },
    #[error("{}", .holder.message(.name))]
    Exists { name: String, holder: Existing },
    /// Stored history bytes that do not decode: `what` names the kind of
    /// object (a directory listing, a version record).
    #[error("damaged history in the store: {what}: {damage}")]
    Malformed { what: &'static str, damage: Damage },
    #[error("{0}")]
    BadPolicy(#[source] PolicyProblem),
    /// A directory reached again below itself: only a damaged metadata
    /// engine holds one (directories have one name, and a rename into its
    /// own subtree is refused).
    #[error("directory inode {} lies inside itself: the metadata is damaged", .0.0)]
    DirectoryCycle(InodeId),
    #[error(transparent)]
    BadAcl(#[from] acl::AclError),
    #[error("only a directory has a default ACL")]
    DefaultAclNotDir,
    /// An ACL kept before it was checked (an older repository) that does
    /// not parse: `setfacl -b` removes it.
    #[error("inode {}: its stored ACL is damaged: {source}", ino.0)]
    DamagedAcl { ino: InodeId, source: acl::AclError },
    /// A snapshot inode past the numbers a mount can give (see
    /// [`snapview`]): a live inode at or above 2^40, or more snapshots
    /// seen by one mount than the range holds.
    #[error("inode {} of snapshot number {snapshot} has no inode number under .snapshots (remount to renumber)", ino.0)]
    SnapshotInodeRange { snapshot: u64, ino: InodeId },
    /// A `.snapshots` inode this mount no longer remembers (its entry was
    /// evicted): the kernel looks the name up again.
    #[error("inode {} under .snapshots is no longer known; look it up again", .0.0)]
    Forgotten(InodeId),
    /// A background worker of the file system is gone (it panicked).
    #[error("the file system's {0} threads stopped (a bug, see the log)")]
    WorkerGone(&'static str),
}

impl From<CasError> for FsError {
    fn from(e: CasError) -> Self {
        FsError::Store(Box::new(e))
    }
}

impl From<RecipeError> for FsError {
    fn from(e: RecipeError) -> Self {
        FsError::Recipe(Box::new(e))
    }
}

impl FsError {
    /// The errno a POSIX caller sees.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Meta(e) => match e {
                MetaError::NotFound => libc::ENOENT,
                MetaError::Exists => libc::EEXIST,
                MetaError::NotEmpty => libc::ENOTEMPTY,
                MetaError::NotDir => libc::ENOTDIR,
                MetaError::IsDir => libc::EISDIR,
                MetaError::NameTooLong => libc::ENAMETOOLONG,
                MetaError::NoXattr => libc::ENODATA,
                MetaError::Invalid(_) => libc::EINVAL,
                e if e.is_no_space() => libc::ENOSPC,
                _ => libc::EIO,
            },
            FsError::Store(e) if e.is_no_space() => libc::ENOSPC,
            FsError::NotFile | FsError::BadName { .. } | FsError::BadPolicy(_) => libc::EINVAL,
            FsError::NotSupported | FsError::BadAcl(acl::AclError::Version(_)) => libc::EOPNOTSUPP,
            FsError::BadAcl(_) => libc::EINVAL,
            FsError::DefaultAclNotDir => libc::EACCES,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotFoundNamed { .. } => libc::ENOENT,
            FsError::Exists { .. } => libc::EEXIST,
            FsError::SnapshotInodeRange { .. } => libc::EOVERFLOW,
            FsError::Forgotten(_) => libc::ESTALE,
            FsError::Store(_)
            | FsError::WorkerGone(_)
            | FsError::Recipe(_)
            | FsError::Malformed { .. }
            | FsError::DirectoryCycle(_)
            | FsError::DamagedAcl { .. } => libc::EIO,
        }
    }
}

pub type Result<T, E = FsError> = std::result::Result<T, E>;

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
    /// The parent and name each inode was last reached by, so rules can
    /// match a path (the metadata engine keeps no parent pointers).
    names: Mutex<lru::LruCache<InodeId, (InodeId, Vec<u8>)>>,
    files: Mutex<HashMap<InodeId, Arc<Mutex<FileState>>>>,
    /// Streams of closed files whose chunks the next commit must flush.
    pending: Mutex<Vec<StreamWriter>>,
    /// Streams shared by small files, one per protection when idle: each
    /// closed small file sealing a container of its own made a container
    /// (a file, a sync, an index entry) per file, and a 4 MiB buffer each
    /// while it waited for the disk. A commit flushes them.
    small: Mutex<Vec<StreamWriter>>,
    /// Held shared while a file's content is recorded (chunks written,
    /// then the metadata pointing at them), exclusively by a commit from
    /// its first flush to the metadata sync, so that everything the sync
    /// makes durable reaches only chunks that are durable already.
    recording: parking_lot::RwLock<()>,
    dirty_total: AtomicUsize,
    appliers: behind::Appliers,
    migrators: migrate::Migrators,
    cache: Arc<ChunkCache>,
    fetcher: ahead::Fetcher,
    commit_lock: Mutex<()>,
    /// See [`history`]: versions and garbage collection's marking.
    history: Mutex<()>,
    /// The time versions are dated and judged by (see [`Fs::set_clock`]).
    clock: parking_lot::RwLock<Arc<dyn Clock>>,
    /// Whether retention said it holds back because the namespace is empty.
    empty_said: AtomicBool,
    /// Held while an inode's mode and the access ACL that must agree with
    /// it are read and written, so that a chmod and a setfacl cannot
    /// interleave.
    modes: Mutex<()>,
    snapshots: snapview::SnapView,
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

/// Files up to this size that have no stream of their own are recorded
/// through a stream shared with other small files, so many of them fill
/// one container. Larger files keep their chunks together in their own.
const SMALL_FILE_MAX: u64 = 1 << 20;

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
        let inner = Arc::new(Inner {
            meta,
            fetcher: ahead::Fetcher::start(store.clone(), cache.clone()),
            store,
            params,
            cache,
            settings,
            rules: parking_lot::RwLock::new(rules),
            names: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(NAMES_KEPT).expect("nonzero"),
            )),
            files: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            small: Mutex::new(Vec::new()),
            recording: parking_lot::RwLock::new(()),
            dirty_total: AtomicUsize::new(0),
            appliers: behind::Appliers::start(),
            migrators: migrate::Migrators::new(migrate::MIGRATORS, migrate::MIGRATE_QUEUE),
            commit_lock: Mutex::new(()),
            history: Mutex::new(()),
            clock: parking_lot::RwLock::new(Arc::new(SystemClock)),
            empty_said: AtomicBool::new(false),
            modes: Mutex::new(()),
            snapshots: snapview::SnapView::default(),
            stop: (Mutex::new(false), Condvar::new()),
        });
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

    /// How a log line names a file: its path from the mount root when it
    /// was reached by name recently, else its inode number.
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
    pub fn set_rules(&self, rules: Rules) -> Result<()> {
        self.inner
            .store
            .set_default_protection(rules.default_protection().clone())?;
        *self.inner.rules.write() = rules;
        Ok(())
    }

    /// An inode with the live size and mtime of an open, written file.
    pub fn getattr(&self, ino: InodeId) -> Result<Inode> {
        if is_virtual(ino) {
            return self.snap_getattr(ino);
        }
        let mut inode = self.inner.meta.get(ino)?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    pub fn lookup(&self, parent: InodeId, name: &[u8]) -> Result<Inode> {
        if is_virtual(parent) {
            return self.snap_lookup(parent, name);
        }
        if is_snapshots_name(parent, name) {
            return self.snap_getattr(InodeId(snapview::SNAP_BASE));
        }
        let mut inode = self.inner.meta.lookup(parent, name)?;
        self.inner.overlay(&mut inode);
        self.inner.remember(inode.id, parent, name);
        Ok(inode)
    }

    /// Changes attributes; `size` truncates or extends a regular file.
    /// The POSIX rules on the mode apply: a chown clears set-id bits, a
    /// chmod carries into the access ACL.
    pub fn setattr(&self, ino: InodeId, changes: &SetAttr, size: Option<u64>) -> Result<Inode> {
        writable(ino)?;
        let t = now();
        if changes.mtime.is_some() {
            // Content written and not yet recorded carries the time of its
            // write: it is recorded first, so the mtime asked for now (a
            // copy tool's futimens just before close) is the one that
            // stays. A later write sets it again, as on ext4.
            self.flush(ino)?;
        }
        if let Some(size) = size {
            let state = self.inner.state(ino)?;
            let _recording = self.inner.recording.read();
            let mut f = self.inner.lock_settled(&state);
            let before = f.held();
            let inner = &self.inner;
            let read = |id: &ChunkId| inner.read_one(id);
            f.truncate(size, t, &read)?;
            inner.account(before, f.held());
            inner.finalize(&mut f)?;
            drop(f);
            self.inner.release_state(ino, state);
        }
        let mut inode = self.inner.set_attr_posix(ino, changes, t)?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    /// Creates `name` in `parent` exactly as `new` describes it (and with
    /// the parent's redundancy policy, if it has one); [`Fs::create_posix`]
    /// applies the rules a process creating it is under.
    pub fn create(&self, parent: InodeId, name: &[u8], mut new: NewInode) -> Result<Inode> {
        writable(parent)?;
        if is_snapshots_name(parent, name) {
            return Err(MetaError::Exists.into());
        }
        if new.kind == FileKind::File || new.kind == FileKind::Dir {
            match self.inner.meta.get_xattr(parent, POLICY_XATTR) {
                Ok(policy) => new.xattrs.push((POLICY_XATTR.to_vec(), policy)),
                Err(MetaError::NoXattr) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let inode = self.inner.meta.create(parent, name, new, now())?;
        self.inner.remember(inode.id, parent, name);
        Ok(inode)
    }

    pub fn link(&self, ino: InodeId, new_parent: InodeId, new_name: &[u8]) -> Result<Inode> {
        writable(ino)?;
        writable(new_parent)?;
        if is_snapshots_name(new_parent, new_name) {
            return Err(MetaError::Exists.into());
        }
        let mut inode = self.inner.meta.link(ino, new_parent, new_name, now())?;
        self.inner.overlay(&mut inode);
        Ok(inode)
    }

    pub fn unlink(&self, parent: InodeId, name: &[u8]) -> Result<()> {
        writable_name(parent, name)?;
        let target = self.inner.meta.lookup(parent, name)?.id;
        let open = self.inner.is_open(target);
        self.inner.meta.unlink(parent, name, open, now())?;
        Ok(())
    }

    pub fn rmdir(&self, parent: InodeId, name: &[u8]) -> Result<()> {
        writable_name(parent, name)?;
        Ok(self.inner.meta.rmdir(parent, name, now())?)
    }

    pub fn rename(
        &self,
        parent: InodeId,
        name: &[u8],
        new_parent: InodeId,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        writable_name(parent, name)?;
        writable_name(new_parent, new_name)?;
        let inner = &self.inner;
        inner.meta.rename(
            parent,
            name,
            new_parent,
            new_name,
            flags,
            &|ino| inner.is_open(ino),
            now(),
        )?;
        if let Ok(moved) = inner.meta.lookup(new_parent, new_name) {
            inner.remember(moved.id, new_parent, new_name);
        }
        Ok(())
    }

    pub fn readlink(&self, ino: InodeId) -> Result<Vec<u8>> {
        if is_virtual(ino) {
            return self.snap_readlink(ino);
        }
        match self.inner.meta.get(ino)? {
            Inode {
                content: Content::Inline(target),
                attr:
                    Attr {
                        kind: FileKind::Symlink,
                        ..
                    },
                ..
            } => Ok(target),
            _ => Err(MetaError::Invalid("not a symbolic link").into()),
        }
    }

    pub fn readdir(
        &self,
        dir: InodeId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        if is_virtual(dir) {
            return self.snap_readdir(dir, after, limit);
        }
        Ok(self.inner.meta.readdir(dir, after, limit)?)
    }

    pub fn get_xattr(&self, ino: InodeId, name: &[u8]) -> Result<Vec<u8>> {
        if is_virtual(ino) {
            return self
                .snap_xattrs(ino)?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or(MetaError::NoXattr.into());
        }
        self.inner.xattr_supported(ino, name)?;
        Ok(self.inner.meta.get_xattr(ino, name)?)
    }

    /// Sets an extended attribute. An ACL is checked and kept in step with
    /// the mode (see [`acl`]); a policy is checked and applied to
    /// data stored already.
    pub fn set_xattr(
        &self,
        ino: InodeId,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        caller: &Caller,
    ) -> Result<()> {
        writable(ino)?;
        self.inner.xattr_supported(ino, name)?;
        if acl::is_acl(name) {
            return self.inner.set_acl(ino, name, value, flags, caller);
        }
        if name != POLICY_XATTR {
            return Ok(self.inner.meta.set_xattr(ino, name, value, flags, now())?);
        }
        let protection = self.inner.xattr_protection(value).inspect_err(|e| {
            tracing::warn!(file = %self.inner.describe(ino), policy = %String::from_utf8_lossy(value), error = %e, "refused a policy xattr");
        })?;
        let before = self.inner.meta.get(ino)?;
        self.inner.meta.set_xattr(ino, name, value, flags, now())?;
        if let Content::Recipe(root) = before.content {
            self.inner.migrate(ino, root, protection);
        }
        Ok(())
    }

    /// The protection a regular file's data gets now and why; `path` (from
    /// the mount root) is used for rules when given, else the name the file
    /// was last reached by.
    pub fn policy_of(&self, ino: InodeId, path: Option<&str>) -> Result<Choice> {
        let inode = self.getattr(ino)?;
        self.inner.choose(&inode, path)
    }

    pub fn list_xattr(&self, ino: InodeId) -> Result<Vec<Vec<u8>>> {
        if is_virtual(ino) {
            return Ok(self.snap_xattrs(ino)?.into_iter().map(|(n, _)| n).collect());
        }
        Ok(self.inner.meta.list_xattr(ino)?)
    }

    pub fn remove_xattr(&self, ino: InodeId, name: &[u8]) -> Result<()> {
        writable(ino)?;
        self.inner.xattr_supported(ino, name)?;
        if acl::is_acl(name) {
            return self.inner.remove_acl(ino, name);
        }
        Ok(self.inner.meta.remove_xattr(ino, name, now())?)
    }

    /// Opens a regular file (one more handle on its state).
    pub fn open(&self, ino: InodeId) -> Result<()> {
        if is_virtual(ino) {
            return self.snap_open(ino);
        }
        let state = self.inner.state(ino)?;
        state.lock().handles += 1;
        Ok(())
    }

    /// Closes a handle: the last one writes the file behind and records its
    /// content (durable at the next commit), and deletes it if it was
    /// unlinked meanwhile.
    pub fn release(&self, ino: InodeId) -> Result<()> {
        if is_virtual(ino) {
            self.snap_release(ino);
            return Ok(());
        }
        let Some(state) = self.inner.files.lock().get(&ino).cloned() else {
            return Ok(());
        };
        let recording = self.inner.recording.read();
        let mut f = self.inner.lock_settled(&state);
        f.handles = f.handles.saturating_sub(1);
        let wrote = f.changed;
        let result = self
            .inner
            .finalize(&mut f)
            .and_then(|()| self.inner.stored_or_waiting(wrote));
        drop(f);
        drop(recording);
        self.inner.release_state(ino, state);
        result
    }

    pub fn read(&self, ino: InodeId, offset: u64, len: u32) -> Result<Vec<u8>> {
        if is_virtual(ino) {
            return self.snap_read(ino, offset, len);
        }
        let state = self.inner.state(ino)?;
        let mut f = state.lock();
        let ahead = self.inner.read_ahead(&mut f, offset, len);
        let plan = f.read_plan(offset, len as u64);
        // The chunks are fetched without the file's lock: the kernel's
        // read-ahead requests for the file are served in parallel.
        drop(f);
        self.inner.fetcher.ahead(&ahead);
        let out = self
            .inner
            .fetcher
            .get_many(&plan.ids())
            .map(|chunks| plan.assemble(chunks));
        self.inner.release_state(ino, state);
        out
    }

    /// Writes at `offset`. Admission control: past the file's or the global
    /// dirty limit, the writer first writes its own dirty bytes behind.
    pub fn write(&self, ino: InodeId, offset: u64, data: &[u8]) -> Result<u32> {
        writable(ino)?;
        // Data already accepted waits for space: taking more would only
        // grow what memory holds for a disk that cannot take it.
        if let Some(e) = self.inner.store.waiting_for_space() {
            return Err(e.into());
        }
        let state = self.inner.state(ino)?;
        let mut f = state.lock();
        if let Some(e) = f.failed.take() {
            drop(f);
            self.inner.release_state(ino, state);
            return Err(e);
        }
        let added = f.write(offset, data, now());
        self.inner.dirty_total.fetch_add(added, Ordering::Relaxed);
        let settings = &self.inner.settings;
        let result = if self.inner.dirty_total.load(Ordering::Relaxed) > settings.total_dirty_max {
            // Past the global limit the writer waits until its bytes are
            // stored, so that all files together stay within it.
            f = self.inner.settle(f);
            self.inner.apply(&mut f, false)
        } else if f.dirty_bytes > settings.file_dirty_max {
            f = self.inner.settle(f);
            self.inner.apply_behind(&state, &mut f)
        } else {
            Ok(())
        };
        drop(f);
        self.inner.release_state(ino, state);
        result.map(|()| data.len() as u32)
    }

    /// `flush` (on close of a descriptor): records the content, durable at
    /// the next commit.
    pub fn flush(&self, ino: InodeId) -> Result<()> {
        let Some(state) = self.inner.files.lock().get(&ino).cloned() else {
            return Ok(());
        };
        let _recording = self.inner.recording.read();
        let mut f = self.inner.lock_settled(&state);
        let wrote = f.changed;
        self.inner.finalize(&mut f)?;
        self.inner.stored_or_waiting(wrote)
    }

    /// Returns when the file's data and metadata are durable.
    pub fn fsync(&self, ino: InodeId) -> Result<()> {
        self.flush(ino)?;
        self.inner.commit()
    }

    /// Records every open file's content and makes everything durable.
    pub fn sync_all(&self) -> Result<()> {
        self.inner.sync_all()
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
            stored_bytes: self.inner.store.stats()?.stored_bytes,
        })
    }

    /// What holds the store's space, and the dedup and compression ratios
    /// (see [`space`]), once everything written is recorded: the same
    /// answer [`space::report`] gives on the repository unmounted.
    pub fn space_report(&self) -> Result<space::SpaceReport> {
        self.inner.sync_all()?;
        let _history = self.history_lock();
        let view = self.inner.meta.view()?;
        space::report(&self.inner.store, Some(view.as_ref()))
    }

    /// Makes everything durable and stops the committer.
    pub fn shutdown(&self) -> Result<()> {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let result = self.inner.sync_all();
        // A file system that is only ever mounted briefly never reaches the
        // version timer: unmount leaves a version, so `cairn recover` always
        // has one to rebuild from (none is written when nothing changed).
        if result.is_ok() && !self.inner.settings.version_interval.is_zero() {
            if let Err(e) = self.inner.write_version() {
                tracing::error!(error = %e, "writing a version of the file system at unmount failed");
            }
        }
        *self.inner.stop.0.lock() = true;
        self.inner.stop.1.notify_all();
        if let Some(t) = self.committer.lock().take() {
            let _ = t.join();
        }
        result
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// How many inodes' last names are kept for rule matching.
const NAMES_KEPT: usize = 1 << 18;

/// Most parent steps followed to build a path; deeper files match rules
/// by extension, size and owner only.
const MAX_DEPTH: usize = 256;

impl Inner {
    fn remember(&self, ino: InodeId, parent: InodeId, name: &[u8]) {
        self.names.lock().put(ino, (parent, name.to_vec()));
    }

    /// The path the inode was last reached by, relative to the root.
    fn path_of(&self, ino: InodeId) -> Option<String> {
        let names = self.names.lock();
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut at = ino;
        while at != InodeId::ROOT {
            let (parent, name) = names.peek(&at)?;
            parts.push(name);
            at = *parent;
            if parts.len() > MAX_DEPTH {
                return None;
            }
        }
        parts.reverse();
        let joined: Vec<String> = parts
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Some(joined.join("/"))
    }

    /// How a log line names a file: its path from the mount root when
    /// known, else its inode number.
    fn describe(&self, ino: InodeId) -> String {
        match self.path_of(ino) {
            Some(p) => format!("/{p}"),
            None => format!("inode {}", ino.0),
        }
    }

    /// A policy written to `user.cairn.policy`: parsed and checked against
    /// every branch of the store, which is what such a policy may use.
    fn xattr_protection(&self, value: &[u8]) -> Result<Protection> {
        let text =
            std::str::from_utf8(value).map_err(|_| FsError::BadPolicy(PolicyProblem::NotUtf8))?;
        let policy: redundancy::Policy = text
            .trim()
            .parse()
            .map_err(|e: redundancy::PolicyError| FsError::BadPolicy(e.into()))?;
        let branches = match self.store.layer() {
            Some(layer) => layer.branch_ids(),
            None => Protection::plain().branches,
        };
        let protection = Protection { policy, branches };
        self.store
            .check_protection(&protection)
            .map_err(|e| FsError::BadPolicy(PolicyProblem::Unusable(Box::new(e))))?;
        Ok(protection)
    }

    /// The file's xattr policy if it has a usable one, else the first
    /// matching rule, else the default.
    fn choose(&self, inode: &Inode, path: Option<&str>) -> Result<Choice> {
        match self.meta.get_xattr(inode.id, POLICY_XATTR) {
            Ok(value) => match self.xattr_protection(&value) {
                Ok(protection) => {
                    return Ok(Choice {
                        source: Source::Xattr,
                        protection,
                    })
                }
                // Set before the branches changed, or restored from a
                // snapshot: the rules still protect the file.
                Err(e) => tracing::warn!(
                    file = %self.describe(inode.id),
                    xattr = %String::from_utf8_lossy(POLICY_XATTR),
                    error = %e,
                    "ignoring a policy the branches cannot give; the rules protect the file"
                ),
            },
            Err(MetaError::NoXattr) => {}
            Err(e) => return Err(e.into()),
        }
        let known = match path {
            Some(p) => Some(p.trim_start_matches('/').to_string()),
            None => self.path_of(inode.id),
        };
        Ok(self.rules.read().choose(&FileFacts {
            path: known.as_deref(),
            size: inode.attr.size,
            uid: inode.attr.uid,
        }))
    }

    /// The write stream of a file about to store data, protected as its
    /// xattr or rules say, with the size it has now.
    fn open_stream(&self, f: &FileState) -> Result<StreamWriter> {
        Ok(self.store.stream_with(self.protection_of(f)?)?)
    }

    fn protection_of(&self, f: &FileState) -> Result<Protection> {
        let mut inode = self.meta.get(f.ino)?;
        inode.attr.size = f.size;
        Ok(self.choose(&inode, None)?.protection)
    }

    /// An idle shared stream for small files under `protection`; give it
    /// back with [`Inner::give_small`] before the recording lock is let go.
    fn take_small(&self, protection: Protection) -> Result<StreamWriter> {
        let mut idle = self.small.lock();
        match idle.iter().position(|w| *w.protection() == protection) {
            Some(i) => Ok(idle.swap_remove(i)),
            None => Ok(self.store.stream_with(protection)?),
        }
    }

    fn give_small(&self, w: StreamWriter) {
        self.small.lock().push(w);
    }

    /// Stores the chunks of a file's recipe again under `protection`, in
    /// the background. The recipe's ids do not change, so no metadata does:
    /// under a stronger policy each chunk's index entry moves to the new
    /// copy; under a weaker one every chunk is found already stored
    /// (stronger) and nothing is written, as other files may share them.
    fn migrate(self: &Arc<Self>, ino: InodeId, root: ChunkId, protection: Protection) {
        let inner = self.clone();
        let logged = self.clone();
        let run = move || -> Result<()> {
            let recipe = Recipe::open(&inner.store, root)?;
            let extents = recipe.extents(0, recipe.len())?;
            let mut writer = inner.store.stream_with(protection)?;
            let ids: Vec<ChunkId> = extents
                .iter()
                .filter(|e| e.id != recipe::HOLE)
                .map(|e| e.id)
                .collect();
            for batch in ids.chunks(64) {
                let data = inner.store.read_chunks(batch)?;
                writer.write_hashed(&data, batch)?;
            }
            recipe::store_tree(&mut writer, extents.iter().map(|e| (e.len, e.id)))?;
            writer.flush()?;
            Ok(())
        };
        let queued = self.migrators.submit(Box::new(move || {
            if let Err(e) = run() {
                tracing::error!(file = %logged.describe(ino), error = %e, "re-storing a file under its new policy failed");
            }
        }));
        if queued.is_err() {
            tracing::error!(file = %self.describe(ino), "cannot re-store a file under its new policy: no migration thread runs");
        }
    }

    fn overlay(&self, inode: &mut Inode) {
        if let Some(state) = self.files.lock().get(&inode.id) {
            let f = state.lock();
            inode.attr.size = f.size;
            if let Some(t) = f.mtime {
                inode.attr.mtime = t;
                inode.attr.ctime = t;
            }
        }
    }

    fn is_open(&self, ino: InodeId) -> bool {
        self.files
            .lock()
            .get(&ino)
            .is_some_and(|s| s.lock().handles > 0)
    }

    /// The open state of a regular file, loading its extents on first use.
    fn state(&self, ino: InodeId) -> Result<Arc<Mutex<FileState>>> {
        if let Some(s) = self.files.lock().get(&ino) {
            return Ok(s.clone());
        }
        let inode = self.meta.get(ino)?;
        if inode.attr.kind != FileKind::File {
            return Err(match inode.attr.kind {
                FileKind::Dir => MetaError::IsDir.into(),
                _ => FsError::NotFile,
            });
        }
        let extents = match &inode.content {
            Content::Recipe(root) => {
                let r = Recipe::open(&self.store, *root)?;
                r.extents(0, r.len())?
            }
            _ => Vec::new(),
        };
        let state = FileState::new(ino, inode.attr.size, inode.content.clone(), extents);
        let mut files = self.files.lock();
        Ok(files
            .entry(ino)
            .or_insert_with(|| {
                // An inline file's bytes are held as dirty runs from here
                // on, counted until the state is forgotten.
                self.account(0, state.held());
                Arc::new(Mutex::new(state))
            })
            .clone())
    }

    /// Forgets the state of a file nobody holds open and that has nothing
    /// left to record; deletes an orphan whose last handle closed.
    fn release_state(&self, ino: InodeId, state: Arc<Mutex<FileState>>) {
        let mut files = self.files.lock();
        let f = state.lock();
        if f.handles > 0 || f.changed || f.writer.is_some() || f.busy() {
            return;
        }
        // An inline file keeps its recorded bytes as dirty runs while its
        // state lives; they stop counting with it. (They once stayed
        // counted, and an inline file reopened was taken off without being
        // added, so the count drifted past the global limit and every write
        // stored its bytes at once, in a container per file.)
        self.account(f.held(), 0);
        drop(f);
        files.remove(&ino);
        drop(files);
        if let Ok(inode) = self.meta.get(ino) {
            if inode.attr.nlink == 0 {
                let _ = self.meta.drop_orphan(ino);
            }
        }
    }

    /// ENOSPC for a close or flush of a file that was written while data
    /// waits for space: its bytes are kept and stored once space is freed,
    /// but a writer that never calls fsync (`cp`) must still hear that
    /// they are not on disk.
    fn stored_or_waiting(&self, wrote: bool) -> Result<()> {
        match self.store.waiting_for_space() {
            Some(e) if wrote => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn account(&self, before: usize, after: usize) {
        if after >= before {
            self.dirty_total
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.dirty_total
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Writes the file's dirty bytes behind on this thread (no apply may be
    /// in flight for it).
    fn apply(&self, f: &mut FileState, whole: bool) -> Result<()> {
        let before = f.held();
        let mut writer = match f.writer.take() {
            Some(w) => w,
            None => self.open_stream(f)?,
        };
        let result = f.apply(whole, self.params, &mut writer, &self.cache);
        f.writer = Some(writer);
        self.account(before, f.held());
        result
    }

    /// Records the file's current content in the metadata engine (small
    /// files inline, others as a recipe tree). Durable at the next commit.
    fn finalize(&self, f: &mut FileState) -> Result<()> {
        if f.changed {
            let content = if f.size as usize <= self.settings.inline_max {
                let bytes = f.read(0, f.size, &|ids| self.read_many(ids))?;
                let before = f.dirty_bytes;
                f.dirty.clear();
                f.dirty_bytes = 0;
                self.account(before, 0);
                if bytes.is_empty() {
                    f.extents.clear();
                    Content::Empty
                } else {
                    f.dirty.insert(0, bytes.clone());
                    f.dirty_bytes = bytes.len();
                    self.account(0, bytes.len());
                    f.extents.clear();
                    Content::Inline(bytes)
                }
            } else {
                // A small file with no stream of its own writes into a
                // shared one; it is taken back out below, also on error.
                if f.writer.is_none() && f.size <= SMALL_FILE_MAX {
                    f.writer = Some(self.take_small(self.protection_of(f)?)?);
                    let recorded = self.record_chunks(f);
                    let shared = f.writer.take().expect("installed above");
                    self.give_small(shared);
                    recorded?
                } else {
                    self.record_chunks(f)?
                }
            };
            let mtime = f.mtime.unwrap_or_else(now);
            self.meta
                .set_content(f.ino, content.clone(), f.size, mtime)?;
            f.content = content;
            f.changed = false;
            // Recorded: the engine's mtime is the file's from here on.
            f.mtime = None;
        }
        if f.handles == 0 {
            if let Some(mut w) = f.writer.take() {
                // Sealed now, so a closed file holds no open container; the
                // next commit waits for it to be durable.
                w.seal()?;
                self.pending.lock().push(w);
            }
        }
        Ok(())
    }

    /// Writes the file's dirty bytes and its recipe tree through its
    /// stream (which the caller provides) and returns the content.
    fn record_chunks(&self, f: &mut FileState) -> Result<Content> {
        self.apply(f, true)?;
        // Any failure of an apply in the background is mended now.
        f.failed = None;
        if f.extents_end() < f.size {
            let end = f.extents_end();
            f.extents.push(recipe::Extent {
                offset: end,
                len: f.size - end,
                id: recipe::HOLE,
            });
        }
        let writer = f.writer.as_mut().expect("apply opened a stream");
        let root = recipe::store_tree(writer, f.extents.iter().map(|e| (e.len, e.id)))?;
        Ok(Content::Recipe(root))
    }

    /// Flushes every stream with new chunks, then syncs the metadata: data
    /// is always durable before the metadata that reaches it.
    fn commit(&self) -> Result<()> {
        let _guard = self.commit_lock.lock();
        let _recording = self.recording.write();
        let pending: Vec<StreamWriter> = std::mem::take(&mut *self.pending.lock());
        // Every stream is flushed even after one failed: each flush starts
        // its containers towards the disk.
        let mut first_error = None;
        for mut w in pending {
            if let Err(e) = w.flush() {
                first_error.get_or_insert(e);
            }
        }
        // No file is being recorded, so every shared stream is idle here.
        for w in self.small.lock().iter_mut() {
            if let Err(e) = w.flush() {
                first_error.get_or_insert(e);
            }
        }
        let open: Vec<Arc<Mutex<FileState>>> = self.files.lock().values().cloned().collect();
        // Open files' streams are sealed under their lock and waited for
        // without it, so a writer goes on while the disk drains.
        let mut waits = Vec::new();
        for state in open {
            if let Some(w) = self.lock_settled(&state).writer.as_mut() {
                waits.push(w.start_flush()?);
            }
        }
        for durable in waits {
            if let Err(e) = durable.wait() {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e.into());
        }
        // Metadata recorded since the last sync may point at a container
        // still waiting for space: none of it is made durable before that
        // container is. The commit is tried again at the next interval.
        if let Some(e) = self.store.waiting_for_space() {
            return Err(e.into());
        }
        self.meta.sync()?;
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        let open: Vec<(InodeId, Arc<Mutex<FileState>>)> = self
            .files
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for (ino, state) in open {
            let recording = self.recording.read();
            let mut f = self.lock_settled(&state);
            self.finalize(&mut f)?;
            drop(f);
            drop(recording);
            self.release_state(ino, state);
        }
        self.commit()
    }

    fn commit_loop(&self) {
        let (lock, cv) = &self.stop;
        let mut last_version = std::time::Instant::now();
        let mut stopped = lock.lock();
        while !*stopped {
            cv.wait_for(&mut stopped, self.settings.commit_interval);
            if *stopped {
                break;
            }
            drop(stopped);
            if let Err(e) = self.sync_all() {
                tracing::error!(error = %e, "the background commit failed; it is retried at the next interval");
            }
            let every = self.settings.version_interval;
            if !every.is_zero() && last_version.elapsed() >= every {
                last_version = std::time::Instant::now();
                if let Err(e) = self.write_version() {
                    tracing::error!(error = %e, "writing a version of the file system failed");
                }
            }
            stopped = lock.lock();
        }
    }

    fn read_one(&self, id: &ChunkId) -> Result<Bytes> {
        if let Some(b) = self.cache.get(id) {
            return Ok(b);
        }
        let data = self.store.read_chunk(id)?;
        self.cache.put(*id, data.clone());
        Ok(data)
    }

    fn read_many(&self, ids: &[ChunkId]) -> Result<Vec<Bytes>> {
        self.fetcher.get_many(ids)
    }

    /// The chunks to fetch so that `readahead` bytes past a sequential
    /// reader are in the cache; asked for in half-window strides. The
    /// kernel's own read-ahead sends several requests at once, which arrive
    /// in any order: one near where the last ended counts as sequential.
    fn read_ahead(&self, f: &mut FileState, offset: u64, len: u32) -> Vec<ChunkId> {
        let window = self.settings.readahead;
        let end = offset + len as u64;
        let sequential = offset.abs_diff(f.read_next) <= window / 4;
        f.read_next = if sequential {
            f.read_next.max(end)
        } else {
            end
        };
        if !sequential || window == 0 || end + window / 2 < f.read_ahead_until {
            return Vec::new();
        }
        let from = f.read_ahead_until.max(end);
        let to = (end + window).min(f.extents_end());
        f.read_ahead_until = end + window;
        let first = f.extents.partition_point(|e| e.offset + e.len <= from);
        f.extents[first..]
            .iter()
            .take_while(|e| e.offset < to)
            .filter(|e| e.id != recipe::HOLE)
            .map(|e| e.id)
            .collect()
    }
}

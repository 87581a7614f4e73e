//! The metadata engine: the namespace of the file system.
//!
//! **Owns:** inodes (attributes, link count, content reference or inline
//! bytes), directory entries keyed by (parent inode, name), symlink targets,
//! extended attributes, inode-number allocation, and orphans (inodes whose
//! last name is gone while a file handle still holds them).
//! Also the one byte layout of an inode's attributes ([`codec`]), which
//! `fs` uses for the listings of versions and snapshots; the path index
//! (hashFS, `pathindex`): a regular file found by a hash of its full path
//! in one read ([`MetaStore::lookup_path`]), with, for a small file
//! stored in chunks, where `fs` last saw those chunks (opaque location
//! hints it gives with [`MetaStore::set_path_hints`], kept only for the
//! recipe root they were computed from); and a count of the reads the
//! engine makes of its storage ([`Counted`], from the `counted` crate;
//! [`MetaStore::storage_reads`]).
//!
//! **Never:** reads or writes file data (that is `fs` over `cas`); enforces
//! permissions (the kernel does, with `default_permissions`); knows about
//! FUSE.
//!
//! **Invariants:**
//! - Every operation is atomic: it applies whole or not at all.
//! - Inode numbers are never reused and are stable across remounts; the root
//!   directory is [`InodeId::ROOT`]. A root is created only in a store with
//!   no inodes: a store that lost its root while holding others is refused
//!   as damaged ([`MetaError::RootMissing`]), never given a fresh, empty one.
//! - A directory's `nlink` is 2 + its number of subdirectories; a file's is
//!   its number of names. An inode with no names and no orphan mark does not
//!   exist. Only non-directories become orphans (their `nlink` is 0);
//!   a directory is deleted with its last name.
//! - Every directory but the root has exactly one name, and records the
//!   directory holding it (its parent pointer; the root's is itself;
//!   [`MetaStore::parent`]). A non-directory records the directory of the
//!   name it was last given, so any inode's path can be found
//!   ([`MetaStore::path_of`]): never a wrong one. A rename keeps it current,
//!   and it is how a rename that would move a
//!   directory into its own subtree is refused (walked up in a loop, bounded
//!   by the number of directories: a tree can be any depth). [`RedbMeta::verify`] checks
//!   this and every other invariant.
//! - Operations are applied at once but made durable in batches: a
//!   mutation returns before it is on disk, [`MetaStore::sync`] makes every
//!   earlier mutation durable (the metadata log + committer of HydraFS, with
//!   redb's non-durable commits as the log).
//! - The path index answers exactly what a walk name by name answers
//!   (invariant 6): its entries are written, rewritten and dropped in the
//!   transaction of the operation that changes the name or the inode; a
//!   directory rename records its move (O(1)) and every entry it may have
//!   made stale is doubted and walked; a collision is seen by the path
//!   stored in the entry. Only regular files with one name have entries.
//!   [`RedbMeta::verify`] checks every entry the index would trust.
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).
//!
//! The trait is deliberately small so that the metaserver ring (a later
//! issue) can implement it over the network.

mod batch;
mod board;
pub mod codec;
#[cfg(feature = "conformance")]
pub mod conformance;
mod engine;
mod parents;
mod pathindex;
mod record;
pub mod rules;
mod types;
mod unsynced;
mod verify;
mod view;

pub use board::{Collecting, CollectionBoard, Forget, Phase};
pub use counted::Counted;
pub use engine::{RedbMeta, DEFAULT_CACHE};
pub use ids::ChunkId;
pub use pathindex::{MAX_ENTRY_XATTRS, MAX_HINTED_CHUNKS, MAX_HINTED_SIZE, MAX_MOVES};
pub use types::*;
pub use view::{ImportEntry, ImportInode};

/// The longest name a directory entry may have, in bytes.
pub const NAME_MAX: usize = 255;

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("file name too long (over {NAME_MAX} bytes)")]
    NameTooLong,
    #[error("no such extended attribute")]
    NoXattr,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("metadata store: {0}")]
    Store(#[from] redb::Error),
    #[error("the metadata store at {path} cannot be opened: {source}")]
    Open {
        path: std::path::PathBuf,
        #[source]
        source: redb::Error,
    },
    #[error("the metadata store at {0} is in use by another cairn process")]
    Busy(std::path::PathBuf),
    /// The root directory's inode is gone while other inodes remain: a
    /// fresh root would hide the whole tree.
    #[error("the root directory's inode is missing ({0} other inodes remain)")]
    RootMissing(u64),
    /// The disk under the store is nearly full: operations that grow the
    /// namespace are refused, those that shrink it still run.
    #[error(
        "no space left for metadata at {}: {free} bytes free (delete files to free space)",
        path.display()
    )]
    NoSpace { path: std::path::PathBuf, free: u64 },
    /// A metadata engine over the network (etcd, the `meta-etcd` crate)
    /// failed: unreachable within its deadline, too contended, or holding
    /// a record it cannot read. The source is that engine's typed error.
    #[error("metadata engine: {0}")]
    Remote(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl MetaError {
    /// Whether the disk under the store is full (ENOSPC or EDQUOT).
    pub fn is_no_space(&self) -> bool {
        match self {
            MetaError::NoSpace { .. } => true,
            MetaError::Store(redb::Error::Io(io))
            | MetaError::Open {
                source: redb::Error::Io(io),
                ..
            } => {
                io.kind() == std::io::ErrorKind::StorageFull
                    || matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            }
            _ => false,
        }
    }

    /// Whether the store itself is damaged, as opposed to busy or failing
    /// for an operating-system reason (a full disk, a permission) that
    /// leaves the file as it was.
    pub fn is_damage(&self) -> bool {
        match self {
            MetaError::Busy(_) | MetaError::Remote(_) => false,
            MetaError::Open {
                source: redb::Error::Io(io),
                ..
            }
            | MetaError::Store(redb::Error::Io(io)) => io.raw_os_error().is_none(),
            _ => true,
        }
    }
}

pub type Result<T, E = MetaError> = std::result::Result<T, E>;

/// The namespace operations the file system needs. Names are raw bytes (a
/// POSIX name is any bytes but `/` and NUL). Every mutation that changes a
/// directory updates that directory's mtime and ctime to `now`.
pub trait MetaStore: Send + Sync {
    /// An inode by number.
    fn get(&self, ino: InodeId) -> Result<Inode>;

    /// [`MetaStore::get`] of each of `inos`, in order: what a listing
    /// with attributes (`readdirplus`) asks for a page of entries. An
    /// engine whose every read is a round trip answers them together.
    fn get_many(&self, inos: &[InodeId]) -> Vec<Result<Inode>> {
        inos.iter().map(|i| self.get(*i)).collect()
    }

    /// The inode named `name` in directory `parent`.
    fn lookup(&self, parent: InodeId, name: &[u8]) -> Result<Inode>;

    /// Creates a file, directory, symlink or special file named `name` in
    /// `parent`. `Exists` if the name is taken; `NotDir` if `parent` is not
    /// a directory. A symlink's target is its `Content::Inline` (and its
    /// size); a file's content is `Empty` or `Inline`; other kinds take
    /// `Empty`; anything else is `Invalid`. The inode's extended
    /// attributes (`new.xattrs`) are stored in the same operation.
    fn create(&self, parent: InodeId, name: &[u8], new: NewInode, now: Timestamp) -> Result<Inode>;

    /// Adds the name `new_name` in `new_parent` for the existing non-directory
    /// `ino` (a hard link); returns the inode with its raised link count.
    /// `Invalid` for a directory, `NotFound` for an orphan (as Linux).
    fn link(
        &self,
        ino: InodeId,
        new_parent: InodeId,
        new_name: &[u8],
        now: Timestamp,
    ) -> Result<Inode>;

    /// Removes a non-directory name. When it was the last name the inode
    /// becomes an orphan if `keep_orphan` (an open handle still uses it) and
    /// is deleted otherwise. Returns the inode as it was after the unlink.
    fn unlink(
        &self,
        parent: InodeId,
        name: &[u8],
        keep_orphan: bool,
        now: Timestamp,
    ) -> Result<Inode>;

    /// Removes an empty directory.
    fn rmdir(&self, parent: InodeId, name: &[u8], now: Timestamp) -> Result<()>;

    /// Renames, with `RENAME_NOREPLACE` and `RENAME_EXCHANGE` semantics. A
    /// replaced target follows the rules of `unlink`/`rmdir` (a replaced
    /// directory must be empty; a file cannot replace a directory nor the
    /// other way round). Returns the inode that lost its last name, if any,
    /// so the caller can decide about orphans (`keep_orphan` as in unlink;
    /// asked only for a non-directory about to lose its last name; a
    /// replaced directory is deleted and returned with `nlink` 0). As in
    /// Linux, `noreplace` gives `Exists` for any existing target, even the
    /// source itself; otherwise a source and target naming one inode is a
    /// successful no-op.
    #[allow(clippy::too_many_arguments)]
    fn rename(
        &self,
        parent: InodeId,
        name: &[u8],
        new_parent: InodeId,
        new_name: &[u8],
        flags: RenameFlags,
        keep_orphan: &dyn Fn(InodeId) -> bool,
        now: Timestamp,
    ) -> Result<Option<Inode>>;

    /// The directory holding directory `dir`'s name (the root's is the
    /// root). `NotDir` for anything but a directory.
    fn parent(&self, dir: InodeId) -> Result<InodeId>;

    /// A path from the root to `ino`, one name per step (none for the
    /// root), found through parent pointers. `None` when no path is known:
    /// an orphan, or a hard-linked file that lost the name it was last
    /// given. Never a path that does not name `ino`.
    fn path_of(&self, ino: InodeId) -> Result<Option<Vec<Vec<u8>>>>;

    /// Directory entries of `dir` in name order, starting after `after`
    /// (exclusive), at most `limit` of them. Does not include `.` and `..`.
    fn readdir(&self, dir: InodeId, after: Option<&[u8]>, limit: usize) -> Result<Vec<DirEntry>>;

    /// Changes attributes; `None` fields stay. Sets ctime to `now`.
    fn set_attr(&self, ino: InodeId, changes: &SetAttr, now: Timestamp) -> Result<Inode>;

    /// Changes attributes and extended attributes together, in one
    /// operation (a mode and the ACL that must agree with it). Removing an
    /// absent attribute is not an error. Sets ctime to `now`.
    fn update(
        &self,
        ino: InodeId,
        changes: &SetAttr,
        xattrs: &[XattrChange],
        now: Timestamp,
    ) -> Result<Inode>;

    /// Replaces a file's content reference and size (a write or truncate
    /// committed by `fs`), setting mtime and ctime to `mtime`. `IsDir` for a
    /// directory, `Invalid` for other non-regular files.
    fn set_content(
        &self,
        ino: InodeId,
        content: Content,
        size: u64,
        mtime: Timestamp,
    ) -> Result<Inode>;

    fn get_xattr(&self, ino: InodeId, name: &[u8]) -> Result<Vec<u8>>;
    /// `Exists` with `XattrFlags::Create` if present, `NoXattr` with
    /// `XattrFlags::Replace` if absent.
    fn set_xattr(
        &self,
        ino: InodeId,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        now: Timestamp,
    ) -> Result<()>;
    fn list_xattr(&self, ino: InodeId) -> Result<Vec<Vec<u8>>>;
    fn remove_xattr(&self, ino: InodeId, name: &[u8], now: Timestamp) -> Result<()>;

    /// Deletes an orphan once its last handle is closed. An inode that is
    /// not an orphan (it has a name, or is gone already) is left alone.
    fn drop_orphan(&self, ino: InodeId) -> Result<()>;

    /// Deletes every orphan (a crash left them): returns how many.
    fn purge_orphans(&self) -> Result<u64>;

    /// Every chunk-bearing content reference (for statistics now, for GC
    /// later): calls `f` for each inode with `Content::Recipe`.
    fn for_each_content(&self, f: &mut dyn FnMut(InodeId, &Content, u64)) -> Result<()>;

    /// Counts of files (non-directories) and directories.
    fn counts(&self) -> Result<Counts>;

    /// A read-only view of the whole namespace as it is now; later
    /// mutations do not show in it (versions and garbage collection read a
    /// consistent instant through it while the file system stays in use).
    fn view(&self) -> Result<Box<dyn MetaView>>;

    /// Makes every mutation so far durable.
    fn sync(&self) -> Result<()>;

    /// Appends `record` to the intent log of regular file `ino`: bytes of
    /// `fs` (the writes an `fsync` made durable without storing chunks),
    /// kept in order until the file's content is next set
    /// ([`MetaStore::set_content`] drops them in the same transaction) or
    /// the inode is deleted. Durable at the next [`MetaStore::sync`].
    /// `false` from an engine that keeps no log: `fs` stores chunks then.
    fn append_intent(&self, ino: InodeId, record: &[u8]) -> Result<bool> {
        let _ = (ino, record);
        Ok(false)
    }

    /// Every inode with intent records, with them in the order appended
    /// (read once when the file system opens, to replay them).
    fn intents(&self) -> Result<Vec<(InodeId, Vec<Vec<u8>>)>> {
        Ok(Vec::new())
    }

    /// The intent records of `ino`, in the order appended.
    fn intents_of(&self, ino: InodeId) -> Result<Vec<Vec<u8>>> {
        let _ = ino;
        Ok(Vec::new())
    }

    /// Drops the intent records of `ino` (an inode that is gone).
    fn clear_intents(&self, ino: InodeId) -> Result<()> {
        let _ = ino;
        Ok(())
    }

    /// Files whose content was set since the last [`MetaStore::sync`]: a
    /// record that may point at data not yet durable. Empty for an engine
    /// whose records are durable at once (their data is stored first).
    fn unsynced_contents(&self) -> Vec<InodeId> {
        Vec::new()
    }

    /// Puts the content of `ino` back as of the last sync (content, size,
    /// times and intent log), for a record whose data will not become
    /// durable; the rest of the inode (links, mode, names) stays as it is.
    /// Returns the inode as it now is, or `None` when its content was not
    /// set since the sync or it is gone.
    fn revert_content(&self, ino: InodeId) -> Result<Option<Inode>> {
        let _ = ino;
        Ok(None)
    }

    /// The inode at `path` (names joined by `/`, no leading `/`; the empty
    /// path is the root): what [`MetaStore::lookup`] name by name from the
    /// root gives, with the same errors. A regular file with one name is
    /// answered from the path index in one read when its entry is trusted;
    /// anything else is walked, and the walk writes the entry of such a
    /// file (see `pathindex`). An index hit brings the inode's xattrs too
    /// when they are small ([`PathFound`]).
    fn lookup_path(&self, path: &[u8]) -> Result<PathFound>;

    /// Whether regular file `ino` has a path-index entry (worth giving
    /// hints to).
    fn path_indexed(&self, ino: InodeId) -> Result<bool>;

    /// Gives the path-index entry of `ino` where its data chunks are
    /// ([`ContentHints`]), which [`MetaStore::lookup_path`] then answers
    /// with while the file keeps that content. Nothing happens when `ino`
    /// has no entry or the hints do not describe its content now (another
    /// recipe root, a size they do not cover, more than
    /// `MAX_HINTED_CHUNKS` chunks); whether its entry holds them.
    fn set_path_hints(&self, ino: InodeId, hints: &ContentHints) -> Result<bool>;

    /// Reads the engine has made of its storage since it was opened (an
    /// exact count, for benchmarks: reads per operation on a cold cache).
    fn storage_reads(&self) -> u64;

    /// A count that moves whenever this engine's namespace may have
    /// changed since it was opened (each operation that wrote anything), so
    /// a caller can tell that nothing changed without reading the
    /// namespace; it may move without a change, never stay through one.
    /// `None` for an engine that cannot tell: one other clients change
    /// too (etcd).
    fn changes(&self) -> Option<u64> {
        None
    }

    /// What the engine's page cache did since it was opened (redb's count
    /// of page lookups it answered and missed, `/metrics`); `None` for an
    /// engine without one (etcd), or while an I/O error has the database
    /// closed.
    fn page_cache(&self) -> Option<redb::CacheStats> {
        None
    }

    /// Where the clients of a shared namespace agree on a garbage
    /// collection; `None` for an engine only one client uses.
    fn board(&self) -> Option<&dyn CollectionBoard> {
        None
    }

    /// The process is done with the engine (a clean unmount): it gives up
    /// what it holds for this client, so other clients need not wait for
    /// it to lapse (on etcd: its registration, after which they purge its
    /// orphans and settle its intents at once, and `forget-client` may
    /// forget it). Best effort, logged; nothing may be asked after it.
    fn close(&self) {}
}

/// See [`MetaStore::view`].
pub trait MetaView: Send {
    fn get(&self, ino: InodeId) -> Result<Inode>;
    /// Every entry of a directory, in name order.
    fn entries(&self, dir: InodeId) -> Result<Vec<DirEntry>>;
    /// Every extended attribute of an inode, in name order.
    fn xattrs(&self, ino: InodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Every inode, in number order.
    fn for_each_inode(&self, f: &mut dyn FnMut(&Inode)) -> Result<()>;
}

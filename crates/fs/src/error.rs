//! The file system's errors and the errno each one is to a POSIX caller.

use cas::CasError;
use meta::{InodeId, MetaError};
use recipe::RecipeError;

use crate::acl;
use crate::problem::{Damage, Existing, Missing, NameProblem, PolicyProblem};

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
    /// Another client's garbage collection runs: a version or snapshot
    /// written now could name files that collection no longer marks.
    #[error("client {collector}'s garbage collection is running: versions and snapshots wait until it ends")]
    HistoryPaused { collector: u64 },
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
    /// A `user.cairn.chunking` value that does not parse.
    #[error(transparent)]
    BadChunking(#[from] crate::chunkmode::ChunkingError),
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
    /// A record of a file's intent log failed its checksum.
    #[error("inode {}: its intent log is damaged: {source}", ino.0)]
    DamagedIntent {
        ino: InodeId,
        source: crate::intent::Damaged,
    },
    /// Data waits for space when the file system stops: these files keep
    /// their last durable content (their newer writes were not stored).
    #[error("{} file(s) keep their last durable content, their newer writes were not stored: {}: {source}", files.len(), files.join(", "))]
    NotStored {
        files: Vec<String>,
        source: Box<cas::CasError>,
    },
    /// A snapshot inode past the numbers a mount can give (see
    /// [`snapview`]): a live inode at or above 2^40, or more snapshots
    /// seen by one mount than the range holds.
    #[error("inode {} of snapshot number {snapshot} has no inode number under .snapshots (remount to renumber)", ino.0)]
    SnapshotInodeRange { snapshot: u64, ino: InodeId },
    /// A `.snapshots` inode this mount no longer remembers (its entry was
    /// evicted): the kernel looks the name up again.
    #[error("inode {} under .snapshots is no longer known; look it up again", .0.0)]
    Forgotten(InodeId),
    /// A file would grow past the largest size POSIX offsets can reach.
    #[error("file too large")]
    TooBig,
    /// A restored file or directory could not be written to the host
    /// directory it was asked for (`restore --out`).
    #[error("cannot write {} outside the file system", path.display())]
    Host {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
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
            FsError::NotStored { source, .. } if source.is_no_space() => libc::ENOSPC,
            FsError::NotFile
            | FsError::BadName { .. }
            | FsError::BadPolicy(_)
            | FsError::BadChunking(_) => libc::EINVAL,
            FsError::NotSupported | FsError::BadAcl(acl::AclError::Version(_)) => libc::EOPNOTSUPP,
            FsError::BadAcl(_) => libc::EINVAL,
            FsError::DefaultAclNotDir => libc::EACCES,
            FsError::ReadOnly => libc::EROFS,
            FsError::HistoryPaused { .. } => libc::EAGAIN,
            FsError::NotFoundNamed { .. } => libc::ENOENT,
            FsError::Exists { .. } => libc::EEXIST,
            FsError::SnapshotInodeRange { .. } => libc::EOVERFLOW,
            FsError::TooBig => libc::EFBIG,
            FsError::Forgotten(_) => libc::ESTALE,
            FsError::Host { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            FsError::Store(_)
            | FsError::NotStored { .. }
            | FsError::WorkerGone(_)
            | FsError::Recipe(_)
            | FsError::Malformed { .. }
            | FsError::DirectoryCycle(_)
            | FsError::DamagedAcl { .. }
            | FsError::DamagedIntent { .. } => libc::EIO,
        }
    }
}

pub type Result<T, E = FsError> = std::result::Result<T, E>;

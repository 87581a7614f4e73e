//! Why a named thing was refused, missing, in the way or damaged: the
//! reasons [`crate::FsError`] carries beside the name or path itself, so a
//! caller can match on them and the message is written in one place.

use std::fmt;

/// Why a name or path was refused ([`crate::FsError::BadName`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    /// A snapshot name outside 1-200 bytes, `.`/`..`, or with a `/` or a
    /// control character.
    SnapshotName,
    /// A path that names the root where a name inside it is needed.
    Root,
    /// A file (not a directory) restored onto the root.
    RestoreOntoRoot,
}

impl NameProblem {
    /// The message for `name`.
    pub(crate) fn message(self, name: &str) -> String {
        match self {
            NameProblem::SnapshotName => format!(
                "invalid snapshot name {name:?}: use 1-200 bytes, no '/' or control characters"
            ),
            NameProblem::Root => format!("{name:?} names the root"),
            NameProblem::RestoreOntoRoot => {
                format!("only a directory can be restored onto the root ({name} is not one)")
            }
        }
    }
}

/// What was looked for and not found ([`crate::FsError::NotFoundNamed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The path in the live file system.
    Path,
    /// The directory that would hold the path.
    Parent,
    /// The directory that would hold a restored path.
    RestoreParent,
    /// The path inside this snapshot or version.
    InSnapshot(String),
    /// A snapshot of that name.
    Snapshot,
    /// A version of that label (`version/<n>`): dropped by retention, or
    /// never written.
    Version,
}

impl Missing {
    /// The message for `name`.
    pub(crate) fn message(&self, name: &str) -> String {
        match self {
            Missing::Path => format!("{name}: no such file or directory"),
            // A host path is the usual mistake: say what a path here is.
            Missing::Parent => format!(
                "the directory of {name} does not exist in the file system (paths are inside it: \
                 /a/b, or MOUNTPOINT/a/b while it is mounted)"
            ),
            Missing::RestoreParent => format!(
                "the directory of {name} does not exist in the file system (--to takes a path \
                 inside it: /a/b, or MOUNTPOINT/a/b while it is mounted); to write the files to \
                 a directory outside it, give --out DIR instead"
            ),
            Missing::InSnapshot(v) if v.starts_with(crate::history::VERSION_PREFIX) => {
                format!("{name} is not in {v}")
            }
            Missing::InSnapshot(snapshot) => format!("{name} is not in snapshot {snapshot:?}"),
            Missing::Snapshot => format!("no snapshot named {name:?}"),
            Missing::Version => {
                format!("no version {name}: `cairn roots` lists the versions kept")
            }
        }
    }
}

/// What already holds a name ([`crate::FsError::Exists`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// A snapshot of that name.
    Snapshot,
    /// A file or directory where a clone would put one.
    Entry,
    /// A file or directory where a restore would put one (inside the file
    /// system or in a host directory).
    Restored,
}

impl Existing {
    /// The message for `name`.
    pub(crate) fn message(self, name: &str) -> String {
        match self {
            Existing::Snapshot => format!("snapshot {name:?} exists"),
            Existing::Entry => format!("{name} exists; clone to a new name"),
            Existing::Restored => format!(
                "{name} exists; restore with --overwrite to replace files (directories are \
                 merged), or --to NEWPATH to put it elsewhere"
            ),
        }
    }
}

/// What is wrong with stored history bytes ([`crate::FsError::Malformed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    EndsEarly,
    UnknownKind,
    UnknownContentTag,
    KindContentDisagree,
    NotListing,
    NotRecord,
    TrailingBytes,
    RootNotDir,
    /// A name that is not one name (empty, `.`, `..`, or holding a `/`).
    BadEntryName,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Damage::EndsEarly => "ends early",
            Damage::UnknownKind => "unknown file kind",
            Damage::UnknownContentTag => "unknown content tag",
            Damage::KindContentDisagree => "directory kind and content disagree",
            Damage::NotListing => "not a directory listing",
            Damage::NotRecord => "not a version record",
            Damage::TrailingBytes => "trailing bytes",
            Damage::RootNotDir => "its root is not a directory",
            Damage::BadEntryName => "an entry's name is not a single name",
        })
    }
}

/// Why a redundancy policy was refused ([`crate::FsError::BadPolicy`]).
#[derive(Debug, thiserror::Error)]
pub enum PolicyProblem {
    #[error("the policy is not UTF-8 text")]
    NotUtf8,
    #[error(transparent)]
    Parse(#[from] cas::PolicyError),
    /// The store cannot keep the policy (a branch it names is missing, too
    /// few branches, no redundancy layer).
    #[error(transparent)]
    Unusable(Box<cas::CasError>),
}

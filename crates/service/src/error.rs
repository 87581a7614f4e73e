//! The one error type of the service: the layers' own errors kept whole,
//! and the service's refusals as variants with their fields.

use std::path::PathBuf;

/// The configuration file every branch change edits.
pub(crate) const CONFIG: &str = "cairn.toml";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    #[error(transparent)]
    Repo(Box<repo::RepoError>),
    #[error(transparent)]
    Fs(Box<fs::FsError>),
    #[error(transparent)]
    Cas(Box<cas::CasError>),
    #[error(transparent)]
    Recipe(Box<recipe::RecipeError>),
    #[error(transparent)]
    Meta(Box<meta::MetaError>),
    #[error(transparent)]
    Gc(Box<gc::GcError>),
    #[error(transparent)]
    Redundancy(Box<redundancy::Error>),
    #[error("cannot {what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("label {0:?} already exists (use --replace to point it at the new data)")]
    LabelExists(String),
    /// `get` of a version or snapshot: a tree of files, not one stream.
    #[error(
        "{label} is a {} of the whole file system, not a stored file: `cairn restore {label} \
         / --out DIR` writes its files into the host directory DIR (a PATH inside it instead \
         of / for part of it; --to PATH for a place inside the file system){}; see \
         docs/history.md, \"Looking at an old version\"",
        if label.starts_with(fs::history::VERSION_PREFIX) { "version" } else { "snapshot" },
        match label.strip_prefix(fs::history::SNAPSHOT_PREFIX) {
            Some(name) => format!(", or read it at MOUNTPOINT/.snapshots/{name}/"),
            None => String::new(),
        }
    )]
    NotAStream { label: String },
    #[error(
        "a restore goes to --to PATH inside the file system or to --out DIR outside it, not both"
    )]
    RestoreToAndOut,
    #[error("the caller went away before the put finished; label {0:?} not recorded")]
    CallerGone(String),
    #[error("a put or get request comes with a file descriptor")]
    NoStream,
    #[error("only scrub, gc, check and snapshot creation run as jobs")]
    NotAJob,
    #[error("a {0} job is running already; wait for it to finish")]
    JobRunning(&'static str),
    #[error("{0} jobs are running already; wait for one to finish")]
    JobsFull(usize),
    #[error("cannot duplicate the data stream")]
    Duplicate(#[source] std::io::Error),
    #[error("this request needs the file system, which was not opened")]
    NoFs,
    #[error("no file system or repository to add to")]
    NoRepository,
    #[error("no snapshot {name:?}")]
    NoSnapshot {
        name: String,
        #[source]
        source: Box<cas::CasError>,
    },
    #[error("the store holds no version of the file system to recover from")]
    NoVersion,
    #[error("this repository stores on one plain branch; it has no branches to {0}")]
    PlainRepository(&'static str),
    #[error("no branch named {0:?} is configured")]
    NoBranch(String),
    #[error("no [[branch]] named {0:?} in {CONFIG}")]
    NotInConfig(String),
    #[error("{CONFIG}: {0}")]
    BadConfig(#[source] repo::ConfigProblem),
    #[error("{CONFIG} changed while `branch add` ran; run it again")]
    ConfigChanged,
    #[error(
        "{CONFIG} no longer lists branch(es) {}, which hold data: put them back and run \
         `cairn branch remove NAME` (or `branch replace`) to move the data off first",
        .0.join(", ")
    )]
    BranchesLeftOut(Vec<String>),
    #[error("branch {name:?} was not added")]
    NotAdded {
        name: String,
        #[source]
        source: Box<ServiceError>,
    },
    #[error(
        "damage found while the file system is mounted; `cairn check --repair` changes the \
         index and the containers: unmount, then run it again"
    )]
    RepairWhileMounted,
    #[error(
        "the mounted daemon speaks control protocol {daemon}, this cairn speaks {client}; \
         restart the mount"
    )]
    ProtocolMismatch { daemon: u32, client: u32 },
    /// What the daemon answered a request with: its error, as text (errors
    /// do not travel as types over the socket).
    #[error("{0}")]
    Daemon(String),
    /// What the daemon refused a request with ([`ServiceError::is_refusal`]
    /// there), as text.
    #[error("{0}")]
    DaemonRefused(String),
    #[error("{what} on the control socket")]
    Control {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("a request on the control socket is longer than {0} bytes")]
    RequestTooLong(usize),
    #[error("malformed answer from the daemon: {line}")]
    MalformedAnswer {
        line: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the daemon answered a {got} request with a {expected} reply")]
    UnexpectedReply {
        expected: &'static str,
        got: &'static str,
    },
    #[error(
        "the repository is mounted read-only at {}: nothing can change it until that mount \
         ends (`cairn umount {}`, then mount it without --read-only)",
        mountpoint.display(), mountpoint.display()
    )]
    ReadOnlyMount { mountpoint: PathBuf },
    #[error("the daemon closed the control socket without an answer")]
    NoAnswer,
}

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

/// `?` on a layer's error boxes it: the layers' errors are large, and a
/// `Result` carries its error by value.
macro_rules! boxed_from {
    ($($variant:ident($t:ty)),* $(,)?) => {
        $(impl From<$t> for ServiceError {
            fn from(e: $t) -> Self {
                ServiceError::$variant(Box::new(e))
            }
        })*
    };
}

boxed_from! {
    Repo(repo::RepoError),
    Fs(fs::FsError),
    Cas(cas::CasError),
    Recipe(recipe::RecipeError),
    Meta(meta::MetaError),
    Gc(gc::GcError),
    Redundancy(redundancy::Error),
}

impl ServiceError {
    /// An I/O error with what was being done and to which path.
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ServiceError::Io { what, path, source }
    }

    /// Whether this is a refusal of what the caller asked (a label, path,
    /// snapshot or branch that is not there, a name taken, a config or
    /// state the request does not fit), which changed nothing: reported to
    /// the user plainly and logged as refused, not as an error of the
    /// system (the dashboard shows such a job as refused, not failed).
    /// I/O failures, damage and bugs are not refusals.
    pub fn is_refusal(&self) -> bool {
        use ServiceError as E;
        match self {
            E::LabelExists(_)
            | E::PlainRepository(_)
            | E::NoBranch(_)
            | E::NotInConfig(_)
            | E::BadConfig(_)
            | E::ConfigChanged
            | E::BranchesLeftOut(_)
            | E::NotAdded { .. }
            | E::NotAJob
            | E::JobRunning(_)
            | E::JobsFull(_)
            | E::RepairWhileMounted
            | E::ReadOnlyMount { .. }
            | E::DaemonRefused(_) => true,
            E::Repo(e) => matches!(
                **e,
                repo::RepoError::NotARepo(_)
                    | repo::RepoError::AlreadyExists(_)
                    | repo::RepoError::ConfigExists(_)
                    | repo::RepoError::Locked { .. }
                    | repo::RepoError::Disagrees { .. }
                    | repo::RepoError::KeyMismatch(_)
                    | repo::RepoError::NotAKey(_)
            ),
            E::Cas(e) | E::NoSnapshot { source: e, .. } => cas_refusal(e),
            E::Fs(e) => match &**e {
                fs::FsError::Meta(m) => meta_refusal(m),
                fs::FsError::Store(c) => cas_refusal(c),
                fs::FsError::NotFile
                | fs::FsError::ReadOnly
                | fs::FsError::BadName { .. }
                | fs::FsError::NotFoundNamed { .. }
                | fs::FsError::Exists { .. }
                | fs::FsError::BadPolicy(_)
                | fs::FsError::BadChunking(_)
                | fs::FsError::HistoryPaused { .. } => true,
                _ => false,
            },
            E::Meta(e) => meta_refusal(e),
            E::Gc(e) => matches!(
                **e,
                gc::GcError::BadThreshold(_)
                    | gc::GcError::BadMaxGarbage(_)
                    | gc::GcError::OtherCollecting { .. }
            ),
            _ => false,
        }
    }

    /// The error and its causes on one line, each cause once (many errors
    /// repeat their source in their own message): what the daemon sends.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            let cause = s.to_string();
            if !text.contains(&cause) {
                text = format!("{text}: {cause}");
            }
            source = s.source();
        }
        text
    }
}

fn cas_refusal(e: &cas::CasError) -> bool {
    matches!(
        e,
        cas::CasError::NoSuchRoot(_)
            | cas::CasError::BadLabel(_)
            | cas::CasError::CollectionRunning
    )
}

fn meta_refusal(e: &meta::MetaError) -> bool {
    use meta::MetaError as M;
    matches!(
        e,
        M::NotFound | M::Exists | M::NotEmpty | M::NotDir | M::IsDir | M::NameTooLong
    )
}

impl From<nix::Error> for ServiceError {
    fn from(e: nix::Error) -> Self {
        ServiceError::Control {
            what: "passing a descriptor",
            source: e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_argument_is_a_refusal_and_a_broken_store_is_not() {
        let bad_name = ServiceError::from(fs::FsError::BadName {
            name: "a/b".into(),
            reason: fs::problem::NameProblem::SnapshotName,
        });
        assert!(bad_name.is_refusal());
        assert!(ServiceError::from(gc::GcError::BadThreshold(7.0)).is_refusal());
        assert!(ServiceError::JobRunning("scrub").is_refusal());
        assert!(!ServiceError::from(fs::FsError::WorkerGone("apply")).is_refusal());
        assert!(!ServiceError::NoAnswer.is_refusal());
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let e = ServiceError::NotAdded {
            name: "b".into(),
            source: Box::new(ServiceError::Io {
                what: "read",
                path: "/r/cairn.toml".into(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
            }),
        };
        assert_eq!(
            e.chain(),
            "branch \"b\" was not added: cannot read /r/cairn.toml: gone"
        );
        // A source the message already says is not repeated.
        let e = ServiceError::Cas(Box::new(cas::CasError::UnknownChunk(
            cas::ChunkId::from_bytes([7; 32]),
        )));
        assert_eq!(e.chain(), e.to_string());
    }
}

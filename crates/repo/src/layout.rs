use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::fs::rules::{Rule, Rules};
use branch::{Branch, ChunkdBranch, ChunkdConfig, LocalDir, S3Bucket, S3Config};
use cas::{Protection, RepoKey, Store};
use redundancy::{Discovery, Redundant};

use crate::config::{
    BranchSpec, Config, ConfigError, Location, RedundancyConfig, RuleSpec, DEFAULT_TOML,
};
use crate::lock::{locked_message, Holder, RepoLock};
use crate::record::{self, Disagreement, Probed, Record};

pub(crate) const CONFIG: &str = "cairn.toml";
pub(crate) const KEY: &str = "key";
const META: &str = "meta";
const LOCAL_BRANCH: &str = "branches/local";

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("no cairn repository at {} (create one with `cairn init`)", .0.display())]
    NotARepo(PathBuf),
    #[error("a cairn repository already exists at {}", .0.display())]
    AlreadyExists(PathBuf),
    /// Metadata or containers are there but `cairn.toml` is not: a
    /// repository that lost its config, not an empty directory.
    #[error(
        "the cairn repository at {} has lost its config file cairn.toml (its key, metadata or \
         data are still there); restore cairn.toml from a backup, or write it back from the \
         repository's record with `cairn config recover`. Nothing was changed, and \
         `cairn init` will not create a new repository over this one",
        .0.display()
    )]
    ConfigMissing(PathBuf),
    /// `cairn.toml` disagrees with the branches the repository recorded;
    /// nothing was opened or written.
    #[error(
        "{} disagrees with what the repository recorded of its branches:{}\n\
         Nothing was opened or written. If cairn.toml was damaged or edited by mistake, \
         `cairn config recover --force` writes the recorded one back (keeping this one as \
         cairn.toml.old); to drop a branch that holds data, put it back and run `cairn branch \
         remove NAME` or `cairn branch replace OLD NEW`",
        config.display(),
        record::list(differences)
    )]
    Disagrees {
        config: PathBuf,
        differences: Vec<Disagreement>,
    },
    /// The repository's record of itself cannot be read.
    #[error(
        "the repository's record {} is damaged ({reason}); restore it from a backup, or remove \
         it: the next command records the current cairn.toml again, checking each branch's \
         marker",
        path.display()
    )]
    RecordDamaged { path: PathBuf, reason: String },
    /// There is no record to recover the config or check a key with.
    #[error(
        "the repository has no record of its configuration and key ({} is missing: it was last \
         used by an older cairn, or its meta directory was lost); restore the file from a backup",
        .0.display()
    )]
    NoRecord(PathBuf),
    #[error(
        "{} exists; give --force to replace it with the recorded one (it is kept as \
         cairn.toml.old)",
        .0.display()
    )]
    ConfigExists(PathBuf),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `init --join` was asked for a repository whose file system cannot
    /// be shared by clients; nothing was written.
    #[error(
        "the repository at {} cannot be joined by another client: {problem} (see docs/cluster.md)",
        other.display()
    )]
    JoinRefused {
        other: PathBuf,
        problem: crate::join::JoinProblem,
    },
    /// Two joins registered one client number at once on a store that
    /// does not refuse to replace a blob, and the other's registration
    /// stands: this repository must not write.
    #[error(
        "client number {client} is registered to another repository ({holder}), whose join \
         replaced this one's registration: nothing was written; remove this repository and \
         join again (`cairn init --join`)"
    )]
    ClientClaimedElsewhere {
        client: cas::ClientNo,
        holder: String,
    },
    #[error(
        "the repository key {} is missing or damaged; without it no chunk can be read or \
         verified: restore the key file from your backup with `cairn key import FILE` (a file \
         written by `cairn key export`, or a copy of the key file)",
        .0.display()
    )]
    Key(PathBuf),
    /// The key file holds a key, but not this repository's.
    #[error(
        "the key in {} is not this repository's key (its check value differs from the one in \
         {}); nothing was read or written: restore the right key with `cairn key import FILE`",
        key.display(),
        record.display()
    )]
    WrongKey { key: PathBuf, record: PathBuf },
    #[error(
        "{} holds a key, but not this repository's (its check value differs); nothing was \
         changed",
        .0.display()
    )]
    KeyMismatch(PathBuf),
    #[error(
        "{} does not hold a cairn key (64 hexadecimal digits, as `cairn key export` writes)",
        .0.display()
    )]
    NotAKey(PathBuf),
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Branch(#[from] branch::BranchError),
    /// `[shared_index]` names a chunkd index this repository cannot use.
    #[error("[shared_index] in cairn.toml: {source}")]
    SharedIndex {
        #[source]
        source: chunkd::ClientError,
    },
    #[error(transparent)]
    Store(#[from] cas::CasError),
    #[error(transparent)]
    Meta(#[from] meta::MetaError),
    #[error(transparent)]
    Fs(#[from] ::fs::FsError),
    #[error(
        "the file system's metadata engine at {} is damaged or missing ({reason}); \
         run `cairn recover` to rebuild it from the latest version in the store",
        path.display()
    )]
    MetaDamaged { path: PathBuf, reason: String },
    /// The namespace is kept by a metadata engine elsewhere (etcd): the
    /// local one is not the file system, and a command that read it (a
    /// `gc` would collect every chunk of the real one) is refused.
    #[error(
        "this repository's file system keeps its metadata in {url} (recorded in {}): mount it \
         with `cairn mount --meta {url}` and run commands while it is mounted",
        path.display()
    )]
    MetaRemote { url: String, path: PathBuf },
    /// A mount asked for a metadata engine other than the recorded one.
    #[error(
        "this repository's file system keeps its metadata in {recorded} (recorded in {}), not \
         in {asked}",
        path.display()
    )]
    MetaRemoteDiffers {
        recorded: String,
        asked: String,
        path: PathBuf,
    },
    #[error("{}: {reason}", path.display())]
    Redundancy { path: PathBuf, reason: String },
    /// Branches are configured, but the plain local branch already holds
    /// containers, which branches would hide.
    #[error(
        "{}: [[branch]] entries are configured, but this repository already stores data on its \
         plain branch {}; converting a plain repository is not supported (create a new \
         repository with branches and copy the files over)",
        config.display(),
        branch.display()
    )]
    PlainDataHeld { config: PathBuf, branch: PathBuf },
    /// Another process holds the repository's lock; nothing was touched.
    #[error("{}", locked_message(root, holder))]
    Locked {
        root: PathBuf,
        holder: Option<Holder>,
    },
}

type Result<T> = std::result::Result<T, RepoError>;

pub(crate) fn io<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> RepoError + 'a {
    move |source| RepoError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Where a repository lives when none is named: `$XDG_DATA_HOME/cairn`
/// (usually `~/.local/share/cairn`).
pub fn default_location() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("cairn")
}

/// An open repository. It holds the repository's lock until dropped: keep
/// it for as long as its store or file system is in use.
pub struct Repo {
    pub root: PathBuf,
    pub config: Config,
    pub store: Store,
    /// Half-written containers an interrupted write left, discarded on open.
    pub discarded_partials: usize,
    /// Which protection each file's data gets.
    pub rules: Rules,
    /// What opening found on the branches, when they are configured.
    pub discovery: Option<Discovery>,
    /// The key's check value: the repository's identity on its branches.
    key_check: String,
    /// Declared last so that it is released after the store is closed.
    lock: Arc<RepoLock>,
}

/// An index that could not be opened, moved aside by
/// [`Repo::open_for_rebuild`].
#[derive(Debug)]
pub struct IndexSetAside {
    pub path: PathBuf,
    pub aside: PathBuf,
    pub reason: String,
}

impl Repo {
    pub fn exists(root: &Path) -> bool {
        root.join(CONFIG).is_file()
    }

    /// Where the repository's key is: without it nothing stored can be
    /// read, so it must be backed up.
    pub fn key_path(root: &Path) -> PathBuf {
        root.join(KEY)
    }

    /// Whether `root` holds a repository's data without its config: a
    /// metadata database or a container on a local branch.
    pub(crate) fn holds_data(root: &Path) -> bool {
        let has_file = |dir: &Path, keep: &dyn Fn(&Path) -> bool| {
            fs::read_dir(dir).is_ok_and(|d| d.flatten().any(|e| keep(&e.path())))
        };
        let meta = has_file(&root.join(META), &|p| {
            p.extension().is_some_and(|x| x == "redb")
        });
        let containers = fs::read_dir(root.join("branches")).is_ok_and(|d| {
            d.flatten().any(|b| {
                let prefix = b.path().join(cas::ContainerId::list_prefix());
                has_file(&prefix, &|_| true)
            })
        });
        meta || containers
    }

    /// `NotARepo`, or `ConfigMissing` where the data is there.
    fn missing(root: &Path) -> RepoError {
        if Self::holds_data(root) {
            RepoError::ConfigMissing(root.to_path_buf())
        } else {
            RepoError::NotARepo(root.to_path_buf())
        }
    }

    /// Creates a repository with default settings. The config file is
    /// written last: a directory without it is not a repository yet, so an
    /// interrupted init can simply be run again.
    pub fn init(root: &Path) -> Result<()> {
        if Self::exists(root) {
            return Err(RepoError::AlreadyExists(root.to_path_buf()));
        }
        if Self::holds_data(root) {
            return Err(RepoError::ConfigMissing(root.to_path_buf()));
        }
        fs::create_dir_all(root).map_err(io("create directory", root))?;
        let _lock = RepoLock::acquire(root)?;
        // Another init may have finished while this one waited for nothing.
        if Self::exists(root) {
            return Err(RepoError::AlreadyExists(root.to_path_buf()));
        }
        for dir in [META, LOCAL_BRANCH] {
            let p = root.join(dir);
            fs::create_dir_all(&p).map_err(io("create directory", &p))?;
        }
        let key_path = root.join(KEY);
        if !key_path.exists() {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&key_path)
                .map_err(io("create", &key_path))?;
            writeln!(f, "{}", RepoKey::generate().to_hex()).map_err(io("write", &key_path))?;
            f.sync_all().map_err(io("sync", &key_path))?;
        }
        let check = record::key_check(&crate::keyfile::read(root)?);
        let defaults = Config::parse(DEFAULT_TOML).expect("the default config parses");
        Record::of(root, &check, &defaults, DEFAULT_TOML).save(root)?;
        let config = root.join(CONFIG);
        let tmp = root.join(".cairn.toml.new");
        fs::write(&tmp, DEFAULT_TOML).map_err(io("write", &tmp))?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io("sync", &tmp))?;
        fs::rename(&tmp, &config).map_err(io("create", &config))?;
        fs::File::open(root)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", root))?;
        Ok(())
    }

    /// Opens a repository: takes its lock ([`RepoError::Locked`] if
    /// another process holds it, before anything is touched), reads its
    /// config and key, discards partial containers left by a crash, and
    /// opens the store. An index that does not match the containers (an
    /// empty or old `index.redb`) is refused with the command that
    /// rebuilds it ([`cas::CasError::IndexMismatch`]).
    pub fn open(root: &Path) -> Result<Repo> {
        let repo = Self::open_to_check(root)?;
        if let Err(e) = repo.store.verify_index() {
            // The whole metadata directory lost: `recover` rebuilds both
            // (metadata kept elsewhere, in etcd, has no file here).
            let path = repo.fs_meta_path();
            let versions = repo
                .store
                .list_roots()?
                .iter()
                .any(|(l, _)| l.starts_with(::fs::history::VERSION_PREFIX));
            if !path.exists() && versions && repo.remote_meta()?.is_none() {
                return Err(RepoError::MetaDamaged {
                    path,
                    reason: format!("it is missing, and so is the index's content: {e}"),
                });
            }
            return Err(e.into());
        }
        Ok(repo)
    }

    /// [`Repo::open`] that accepts an index not matching the containers:
    /// for `cairn check`, which reports it, and its repair, which
    /// rebuilds it.
    pub fn open_to_check(root: &Path) -> Result<Repo> {
        if !Self::exists(root) {
            return Err(Self::missing(root));
        }
        let lock = Arc::new(RepoLock::acquire(root)?);
        Self::open_locked(root, &lock)
    }

    /// [`Repo::open`] for rebuilding the fingerprint index: an index that
    /// cannot be opened (it is derived data) is moved aside, under the
    /// lock, and a fresh one is opened in its place.
    pub fn open_for_rebuild(root: &Path) -> Result<(Repo, Option<IndexSetAside>)> {
        if !Self::exists(root) {
            return Err(Self::missing(root));
        }
        let lock = Arc::new(RepoLock::acquire(root)?);
        match Self::open_locked(root, &lock) {
            Err(RepoError::Store(cas::CasError::IndexOpen { path, source })) => {
                let aside = Self::set_aside(&path)?;
                let repo = Self::open_locked(root, &lock)?;
                let set_aside = IndexSetAside {
                    path,
                    aside,
                    reason: source.to_string(),
                };
                Ok((repo, Some(set_aside)))
            }
            other => Ok((other?, None)),
        }
    }

    /// Moves a damaged database file (the index, the metadata engine) aside
    /// as `NAME.redb.damaged`, replacing an older one, so that a fresh one
    /// can be built in its place; returns where it went. The one way cairn
    /// sets a file aside: under the repository's lock, never deleting it.
    pub fn set_aside(path: &Path) -> Result<PathBuf> {
        let aside = path.with_extension("redb.damaged");
        fs::rename(path, &aside).map_err(io("move the damaged file aside", path))?;
        Ok(aside)
    }

    /// Records that this process has the file system mounted at
    /// `mountpoint`, so that a process the lock turns away can say where.
    pub fn announce_mount(&self, mountpoint: &Path) -> Result<()> {
        self.lock.announce_mount(mountpoint)
    }

    /// Records how this process's unmount went, for `cairn umount`
    /// ([`crate::last_unmount`]).
    pub fn record_unmount(&self, outcome: std::result::Result<(), &str>) -> Result<()> {
        self.lock.record_unmount(outcome)
    }

    /// Checks that `config`'s branches open and its rules fit them, as the
    /// next open will need (an unreachable bucket, a plain repository that
    /// holds data ...). Holding this repository proves the lock is held.
    pub fn validate(&self, config: &Config) -> Result<()> {
        let Some(redundancy) = &config.redundancy else {
            return Ok(());
        };
        if self.store.layer().is_plain() {
            refuse_plain_data(&self.root)?;
        }
        let record = Record::load(&self.root)?;
        let ((layer, _), _) =
            open_branches(&self.root, redundancy, record.as_ref(), &self.key_check)?;
        compile_rules(&self.root, &layer, redundancy)?;
        Ok(())
    }

    /// Opens under the held lock. The config is checked against the
    /// repository's record (and each branch's marker) and the key against
    /// its check value before anything is written; once it agrees, it is
    /// recorded.
    fn open_locked(root: &Path, lock: &Arc<RepoLock>) -> Result<Repo> {
        let (mut config, text) = Config::load_with_text(&root.join(CONFIG))?;
        config.store.client = crate::join::client_of(root)?;
        let key = crate::keyfile::read(root)?;
        let record = Record::load(root)?;
        let key_check = record::key_check(&key);
        crate::keyfile::verify(root, record.as_ref(), &key_check)?;
        let accepted = Record::of(root, &key_check, &config, &text);
        let meta = root.join(META);
        let Some(redundancy) = &config.redundancy else {
            let differences = record::disagreements(root, record.as_ref(), &key_check, None, &[]);
            record::refuse(root, differences)?;
            accepted.save_if_changed(root, record.as_ref())?;
            let (branch, discarded_partials) = LocalDir::open("local", root.join(LOCAL_BRANCH))?;
            fs::create_dir_all(&meta).map_err(io("create directory", &meta))?;
            let store = Store::open(Arc::new(branch), &meta, key, config.store)?;
            let rules = Rules::new(Vec::new(), Protection::plain());
            return Ok(Repo {
                root: root.to_path_buf(),
                config,
                store,
                discarded_partials,
                rules,
                discovery: None,
                key_check,
                lock: lock.clone(),
            });
        };
        refuse_plain_data(root)?;
        let (layer, discarded_partials) =
            open_branches(root, redundancy, record.as_ref(), &key_check)?;
        accepted.save_if_changed(root, record.as_ref())?;
        let (layer, discovery) = (Arc::new(layer.0), layer.1);
        let rules = compile_rules(root, &layer, redundancy)?;
        let default = rules.default_protection().clone();
        fs::create_dir_all(&meta).map_err(io("create directory", &meta))?;
        let store = Store::open_redundant(layer, default, &meta, key, config.store)?;
        crate::join::verify_claim(root, &store)?;
        Ok(Repo {
            root: root.to_path_buf(),
            config,
            store,
            discarded_partials,
            rules,
            discovery: Some(discovery),
            key_check,
            lock: lock.clone(),
        })
    }

    /// The file system's metadata engine.
    pub fn fs_meta_path(&self) -> PathBuf {
        self.root.join(META).join("fs.redb")
    }

    /// Where the URL of a metadata engine kept elsewhere is recorded.
    pub fn remote_meta_path(&self) -> PathBuf {
        self.root.join(META).join("remote")
    }

    /// The recorded URL of the metadata engine kept elsewhere, if any.
    pub fn remote_meta(&self) -> Result<Option<String>> {
        let path = self.remote_meta_path();
        match fs::read_to_string(&path) {
            Ok(url) => Ok(Some(url.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path)(e)),
        }
    }

    /// Opens the repository's file system over `meta`, a metadata engine
    /// kept elsewhere at `url` (etcd): chunks stay in this repository (and
    /// on branches other client repositories may share, `docs/cluster.md`:
    /// the store then finds their chunks on the branches, and the file
    /// system records a file only once its chunks are durable).
    /// The first time, `url` is recorded (durably, before anything is
    /// written), and from then on the local engine is refused
    /// ([`RepoError::MetaRemote`]) and so is another URL.
    pub fn open_fs_on(&self, meta: Arc<dyn meta::MetaStore>, url: &str) -> Result<::fs::Fs> {
        let path = self.remote_meta_path();
        match self.remote_meta()? {
            Some(recorded) if recorded != url => {
                return Err(RepoError::MetaRemoteDiffers {
                    recorded,
                    asked: url.to_string(),
                    path,
                })
            }
            Some(_) => {}
            None => {
                let tmp = self.root.join(META).join(".remote.new");
                fs::write(&tmp, format!("{url}\n")).map_err(io("write", &tmp))?;
                fs::File::open(&tmp)
                    .and_then(|f| f.sync_all())
                    .map_err(io("sync", &tmp))?;
                fs::rename(&tmp, &path).map_err(io("create", &path))?;
                let dir = self.root.join(META);
                fs::File::open(&dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io("sync", &dir))?;
            }
        }
        // Other clients may share the file system: chunks they stored
        // are found through the shared index, and records are made
        // close-to-open.
        self.store.set_shared_index(self.shared_index()?);
        self.fs_over(meta, true)
    }

    /// The shared index `cairn.toml` names, or the catch-up over the
    /// branches. An index service that cannot be reached now (etcd down,
    /// no range table) leaves the catch-up, with a warning: it costs
    /// listings, never data; an unreadable token file is refused.
    fn shared_index(&self) -> Result<Arc<dyn cas::SharedIndex>> {
        let catch_up = cas::CatchUp::new(&self.store);
        let Some(spec) = &self.config.shared_index else {
            return Ok(catch_up);
        };
        let config = chunkd::ClientConfig::new(
            spec.etcd.clone(),
            spec.fsid.clone(),
            self.root.join(&spec.token_file),
        );
        match chunkd::IndexClient::connect(&config) {
            Ok(client) => Ok(crate::shared_index::ChunkdIndex::new(client, catch_up)),
            Err(source @ chunkd::ClientError::Token { .. }) => {
                Err(RepoError::SharedIndex { source })
            }
            Err(e) => {
                tracing::warn!(fsid = %spec.fsid, error = %e, "the chunkd index cannot be reached; other clients' chunks are found by listing the branches until the next mount");
                Ok(catch_up)
            }
        }
    }

    /// Opens the repository's file system (its metadata engine, created on
    /// first use with a root directory owned by `uid`/`gid`), refused as
    /// [`Repo::open_meta`] refuses.
    pub fn open_fs(&self, uid: u32, gid: u32) -> Result<::fs::Fs> {
        let meta = self.open_meta(uid, gid)?;
        self.fs_over(Arc::new(meta), false)
    }

    fn fs_over(&self, meta: Arc<dyn meta::MetaStore>, shared: bool) -> Result<::fs::Fs> {
        let mut rules = self.rules.clone();
        if let Some(specs) = &self.config.chunking_rules {
            let chunking = specs
                .iter()
                .map(|s| s.rule().map_err(|e| refused(&self.root, e.to_string())))
                .collect::<Result<Vec<_>>>()?;
            rules = rules.with_chunking(chunking);
        }
        let settings = ::fs::FsSettings {
            close_to_open: shared,
            ..self.config.fs.clone()
        };
        Ok(::fs::Fs::with_rules(
            meta,
            self.store.clone(),
            self.config.chunking,
            settings,
            rules,
        )?)
    }

    /// Opens the file system's metadata engine (created on first use).
    /// Refused when the file system keeps its metadata elsewhere
    /// ([`RepoError::MetaRemote`], see [`Repo::open_fs_on`]).
    ///
    /// While the store holds versions, an engine that cannot be the file
    /// system they describe is [`RepoError::MetaDamaged`], before anything
    /// is written to it: one that is missing, empty (zero bytes), damaged,
    /// or whose namespace is empty while the newest version holds files.
    /// Mounting an empty tree over a store full of history would hide it,
    /// and retention would then drop the versions that are its only copy.
    pub fn open_meta(&self, uid: u32, gid: u32) -> Result<meta::RedbMeta> {
        if let Some(url) = self.remote_meta()? {
            return Err(RepoError::MetaRemote {
                url,
                path: self.remote_meta_path(),
            });
        }
        let path = self.fs_meta_path();
        let damaged = |reason: String| RepoError::MetaDamaged {
            path: path.clone(),
            reason,
        };
        let newest = self
            .store
            .list_roots()?
            .into_iter()
            .filter_map(|(l, id)| {
                let n: u64 = l
                    .strip_prefix(::fs::history::VERSION_PREFIX)?
                    .parse()
                    .ok()?;
                Some((n, id))
            })
            .max_by_key(|(n, _)| *n);
        if newest.is_some() {
            match fs::metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(damaged(
                        "it is missing, and the store holds versions".into(),
                    ));
                }
                Ok(m) if m.len() == 0 => {
                    return Err(damaged(
                        "it is empty (zero bytes), and the store holds versions".into(),
                    ));
                }
                _ => {}
            }
        }
        let meta = match meta::RedbMeta::open_cached(&path, uid, gid, self.config.metadata_cache) {
            Ok(m) => m,
            // A full disk or a permission problem is not damage: `recover`
            // would not help, and the file may be perfectly sound.
            Err(e) if !e.is_damage() => return Err(e.into()),
            Err(e) => return Err(damaged(e.to_string())),
        };
        if let Some((n, id)) = newest {
            use meta::MetaStore;
            let empty = meta.readdir(meta::InodeId::ROOT, None, 1)?.is_empty();
            // An unreadable version is `check`'s to report; it proves
            // nothing about the engine.
            if let (true, Ok(r)) = (empty, ::fs::tree::read_record(&self.store, &id)) {
                if r.files > 0 || r.dirs > 1 {
                    return Err(damaged(format!(
                        "its file system is empty, while the newest version (version/{n}) \
                         holds {} files and {} directories",
                        r.files,
                        r.dirs.saturating_sub(1)
                    )));
                }
            }
        }
        Ok(meta)
    }
}

/// Opens every configured branch and learns what they hold. First each is
/// looked at without writing anything (an unreachable bucket is refused
/// here) and checked against `record`; then they are opened, and a branch
/// without a marker gets one. Returns the layer with its discovery, and
/// the partial blobs local branches discarded.
fn open_branches(
    root: &Path,
    config: &RedundancyConfig,
    record: Option<&Record>,
    key_check: &str,
) -> Result<((Redundant, Discovery), usize)> {
    let probed = config
        .branches
        .iter()
        .map(|spec| record::probe(root, record, spec))
        .collect::<Result<Vec<Probed>>>()?;
    let differences =
        record::disagreements(root, record, key_check, Some(&config.branches), &probed);
    record::refuse(root, differences)?;
    let mut branches: Vec<Arc<dyn Branch>> = Vec::new();
    let mut discarded = 0;
    for p in probed {
        let branch = match p.opened.clone() {
            Some(b) => b,
            None => {
                let (b, n) = open_branch(root, &p.spec)?;
                discarded += n;
                b
            }
        };
        if !p.has_marker() && p.unreachable.is_none() {
            record::mark(branch.as_ref(), &p.spec.name, key_check);
        }
        branches.push(branch);
    }
    let opened = Redundant::open(branches).map_err(|e| refused(root, e.to_string()))?;
    Ok((opened, discarded))
}

/// Opens one configured branch; returns it with the partial blobs a local
/// branch discarded.
pub(crate) fn open_branch(root: &Path, spec: &BranchSpec) -> Result<(Arc<dyn Branch>, usize)> {
    Ok(match &spec.location {
        Location::Local(path) => {
            let (b, n) = LocalDir::open(spec.name.clone(), root.join(path))?;
            (Arc::new(b), n)
        }
        Location::S3(s) => (
            Arc::new(S3Bucket::open(spec.name.clone(), &s3_config(s))?),
            0,
        ),
        Location::Chunkd(c) => (
            Arc::new(ChunkdBranch::open(
                spec.name.clone(),
                &chunkd_config(root, c),
            )?),
            0,
        ),
    })
}

/// Opens a configured bucket without asking its server anything, for a
/// branch the repository already stores data on that does not answer now.
pub(crate) fn open_unreachable(root: &Path, spec: &BranchSpec) -> Result<Option<Arc<dyn Branch>>> {
    Ok(match &spec.location {
        Location::Local(_) => None,
        Location::S3(s) => Some(Arc::new(S3Bucket::open_unprobed(
            spec.name.clone(),
            &s3_config(s),
        )?)),
        Location::Chunkd(c) => Some(Arc::new(ChunkdBranch::open_unprobed(
            spec.name.clone(),
            &chunkd_config(root, c),
        )?)),
    })
}

fn chunkd_config(root: &Path, c: &crate::config::ChunkdLocation) -> ChunkdConfig {
    ChunkdConfig::new(c.url.clone(), root.join(&c.token_file))
}

fn s3_config(s: &crate::config::S3Location) -> S3Config {
    let mut c = S3Config::new(
        s.endpoint.clone(),
        s.bucket.clone(),
        s.access_key_id.clone(),
        s.secret_access_key.clone(),
    );
    c.region = s.region.clone();
    c
}

/// The rules of `config` over `layer`'s branches, each checked to fit.
pub(crate) fn compile_rules(
    root: &Path,
    layer: &Redundant,
    config: &RedundancyConfig,
) -> Result<Rules> {
    let protection = |spec: &RuleSpec| -> Result<Protection> {
        let branches = spec
            .branches
            .iter()
            .map(|n| {
                layer.branch_id(n).ok_or_else(|| {
                    refused(
                        root,
                        format!("rule {:?}: no branch {n:?} is open", spec.name),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let p = Protection {
            policy: spec.policy.clone(),
            branches,
        };
        layer
            .validate(&p.policy, &p.branches)
            .map_err(|e| refused(root, format!("rule {:?}: {e}", spec.name)))?;
        Ok(p)
    };
    let mut rules = Vec::new();
    for spec in &config.rules {
        rules.push(Rule {
            name: spec.name.clone(),
            matcher: spec.matcher().map_err(|e| refused(root, e.to_string()))?,
            protection: protection(spec)?,
        });
    }
    Ok(Rules::new(rules, protection(&config.default)?))
}

/// A configuration the redundancy layer cannot take, with why.
pub(crate) fn refused(root: &Path, reason: String) -> RepoError {
    RepoError::Redundancy {
        path: root.join(CONFIG),
        reason,
    }
}

/// Containers already on the plain local branch would vanish from view if
/// branches took over: such a repository keeps its plain layout.
fn refuse_plain_data(root: &Path) -> Result<()> {
    let plain = root
        .join(LOCAL_BRANCH)
        .join(cas::ContainerId::list_prefix());
    let holds = fs::read_dir(&plain).is_ok_and(|mut d| d.next().is_some());
    if holds {
        return Err(RepoError::PlainDataHeld {
            config: root.join(CONFIG),
            branch: root.join(LOCAL_BRANCH),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_open_and_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        assert!(matches!(Repo::open(&root), Err(RepoError::NotARepo(_))));
        Repo::init(&root).unwrap();
        assert!(matches!(
            Repo::init(&root),
            Err(RepoError::AlreadyExists(_))
        ));
        drop(Repo::open(&root).unwrap());
        fs::write(root.join(CONFIG), "[chunking]\nbogus = 1\n").unwrap();
        let e = Repo::open(&root).err().unwrap().to_string();
        assert!(
            e.contains("cairn.toml") && e.contains("bogus") && e.contains("line 2"),
            "{e}"
        );
        fs::write(root.join(CONFIG), DEFAULT_TOML).unwrap();
        fs::write(root.join(KEY), "not hex").unwrap();
        let e = Repo::open(&root).err().unwrap();
        assert!(matches!(e, RepoError::Key(_)), "{e}");
        assert!(e.to_string().contains("restore the key file"), "{e}");
    }

    #[test]
    fn a_lost_config_is_named_and_init_does_not_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        Repo::init(&root).unwrap();
        {
            let repo = Repo::open(&root).unwrap();
            let mut w = repo.store.stream();
            w.write_chunk(bytes::Bytes::from(vec![7u8; 5000])).unwrap();
            w.flush().unwrap();
        }
        fs::remove_file(root.join(CONFIG)).unwrap();
        let e = Repo::open(&root).err().unwrap();
        assert!(matches!(e, RepoError::ConfigMissing(_)), "{e}");
        assert!(e.to_string().contains("restore cairn.toml"), "{e}");
        let key = fs::read(root.join(KEY)).unwrap();
        let e = Repo::init(&root).err().unwrap();
        assert!(matches!(e, RepoError::ConfigMissing(_)), "{e}");
        assert_eq!(fs::read(root.join(KEY)).unwrap(), key);
        assert!(!root.join(CONFIG).exists());
        // An init cut short (no data yet) can still be run again.
        let fresh = dir.path().join("fresh");
        fs::create_dir_all(fresh.join(META)).unwrap();
        Repo::init(&fresh).unwrap();
    }

    #[test]
    fn a_second_open_is_turned_away_and_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        Repo::init(&root).unwrap();
        let held = Repo::open(&root).unwrap();
        held.announce_mount(Path::new("/mnt/somewhere")).unwrap();
        // A container in flight, as the holder's branch stages it.
        let partial = root.join(LOCAL_BRANCH).join(".partial").join("c-in-flight");
        fs::write(&partial, b"half a container").unwrap();
        let config = fs::read(root.join(CONFIG)).unwrap();

        let e = Repo::open(&root).err().expect("the lock is held");
        let RepoError::Locked { holder, .. } = &e else {
            panic!("expected Locked, got {e}");
        };
        let holder = holder.as_ref().expect("the holder recorded itself");
        assert_eq!(holder.pid, std::process::id());
        let text = e.to_string();
        assert!(
            text.contains("mounted at /mnt/somewhere") && text.contains("cairn umount"),
            "{text}"
        );
        assert!(matches!(
            Repo::open_for_rebuild(&root),
            Err(RepoError::Locked { .. })
        ));
        assert!(
            partial.exists(),
            "a refused open discarded a partial container"
        );
        assert_eq!(fs::read(root.join(CONFIG)).unwrap(), config);

        drop(held);
        assert!(
            crate::holder_of(&root).is_none(),
            "the record goes with the lock"
        );
        let reopened = Repo::open(&root).unwrap();
        assert_eq!(reopened.discarded_partials, 1);
    }
}

//! Running a [`Request`]: against a file system or a store ([`exec`]), and
//! through the daemon serving a repository or on the repository opened
//! here ([`call`]).

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs::Fs;
use repo::{Repo, RepoError};

use crate::request::{Deleted, GetOut, PutOut, Removed, Reply, Request, RootKind, StorageReads};
use crate::{branches, check, control, open, redundancy, Progress, Result, ServiceError};

/// What a request runs against.
pub struct Target<'a> {
    pub store: &'a cas::Store,
    /// The file system, for requests that need it ([`Request::needs_fs`]).
    pub fs: Option<&'a Fs>,
    pub chunking: chunking::ChunkerParams,
    /// The repository's root directory.
    pub root: &'a Path,
    /// Where the file system is mounted: absolute paths under it are taken
    /// relative to it.
    pub mountpoint: Option<&'a Path>,
    /// The repository opened by this process (no daemon serves it).
    pub repo: Option<&'a Repo>,
}

impl Target<'_> {
    /// A path inside the file system: as given, or with the mount point
    /// stripped from an absolute path under it.
    fn inside(&self, path: &str) -> String {
        if let Some(m) = self.mountpoint {
            if let Ok(rest) = Path::new(path).strip_prefix(m) {
                return format!("/{}", rest.display());
            }
        }
        path.to_string()
    }

    pub(crate) fn fs(&self) -> Result<&Fs> {
        self.fs.ok_or(ServiceError::NoFs)
    }
}

fn put(
    t: &Target<'_>,
    name: &str,
    replace: bool,
    input: File,
    progress: &dyn Progress,
) -> Result<PutOut> {
    let store = t.store;
    if !replace && store.get_root(name).is_ok() {
        return Err(ServiceError::LabelExists(name.to_string()));
    }
    let total = input
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.len());
    let report = |done| progress.step("put", done, total);
    let stored = recipe::store_stream(store, input, t.chunking, &report)?;
    // A caller that went away (Ctrl-C on `tar c | cairn put -`) may have
    // cut the stream short: its label is not recorded.
    if progress.cancelled() {
        return Err(ServiceError::CallerGone(name.to_string()));
    }
    store.put_root(name, &stored.root)?;
    let s = stored.stats;
    Ok(PutOut {
        len: stored.len,
        chunks: s.chunks,
        new_chunks: s.new_chunks,
        new_bytes: s.new_bytes,
        stored_bytes: s.stored_bytes,
    })
}

fn get(t: &Target<'_>, label: &str, mut out: File, progress: &dyn Progress) -> Result<GetOut> {
    let root = t.store.get_root(label)?;
    if RootKind::of(label) != RootKind::Stream {
        return Err(ServiceError::NotAStream {
            label: label.to_owned(),
        });
    }
    let recipe = recipe::Recipe::open(t.store, root)?;
    let total = recipe.len();
    let report = |done| progress.step("get", done, total);
    // Chunks are tens of KiB: written as they come, no extra buffer copy.
    match recipe.write_to(&mut out, &report) {
        Ok(bytes) => Ok(GetOut {
            bytes,
            closed: false,
        }),
        Err(recipe::RecipeError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(GetOut {
                bytes: 0,
                closed: true,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs `req` against `t`. `stream` is the file sent with a `put` or
/// `get`.
pub fn exec(
    t: &Target<'_>,
    req: &Request,
    stream: Option<File>,
    progress: &dyn Progress,
) -> Result<Reply> {
    let stream = || stream.ok_or(ServiceError::NoStream);
    Ok(match req {
        Request::Stats => Reply::Stats(match (t.fs, t.repo) {
            (Some(fs), _) => fs.space_report()?,
            (None, Some(repo)) => check::space_unmounted(repo)?,
            (None, None) => fs::space::report(t.store, None)?,
        }),
        Request::Roots => Reply::Roots(check::root_lines(t.store)?),
        Request::Rm { label } => {
            t.store.delete_root(label)?;
            Reply::Rm(Removed {
                removed: label.clone(),
            })
        }
        Request::Put { name, replace } => Reply::Put(put(t, name, *replace, stream()?, progress)?),
        Request::Get { label } => Reply::Get(get(t, label, stream()?, progress)?),
        Request::Check => Reply::Check(check::check_store(t.store, t.fs, &|p| {
            progress.step("check", p.containers_done, p.containers_total)
        })?),
        Request::Version => Reply::Version(t.fs()?.write_version()?),
        Request::VersionList => Reply::VersionList(t.fs()?.version_list()?),
        Request::VersionPrune { keep, dry_run } => {
            Reply::VersionPrune(t.fs()?.prune_versions(*keep, *dry_run)?)
        }
        Request::StorageReads => Reply::StorageReads(StorageReads {
            meta: t.fs()?.meta_storage_reads(),
            index: t.store.index_reads(),
            containers: t.store.storage_reads(),
        }),
        Request::SnapshotCreate { name } => Reply::SnapshotCreate(t.fs()?.snapshot_create(name)?),
        Request::SnapshotList { unique } => Reply::SnapshotList(t.fs()?.snapshot_list(*unique)?),
        Request::SnapshotDelete { name } => {
            t.fs()?.snapshot_delete(name)?;
            Reply::SnapshotDelete(Deleted {
                deleted: name.clone(),
            })
        }
        Request::SnapshotDiff { a, b } => Reply::SnapshotDiff(t.fs()?.snapshot_diff(a, b)?),
        Request::Restore {
            name,
            path,
            to,
            overwrite,
            out,
        } => {
            let fs = t.fs()?;
            let path = t.inside(path);
            Reply::Restore(match (out, to) {
                (Some(_), Some(_)) => return Err(ServiceError::RestoreToAndOut),
                (Some(out), None) => fs.export(name, &path, Path::new(out), *overwrite)?,
                (None, to) => {
                    let to = to.as_deref().map(|p| t.inside(p));
                    fs.restore(name, &path, to.as_deref(), *overwrite)?
                }
            })
        }
        Request::Clone { src, dst } => {
            Reply::Clone(t.fs()?.clone_path(&t.inside(src), &t.inside(dst))?)
        }
        Request::Gc {
            threshold,
            max_garbage,
            dry_run,
            peer_wait,
        } => {
            let options = gc::GcOptions {
                threshold: *threshold,
                max_garbage: *max_garbage,
                dry_run: *dry_run,
                peer_wait: std::time::Duration::from_secs(*peer_wait),
                // This process opened the repository (no daemon serves it):
                // nothing else can be using the index.
                compact_index: t.repo.is_some(),
            };
            let fs = t.fs()?;
            Reply::Gc(gc::collect(
                fs.store(),
                gc::Live::Mounted(fs),
                options,
                &|p| match p {
                    gc::GcProgress::Marking { chunks } => progress.step("mark", chunks, 0),
                    gc::GcProgress::Sweeping { done, total } => progress.step("sweep", done, total),
                    gc::GcProgress::Deleting { containers } => {
                        progress.step("delete", 0, containers)
                    }
                },
            )?)
        }
        Request::PolicyShow { path } => {
            Reply::PolicyShow(redundancy::policy_show(t.fs()?, &t.inside(path))?)
        }
        Request::Status => Reply::Status(redundancy::status(t.store)?),
        Request::Scrub => Reply::Scrub(redundancy::scrub(t.fs()?, progress)?),
        Request::Reload => Reply::Reload(branches::reload(t.root, t.fs()?)?),
        Request::BranchAdd { name, base, config } => {
            Reply::BranchAdd(branches::add(t, name, base, config)?)
        }
        Request::BranchReplace { old, new, config } => {
            let fs = t.fs()?;
            let successors = [(old.clone(), new.clone())];
            Reply::BranchReplace(branches::move_off(t.root, fs, config, &successors, || {
                redundancy::replace(fs, old, new, progress)
            })?)
        }
        Request::BranchDrain { name, config } => {
            let fs = t.fs()?;
            Reply::BranchDrain(branches::move_off(t.root, fs, config, &[], || {
                redundancy::drain(fs, name, progress)
            })?)
        }
    })
}

/// Who asks, for [`call`].
pub struct Caller<'a> {
    /// The repository's root directory.
    pub root: &'a Path,
    /// How long to wait for the repository's lock while another command
    /// holds it.
    pub lock_wait: Duration,
    /// Told of the repository when this process opens it itself (no daemon
    /// serves it): the CLI logs to it and reports what opening it found.
    pub opened: &'a dyn Fn(&Repo),
    pub progress: &'a dyn Progress,
}

/// Runs `req` through the daemon serving `caller.root` if one runs, else on
/// the repository opened here, sending `stream` with a `put` or `get`.
///
/// While another command holds the repository's lock, this waits for it
/// (up to `caller.lock_wait`), asking the daemon again each time: a mount
/// that is starting up answers once its socket is up.
pub fn call(caller: &Caller<'_>, req: &Request, stream: Option<&File>) -> Result<Reply> {
    let deadline = Instant::now() + caller.lock_wait;
    loop {
        let fd = stream.map(|f| f.as_fd());
        if let Some(reply) = control::call(caller.root, req, fd, caller.progress)? {
            return Ok(reply);
        }
        match Repo::open(caller.root) {
            Ok(repo) => {
                (caller.opened)(&repo);
                return local(&repo, req, stream, caller.progress);
            }
            Err(RepoError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(open::LOCK_POLL)
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs `req` on the repository opened by this process.
fn local(
    repo: &Repo,
    req: &Request,
    stream: Option<&File>,
    progress: &dyn Progress,
) -> Result<Reply> {
    let stream = stream
        .map(File::try_clone)
        .transpose()
        .map_err(ServiceError::Duplicate)?;
    let mut target = Target {
        store: &repo.store,
        fs: None,
        chunking: repo.config.chunking,
        root: &repo.root,
        mountpoint: None,
        repo: Some(repo),
    };
    if !req.needs_fs() {
        return exec(&target, req, stream, progress);
    }
    let fs = open_fs(repo)?;
    target.fs = Some(&fs);
    let out = exec(&target, req, stream, progress);
    fs.shutdown()?;
    out
}

/// Opens the repository's file system, owned by whoever runs this process.
pub fn open_fs(repo: &Repo) -> Result<Arc<Fs>> {
    // SAFETY: plain getters without preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Ok(Arc::new(repo.open_fs(uid, gid)?))
}

/// Opens the repository's file system with its metadata in etcd at `url`
/// (`etcd://HOST:PORT/FSID`, `docs/metadata-on-etcd.md`): chunks stay in
/// the repository, which records the URL ([`Repo::open_fs_on`]).
pub fn open_fs_on_etcd(repo: &Repo, url: &str) -> Result<Arc<Fs>> {
    // SAFETY: plain getters without preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let meta = meta_etcd::EtcdMeta::open_url(url, uid, gid).inspect_err(|e| {
        tracing::error!(url, error = %e, "opening the metadata in etcd failed");
    })?;
    let meta = Arc::new(meta);
    claim_client(&meta, repo)?;
    Ok(Arc::new(repo.open_fs_on(meta, url)?))
}

/// Marks this repository's client number mounted before the file system
/// writes anything: refused while another live process holds the number
/// (a copy of this repository mounted elsewhere would hand out the same
/// container ids; `CollectionBoard::mounted`), and refused when another
/// repository with this number reserved container ids past this one's
/// mark (a copy used since it was copied; `CollectionBoard::ids_reserved`),
/// which every reservation from now on is checked against too.
fn claim_client(meta: &Arc<meta_etcd::EtcdMeta>, repo: &Repo) -> Result<()> {
    use meta::CollectionBoard as _;
    let me = u64::from(repo.store.client().get());
    meta.mounted(me).inspect_err(|e| {
        tracing::error!(client = me, error = %e, "this client number is taken");
    })?;
    if let Some(mark) = repo.store.container_id_mark()? {
        meta.ids_reserved(me, mark, mark).inspect_err(|e| {
            tracing::error!(client = me, error = %e, "this repository is behind another with its client number");
        })?;
    }
    repo.store.set_id_ledger(Arc::new(IdsInEtcd {
        meta: meta.clone(),
        me,
    }));
    Ok(())
}

/// The container-id ledger of a client over etcd.
struct IdsInEtcd {
    meta: Arc<meta_etcd::EtcdMeta>,
    me: u64,
}

impl cas::IdLedger for IdsInEtcd {
    fn reserved(&self, from: u64, below: u64) -> std::result::Result<(), cas::LedgerError> {
        use meta::CollectionBoard as _;
        self.meta
            .ids_reserved(self.me, from, below)
            .map_err(|e| match e {
                meta::MetaError::Remote(r)
                    if matches!(
                        r.downcast_ref::<meta_etcd::EtcdError>(),
                        Some(meta_etcd::EtcdError::IdsBehind { .. })
                    ) =>
                {
                    cas::LedgerError::Refused(r)
                }
                e => cas::LedgerError::Unavailable(Box::new(e)),
            })
    }
}

/// Opens the repository's file system with its metadata over several etcd
/// clusters, their shard map in the control cluster at `url`
/// (`etcd://HOST:PORT/FSID`, made by `cairn cluster init`); the repository
/// records it as `cluster:URL` (`docs/metadata-on-etcd.md`).
pub fn open_fs_on_etcd_cluster(repo: &Repo, url: &str) -> Result<Arc<Fs>> {
    let meta = meta_etcd::EtcdMeta::open_cluster_url(url).inspect_err(|e| {
        tracing::error!(url, error = %e, "opening the metadata over etcd clusters failed");
    })?;
    let meta = Arc::new(meta);
    claim_client(&meta, repo)?;
    Ok(Arc::new(repo.open_fs_on(meta, &format!("cluster:{url}"))?))
}

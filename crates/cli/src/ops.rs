//! Commands that work the same on a mounted file system (through the
//! daemon's control socket) and on an unmounted repository (opened here):
//! each is a [`Request`] executed by [`exec`] against a file system or a
//! store, and the JSON value it returns is printed by the caller.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use repo::{Repo, RepoError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use fs::Fs;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Stats,
    Check,
    Roots,
    Rm {
        label: String,
    },
    /// Stores the stream sent with the request under `name`.
    Put {
        name: String,
        replace: bool,
    },
    /// Writes what `label` holds to the stream sent with the request.
    Get {
        label: String,
    },
    Version,
    SnapshotCreate {
        name: String,
    },
    SnapshotList {
        unique: bool,
    },
    SnapshotDelete {
        name: String,
    },
    SnapshotDiff {
        a: String,
        b: String,
    },
    Restore {
        name: String,
        path: String,
        to: Option<String>,
        overwrite: bool,
    },
    Clone {
        src: String,
        dst: String,
    },
    Gc {
        threshold: f64,
        dry_run: bool,
    },
    PolicyShow {
        path: String,
    },
    Status,
    Scrub,
    /// Applies cairn.toml as edited by hand: its rules, and branches added;
    /// refused if it leaves out a branch in use.
    Reload,
    /// Makes `config` (cairn.toml with branch `name` added) the
    /// configuration and opens the branch; refused if cairn.toml is no
    /// longer `base`, the text the edit was made from.
    BranchAdd {
        name: String,
        base: String,
        config: String,
    },
    /// Moves the shards of `old` onto `new`, then makes `config` (cairn.toml
    /// without `old`) the configuration.
    BranchReplace {
        old: String,
        new: String,
        config: String,
    },
    /// Moves the shards of `name` onto the other branches, then makes
    /// `config` (cairn.toml without `name`) the configuration.
    BranchDrain {
        name: String,
        config: String,
    },
}

impl Request {
    /// Whether the request needs the file system, not just the store.
    fn needs_fs(&self) -> bool {
        !matches!(
            self,
            Request::Stats
                | Request::Check
                | Request::Roots
                | Request::Rm { .. }
                | Request::Put { .. }
                | Request::Get { .. }
                | Request::BranchAdd { .. }
        )
    }
}

/// A step of a long operation, for the client's progress bar.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub what: String,
    pub done: u64,
    /// 0 while the total is not known.
    pub total: u64,
}

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

    fn fs(&self) -> Result<&Fs> {
        self.fs
            .context("this request needs the file system, which was not opened")
    }
}

/// What `put` reports.
#[derive(Debug, Serialize, Deserialize)]
pub struct PutOut {
    pub len: u64,
    pub chunks: u64,
    pub new_chunks: u64,
    pub new_bytes: u64,
    pub stored_bytes: u64,
}

/// What `get` reports: the bytes written, or that the reader went away
/// (a closed pipe: `cairn get L | head`).
#[derive(Debug, Serialize, Deserialize)]
pub struct GetOut {
    pub bytes: u64,
    pub closed: bool,
}

fn put(
    t: &Target<'_>,
    name: &str,
    replace: bool,
    input: File,
    progress: &(dyn Fn(Progress) + Sync),
    waiting: &(dyn Fn() -> bool + Sync),
) -> Result<PutOut> {
    let store = t.store;
    if !replace && store.get_root(name).is_ok() {
        bail!("label {name:?} already exists (use --replace to point it at the new data)");
    }
    let total = input
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.len());
    let report = |done| {
        progress(Progress {
            what: "put".into(),
            done,
            total,
        })
    };
    let stored = recipe::store_stream(store, input, t.chunking, &report)?;
    // A caller that went away (Ctrl-C on `tar c | cairn put -`) may have
    // cut the stream short: its label is not recorded.
    if !waiting() {
        bail!("the caller went away before the put finished; label {name:?} not recorded");
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

fn get(
    t: &Target<'_>,
    label: &str,
    mut out: File,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<GetOut> {
    let root = t.store.get_root(label)?;
    let recipe = recipe::Recipe::open(t.store, root)?;
    let total = recipe.len();
    let report = |done| {
        progress(Progress {
            what: "get".into(),
            done,
            total,
        })
    };
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
/// `get`; `waiting` says whether the caller still waits for the answer.
pub fn exec(
    t: &Target<'_>,
    req: &Request,
    stream: Option<File>,
    progress: &(dyn Fn(Progress) + Sync),
    waiting: &(dyn Fn() -> bool + Sync),
) -> Result<Value> {
    let stream = || stream.context("a put or get request comes with a file descriptor");
    Ok(match req {
        Request::Stats => {
            let report = match (t.fs, t.repo) {
                (Some(fs), _) => fs.space_report()?,
                (None, Some(repo)) => crate::commands::space_unmounted(repo)?,
                (None, None) => fs::space::report(t.store, None)?,
            };
            serde_json::to_value(report)?
        }
        Request::Roots => serde_json::to_value(crate::commands::root_lines(t.store)?)?,
        Request::Rm { label } => {
            t.store.delete_root(label)?;
            json!({ "removed": label })
        }
        Request::Put { name, replace } => {
            serde_json::to_value(put(t, name, *replace, stream()?, progress, waiting)?)?
        }
        Request::Get { label } => serde_json::to_value(get(t, label, stream()?, progress)?)?,
        Request::Check => {
            let report = crate::commands::check_store(t.store, t.fs, &|p| {
                progress(Progress {
                    what: "check".into(),
                    done: p.containers_done,
                    total: p.containers_total,
                })
            })?;
            serde_json::to_value(report)?
        }
        Request::Version => serde_json::to_value(t.fs()?.write_version()?)?,
        Request::SnapshotCreate { name } => serde_json::to_value(t.fs()?.snapshot_create(name)?)?,
        Request::SnapshotList { unique } => serde_json::to_value(t.fs()?.snapshot_list(*unique)?)?,
        Request::SnapshotDelete { name } => {
            t.fs()?.snapshot_delete(name)?;
            json!({ "deleted": name })
        }
        Request::SnapshotDiff { a, b } => serde_json::to_value(t.fs()?.snapshot_diff(a, b)?)?,
        Request::Restore {
            name,
            path,
            to,
            overwrite,
        } => {
            let to = to.as_deref().map(|p| t.inside(p));
            serde_json::to_value(t.fs()?.restore(
                name,
                &t.inside(path),
                to.as_deref(),
                *overwrite,
            )?)?
        }
        Request::Clone { src, dst } => {
            serde_json::to_value(t.fs()?.clone_path(&t.inside(src), &t.inside(dst))?)?
        }
        Request::Gc { threshold, dry_run } => {
            let options = gc::GcOptions {
                threshold: *threshold,
                dry_run: *dry_run,
            };
            let fs = t.fs()?;
            let report = gc::collect(fs.store(), gc::Live::Mounted(fs), options, &|p| {
                progress(match p {
                    gc::GcProgress::Marking { chunks } => Progress {
                        what: "mark".into(),
                        done: chunks,
                        total: 0,
                    },
                    gc::GcProgress::Sweeping { done, total } => Progress {
                        what: "sweep".into(),
                        done,
                        total,
                    },
                })
            })?;
            serde_json::to_value(report)?
        }
        Request::PolicyShow { path } => {
            crate::redundancy::value_of(crate::redundancy::policy_show(t.fs()?, &t.inside(path))?)?
        }
        Request::Status => crate::redundancy::value_of(crate::redundancy::status(t.store)?)?,
        Request::Scrub => {
            crate::redundancy::value_of(crate::redundancy::scrub(t.fs()?, progress)?)?
        }
        Request::Reload => crate::redundancy::value_of(crate::branches::reload(t.root, t.fs()?)?)?,
        Request::BranchAdd { name, base, config } => {
            crate::redundancy::value_of(crate::branches::add(t, name, base, config)?)?
        }
        Request::BranchReplace { old, new, config } => {
            let fs = t.fs()?;
            let successors = [(old.clone(), new.clone())];
            crate::redundancy::value_of(crate::branches::move_off(
                t.root,
                fs,
                config,
                &successors,
                || crate::redundancy::replace(fs, old, new, progress),
            )?)?
        }
        Request::BranchDrain { name, config } => {
            let fs = t.fs()?;
            crate::redundancy::value_of(crate::branches::move_off(
                t.root,
                fs,
                config,
                &[],
                || crate::redundancy::drain(fs, name, progress),
            )?)?
        }
    })
}

/// Runs `req` through the daemon serving `root` if one runs, else on the
/// repository opened here, sending `stream` with a `put` or `get`.
///
/// While another command holds the repository's lock, this waits for it
/// (up to [`crate::commands::lock_wait`]), asking the daemon again each
/// time: a mount that is starting up answers once its socket is up.
pub fn call(
    root: &Path,
    req: &Request,
    stream: Option<&File>,
    quiet: bool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Value> {
    let deadline = Instant::now() + crate::commands::lock_wait();
    loop {
        let fd = stream.map(|f| f.as_fd());
        if let Some(v) = crate::control::call(root, req, fd, progress)? {
            return Ok(v);
        }
        match Repo::open(root) {
            Ok(repo) => {
                crate::commands::say_discarded(&repo, quiet);
                return local(&repo, req, stream, progress);
            }
            Err(RepoError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(crate::commands::LOCK_POLL)
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
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Value> {
    let stream = stream
        .map(File::try_clone)
        .transpose()
        .context("cannot duplicate the data stream")?;
    let mut target = Target {
        store: &repo.store,
        fs: None,
        chunking: repo.config.chunking,
        root: &repo.root,
        mountpoint: None,
        repo: Some(repo),
    };
    if !req.needs_fs() {
        return exec(&target, req, stream, progress, &|| true);
    }
    let fs = crate::mount::open_fs(repo)?;
    target.fs = Some(&fs);
    let out = exec(&target, req, stream, progress, &|| true);
    fs.shutdown().context("making the changes durable")?;
    out
}

/// [`call`] with progress shown as a bar on stderr.
pub fn run(root: &Path, req: &Request, quiet: bool) -> Result<Value> {
    let steps = crate::ui::Steps::new(quiet);
    let out = call(root, req, None, quiet, &|p| {
        steps.update(&p.what, p.done, p.total)
    });
    steps.finish();
    out
}

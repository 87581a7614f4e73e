//! Commands that work the same on a mounted file system (through the
//! daemon's control socket) and on an unmounted repository (opened here):
//! each is a [`Request`] executed by [`exec`] against a file system, and the
//! JSON value it returns is printed by the caller.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use fs::Fs;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Stats,
    Check,
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
    /// Applies cairn.toml's `[[branch]]` list as it is now on disk.
    Reconfigure,
    /// Applies cairn.toml as edited by hand: its rules, and branches added;
    /// refused if it leaves out a branch in use.
    Reload,
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

/// A step of a long operation, for the client's progress bar.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub what: String,
    pub done: u64,
    pub total: u64,
}

/// What a request runs against.
pub struct Target<'a> {
    pub fs: &'a Fs,
    /// The repository's root directory.
    pub root: &'a Path,
    /// Where the file system is mounted: absolute paths under it are taken
    /// relative to it.
    pub mountpoint: Option<&'a Path>,
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
}

pub fn exec(t: &Target<'_>, req: &Request, progress: &(dyn Fn(Progress) + Sync)) -> Result<Value> {
    let fs = t.fs;
    Ok(match req {
        Request::Stats => {
            let usage = fs.usage()?;
            serde_json::to_value(crate::commands::stats_of(
                fs.store(),
                Some((usage.files, usage.dirs, usage.bytes)),
            )?)?
        }
        Request::Check => {
            let report = crate::commands::check_store(fs.store(), Some(fs), &|p| {
                progress(Progress {
                    what: "check".into(),
                    done: p.containers_done,
                    total: p.containers_total,
                })
            })?;
            serde_json::to_value(report)?
        }
        Request::Version => serde_json::to_value(fs.write_version()?)?,
        Request::SnapshotCreate { name } => serde_json::to_value(fs.snapshot_create(name)?)?,
        Request::SnapshotList { unique } => serde_json::to_value(fs.snapshot_list(*unique)?)?,
        Request::SnapshotDelete { name } => {
            fs.snapshot_delete(name)?;
            json!({ "deleted": name })
        }
        Request::SnapshotDiff { a, b } => serde_json::to_value(fs.snapshot_diff(a, b)?)?,
        Request::Restore {
            name,
            path,
            to,
            overwrite,
        } => {
            let to = to.as_deref().map(|p| t.inside(p));
            serde_json::to_value(fs.restore(name, &t.inside(path), to.as_deref(), *overwrite)?)?
        }
        Request::Clone { src, dst } => {
            serde_json::to_value(fs.clone_path(&t.inside(src), &t.inside(dst))?)?
        }
        Request::Gc { threshold, dry_run } => {
            let options = gc::GcOptions {
                threshold: *threshold,
                dry_run: *dry_run,
            };
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
            crate::redundancy::value_of(crate::redundancy::policy_show(fs, &t.inside(path))?)?
        }
        Request::Status => crate::redundancy::value_of(crate::redundancy::status(fs.store())?)?,
        Request::Scrub => crate::redundancy::value_of(crate::redundancy::scrub(fs, progress)?)?,
        Request::Reconfigure => {
            crate::redundancy::value_of(crate::branches::reconfigure(t.root, fs)?)?
        }
        Request::Reload => crate::redundancy::value_of(crate::branches::reload(t.root, fs)?)?,
        Request::BranchReplace { old, new, config } => {
            let successors = [(old.clone(), new.clone())];
            crate::redundancy::value_of(crate::branches::move_off(
                t.root,
                fs,
                config,
                &successors,
                || crate::redundancy::replace(fs, old, new, progress),
            )?)?
        }
        Request::BranchDrain { name, config } => crate::redundancy::value_of(
            crate::branches::move_off(t.root, fs, config, &[], || {
                crate::redundancy::drain(fs, name, progress)
            })?,
        )?,
    })
}

/// Runs `req` through the daemon serving `root` if one runs, else on the
/// repository opened here. Progress goes to a bar on stderr.
pub fn run(root: &Path, req: &Request, quiet: bool) -> Result<Value> {
    let pb = crate::ui::count_bar(quiet, "");
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg:>8} {pos}/{len}").expect("valid template"),
    );
    let show = |p: Progress| {
        pb.set_message(p.what);
        pb.set_length(p.total);
        pb.set_position(p.done);
    };
    let out = match crate::control::call(root, req, &show)? {
        Some(v) => Ok(v),
        None => {
            let repo = crate::commands::open(root, quiet)?;
            let fs = crate::mount::open_fs(&repo)?;
            let out = exec(
                &Target {
                    fs: &fs,
                    root,
                    mountpoint: None,
                },
                req,
                &show,
            );
            fs.shutdown().context("making the changes durable")?;
            out
        }
    };
    pb.finish_and_clear();
    out
}

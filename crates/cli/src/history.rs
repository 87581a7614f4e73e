//! `cairn snapshot`, `restore`, `clone`, `version`, `gc` and `recover`:
//! the requests, and their answers printed.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use fs::history::{ChangeKind, CopyReport};
use service::{RecoverFrom, Request};

use crate::args::{SnapshotCommand, VersionsCommand};
use crate::ops;
use crate::ui::{self, out};

pub fn snapshot(root: &Path, cmd: SnapshotCommand, quiet: bool) -> Result<ExitCode> {
    match cmd {
        SnapshotCommand::Create { name, json } => {
            let s = ops::run(root, &Request::SnapshotCreate { name: name.clone() }, quiet)?
                .into_snapshot_create()?;
            if json {
                out!("{}", ui::json(&s)?);
                return Ok(ExitCode::SUCCESS);
            }
            out!(
                "snapshot {name:?}: {} files, {} directories, {}",
                s.files,
                s.dirs,
                ui::bytes(s.logical_bytes)
            );
        }
        SnapshotCommand::List { json } => {
            let list = ops::run(root, &Request::SnapshotList { unique: true }, quiet)?
                .into_snapshot_list()?;
            if json {
                out!("{}", ui::json(&list)?);
            } else {
                out!(
                    "{:<24} {:<20} {:>9} {:>11} {:>11}",
                    "NAME",
                    "CREATED (UTC)",
                    "FILES",
                    "SIZE",
                    "UNIQUE"
                );
                for s in &list {
                    out!(
                        "{:<24} {:<20} {:>9} {:>11} {:>11}",
                        s.name,
                        ui::utc(s.created),
                        s.files,
                        ui::bytes(s.logical_bytes),
                        ui::bytes(s.unique_bytes.unwrap_or(0)),
                    );
                }
            }
        }
        SnapshotCommand::Delete { name } => {
            ops::run(root, &Request::SnapshotDelete { name: name.clone() }, quiet)?
                .into_snapshot_delete()?;
            if !quiet {
                say!("deleted snapshot {name:?}; `cairn gc` reclaims its space");
            }
        }
        SnapshotCommand::Diff { a, b, json } => {
            let changes =
                ops::run(root, &Request::SnapshotDiff { a, b }, quiet)?.into_snapshot_diff()?;
            if json {
                out!("{}", ui::json(&changes)?);
                return Ok(ExitCode::SUCCESS);
            }
            for c in changes {
                let mark = match c.kind {
                    ChangeKind::Added => "+",
                    ChangeKind::Removed => "-",
                    ChangeKind::Changed => "M",
                };
                out!("{mark} {}", c.path);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn copied(c: &CopyReport) -> String {
    format!(
        "{} files, {} directories, {}",
        c.files,
        c.dirs,
        ui::bytes(c.bytes)
    )
}

pub fn restore(root: &Path, req: Request, json: bool, quiet: bool) -> Result<ExitCode> {
    let c = ops::run(root, &req, quiet)?.into_restore()?;
    if json {
        out!("{}", ui::json(&c)?);
    } else if !quiet {
        say!("restored {}", copied(&c));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn clone(root: &Path, src: String, dst: String, json: bool, quiet: bool) -> Result<ExitCode> {
    let c = ops::run(root, &Request::Clone { src, dst }, quiet)?.into_clone()?;
    if json {
        out!("{}", ui::json(&c)?);
    } else if !quiet {
        say!("cloned {}", copied(&c));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn version(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let v = ops::run(root, &Request::Version, quiet)?.into_version()?;
    if json {
        out!("{}", ui::json(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if v.written {
        out!(
            "{}: {} files, {} directories; {} listings written, {} new bytes, {:.3} s",
            v.label,
            v.files,
            v.dirs,
            v.dirs_written,
            v.new_bytes,
            v.seconds
        );
    } else {
        out!("nothing changed since {}", v.label);
    }
    dropped(&v.dropped, "retention dropped");
    Ok(ExitCode::SUCCESS)
}

pub fn versions(root: &Path, cmd: VersionsCommand, quiet: bool) -> Result<ExitCode> {
    match cmd {
        VersionsCommand::List { json } => {
            let list = ops::run(root, &Request::VersionList, quiet)?.into_version_list()?;
            if json {
                out!("{}", ui::json(&list)?);
                return Ok(ExitCode::SUCCESS);
            }
            out!(
                "{:<16} {:<20} {:>9} {:>11}  KEPT UNTIL (UTC)",
                "VERSION",
                "CREATED (UTC)",
                "FILES",
                "SIZE"
            );
            for v in &list {
                out!(
                    "{:<16} {:<20} {:>9} {:>11}  {}",
                    v.label,
                    v.created.map_or_else(|| "unreadable".into(), ui::utc),
                    v.files,
                    ui::bytes(v.logical_bytes),
                    v.kept_until
                        .map_or_else(|| "while among the newest".into(), ui::utc),
                );
            }
            if !quiet && list.len() > 1 {
                say!("`cairn versions prune` drops all but the newest now; `cairn gc` then frees what only they held");
            }
        }
        VersionsCommand::Prune {
            keep,
            dry_run,
            json,
        } => {
            let r = ops::run(root, &Request::VersionPrune { keep, dry_run }, quiet)?
                .into_version_prune()?;
            if json {
                out!("{}", ui::json(&r)?);
                return Ok(ExitCode::SUCCESS);
            }
            if r.dropped.is_empty() {
                out!("nothing to drop: {} version(s) kept", r.kept);
            } else if dry_run {
                dropped(&r.dropped, "would drop");
            } else {
                dropped(&r.dropped, "dropped");
                if !quiet {
                    say!("`cairn gc` frees what only they held (a mounted file system also does it by itself, see [gc] in cairn.toml)");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `retention dropped 3 version(s): version/1, version/2, version/4`,
/// when `labels` is not empty.
fn dropped(labels: &[String], what: &str) {
    if !labels.is_empty() {
        out!("{what} {} version(s): {}", labels.len(), labels.join(", "));
    }
}

pub fn gc(root: &Path, ask: service::GcAsk, json: bool, quiet: bool) -> Result<ExitCode> {
    let dry_run = ask.dry_run;
    let request = Request::Gc {
        threshold: ask.threshold,
        max_garbage: ask.max_garbage,
        dry_run,
        peer_wait: ask.peer_wait,
    };
    let r = ops::run(root, &request, quiet)?.into_gc()?;
    if json {
        out!("{}", ui::json(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    let retention = if dry_run {
        "retention would drop"
    } else {
        "retention dropped"
    };
    dropped(&r.dropped_versions, retention);
    out!(
        "marked {} chunks in {:.2} s; {verb} {} of {} containers, {} freed ({} chunks copied forward, {} dropped) in {:.2} s",
        r.marked_chunks,
        r.mark_seconds,
        r.reclaimed_containers,
        r.candidates,
        ui::bytes(r.freed_bytes),
        r.copied_chunks,
        r.dropped_chunks,
        r.sweep_seconds,
    );
    if r.index_bytes_freed > 0 {
        out!(
            "compacted the fingerprint index: {} given back",
            ui::bytes(r.index_bytes_freed)
        );
    }
    if r.orphans_removed > 0 {
        out!(
            "removed {} orphaned container(s) left by an interrupted write or gc",
            r.orphans_removed
        );
    }
    if let (true, Some((oldest, until))) = (r.versions_kept > 1, &r.oldest_version) {
        let until = until.map_or_else(|| "while among the newest".into(), ui::utc);
        out!(
            "{} versions still hold what was deleted or overwritten since {oldest} (kept until {until} UTC); \
             `cairn versions prune` releases them, then `cairn gc` frees it",
            r.versions_kept
        );
    }
    if r.dropped_parked > 0 {
        out!(
            "dropped {} container(s) that waited in memory for space",
            r.dropped_parked
        );
    }
    for file in &r.dropped_writes {
        out!("  dropped writes that waited for space (never fsynced): {file} keeps its last durable content");
    }
    for s in &r.skipped {
        out!("  skipped, cannot be read (`cairn check` says more): {s}");
    }
    for root in &r.damaged_roots {
        out!("  LOST: root {root}");
    }
    for f in &r.damaged_files {
        out!("  LOST: file {}: {}", f.path, f.cause);
    }
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds the index, the roots and the metadata engine from the store.
pub fn recover(
    root: &Path,
    version: Option<u64>,
    snapshot: Option<String>,
    json: bool,
    quiet: bool,
) -> Result<ExitCode> {
    // A mounted repository is refused here, naming its mount point.
    let repo = ops::open_for_rebuild(root, quiet)?;
    let from = match (version, snapshot) {
        (_, Some(name)) => RecoverFrom::Snapshot(name),
        (Some(n), None) => RecoverFrom::Version(n),
        (None, None) => RecoverFrom::Newest,
    };
    let steps = ui::Steps::new(quiet);
    let done = service::recover(&repo, &from, &steps);
    steps.finish();
    let r = done?;
    if json {
        out!("{}", ui::json(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !quiet {
        say!(
            "rebuilt the index from {} containers ({} chunks); {} roots found on the branch",
            r.rebuilt.containers,
            r.rebuilt.chunks_indexed,
            r.roots
        );
        if let Some(aside) = &r.set_aside {
            say!("moved the old metadata engine to {}", aside.display());
        }
    }
    out!(
        "recovered the file system from {} ({}): {} files, {} directories",
        r.label,
        ui::utc(r.created),
        r.files,
        r.dirs
    );
    Ok(ExitCode::SUCCESS)
}

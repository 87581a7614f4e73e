//! `cairn snapshot`, `restore`, `clone`, `version`, `gc` and `recover`.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cas::ChunkId;
use fs::tree::{self, TreeContent, TreeEntry};
use meta::{ImportEntry, ImportInode, Inode, InodeId};
use serde_json::Value;

use crate::args::SnapshotCommand;
use crate::ops::{self, Request};
use crate::ui::{self, out};

fn field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

pub fn snapshot(root: &Path, cmd: SnapshotCommand, quiet: bool) -> Result<ExitCode> {
    match cmd {
        SnapshotCommand::Create { name } => {
            let v = ops::run(root, &Request::SnapshotCreate { name: name.clone() }, quiet)?;
            out!(
                "snapshot {name:?}: {} files, {} directories, {}",
                field(&v, "files"),
                field(&v, "dirs"),
                ui::bytes(field(&v, "logical_bytes"))
            );
        }
        SnapshotCommand::List { json } => {
            let v = ops::run(root, &Request::SnapshotList { unique: true }, quiet)?;
            let list = v.as_array().cloned().unwrap_or_default();
            if json {
                out!("{}", Value::Array(list));
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
                        s["name"].as_str().unwrap_or("?"),
                        ui::utc(s["created"].as_i64().unwrap_or(0)),
                        field(s, "files"),
                        ui::bytes(field(s, "logical_bytes")),
                        ui::bytes(field(s, "unique_bytes")),
                    );
                }
            }
        }
        SnapshotCommand::Delete { name } => {
            ops::run(root, &Request::SnapshotDelete { name: name.clone() }, quiet)?;
            if !quiet {
                say!("deleted snapshot {name:?}; `cairn gc` reclaims its space");
            }
        }
        SnapshotCommand::Diff { a, b } => {
            let v = ops::run(root, &Request::SnapshotDiff { a, b }, quiet)?;
            for c in v.as_array().cloned().unwrap_or_default() {
                let mark = match c["kind"].as_str() {
                    Some("added") => "+",
                    Some("removed") => "-",
                    _ => "M",
                };
                out!("{mark} {}", c["path"].as_str().unwrap_or("?"));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn copied(v: &Value) -> String {
    format!(
        "{} files, {} directories, {}",
        field(v, "files"),
        field(v, "dirs"),
        ui::bytes(field(v, "bytes"))
    )
}

pub fn restore(root: &Path, req: Request, quiet: bool) -> Result<ExitCode> {
    let v = ops::run(root, &req, quiet)?;
    if !quiet {
        say!("restored {}", copied(&v));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn clone(root: &Path, src: String, dst: String, quiet: bool) -> Result<ExitCode> {
    let v = ops::run(root, &Request::Clone { src, dst }, quiet)?;
    if !quiet {
        say!("cloned {}", copied(&v));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn version(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let v = ops::run(root, &Request::Version, quiet)?;
    if json {
        out!("{v}");
    } else if v["written"].as_bool() == Some(true) {
        out!(
            "{}: {} files, {} directories; {} listings written, {} new bytes, {:.3} s",
            v["label"].as_str().unwrap_or("?"),
            field(&v, "files"),
            field(&v, "dirs"),
            field(&v, "dirs_written"),
            field(&v, "new_bytes"),
            v["seconds"].as_f64().unwrap_or(0.0)
        );
    } else {
        out!(
            "nothing changed since {}",
            v["label"].as_str().unwrap_or("the last version")
        );
    }
    if !json {
        dropped(&v, "dropped", "retention dropped");
    }
    Ok(ExitCode::SUCCESS)
}

/// `retention dropped 3 version(s): version/1, version/2, version/4`,
/// when the list at `key` is not empty.
fn dropped(v: &Value, key: &str, what: &str) {
    let labels: Vec<&str> = v[key]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !labels.is_empty() {
        out!("{what} {} version(s): {}", labels.len(), labels.join(", "));
    }
}

pub fn gc(root: &Path, threshold: f64, dry_run: bool, json: bool, quiet: bool) -> Result<ExitCode> {
    let v = ops::run(root, &Request::Gc { threshold, dry_run }, quiet)?;
    if json {
        out!("{v}");
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
    dropped(&v, "dropped_versions", retention);
    out!(
        "marked {} chunks in {:.2} s; {verb} {} of {} containers, {} freed ({} chunks copied forward, {} dropped) in {:.2} s",
        field(&v, "marked_chunks"),
        v["mark_seconds"].as_f64().unwrap_or(0.0),
        field(&v, "reclaimed_containers"),
        field(&v, "candidates"),
        ui::bytes(field(&v, "freed_bytes")),
        field(&v, "copied_chunks"),
        field(&v, "dropped_chunks"),
        v["sweep_seconds"].as_f64().unwrap_or(0.0),
    );
    if field(&v, "orphans_removed") > 0 {
        out!(
            "removed {} orphaned container(s) left by an interrupted write or gc",
            field(&v, "orphans_removed")
        );
    }
    for s in v["skipped"].as_array().cloned().unwrap_or_default() {
        out!(
            "  skipped, cannot be read (`cairn check` says more): {}",
            s.as_str().unwrap_or("?")
        );
    }
    for r in v["damaged_roots"].as_array().cloned().unwrap_or_default() {
        out!("  LOST: root {}", r.as_str().unwrap_or("?"));
    }
    for f in v["damaged_files"].as_array().cloned().unwrap_or_default() {
        out!(
            "  LOST: file {}: {}",
            f["path"].as_str().unwrap_or("?"),
            f["cause"].as_str().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds the index, the roots and the metadata engine from the store.
pub fn recover(
    root: &Path,
    version: Option<u64>,
    snapshot: Option<String>,
    quiet: bool,
) -> Result<ExitCode> {
    // A mounted repository is refused here, naming its mount point.
    let repo = crate::commands::open_for_rebuild(root, quiet)?;
    let store = &repo.store;
    let steps = ui::Steps::new(quiet);
    let rebuilt =
        store.rebuild_index(&|p| steps.update("index", p.containers_done, p.containers_total))?;
    steps.finish();
    let roots = store.recover_roots()?;
    if !quiet {
        say!(
            "rebuilt the index from {} containers ({} chunks); {roots} roots found on the branch",
            rebuilt.containers,
            rebuilt.chunks_indexed
        );
    }
    let (label, id) = match (version, snapshot) {
        (_, Some(name)) => {
            let label = format!("{}{name}", fs::history::SNAPSHOT_PREFIX);
            (
                label.clone(),
                store
                    .get_root(&label)
                    .with_context(|| format!("no snapshot {name:?}"))?,
            )
        }
        (n, None) => {
            let mut versions: Vec<(u64, ChunkId)> = store
                .list_roots()?
                .into_iter()
                .filter_map(|(l, id)| {
                    Some((
                        l.strip_prefix(fs::history::VERSION_PREFIX)?.parse().ok()?,
                        id,
                    ))
                })
                .collect();
            versions.sort();
            let found = match n {
                Some(n) => versions.into_iter().find(|(v, _)| *v == n),
                None => versions.pop(),
            };
            let (n, id) =
                found.context("the store holds no version of the file system to recover from")?;
            (format!("{}{n}", fs::history::VERSION_PREFIX), id)
        }
    };
    let record = tree::read_record(store, &id)?;
    let (inodes, entries) = flatten(store, &record.root)?;
    let path = repo.fs_meta_path();
    if path.exists() {
        let aside = path.with_extension("redb.damaged");
        std::fs::rename(&path, &aside)
            .with_context(|| format!("cannot move {} aside", path.display()))?;
        if !quiet {
            say!("moved the old metadata engine to {}", aside.display());
        }
    }
    meta::RedbMeta::import(&path, inodes, entries)?;
    out!(
        "recovered the file system from {label} ({}): {} files, {} directories",
        ui::utc(record.created.secs),
        record.files,
        record.dirs
    );
    Ok(ExitCode::SUCCESS)
}

/// Every inode and name of a stored tree, hard links once.
fn flatten(store: &cas::Store, root: &TreeEntry) -> Result<(Vec<ImportInode>, Vec<ImportEntry>)> {
    let mut inodes: HashMap<InodeId, ImportInode> = HashMap::new();
    let mut entries = Vec::new();
    let mut stack = vec![(InodeId::ROOT, root.clone())];
    while let Some((parent, e)) = stack.pop() {
        let ino = if e.ino == InodeId::ROOT || parent == InodeId::ROOT && e.name.is_empty() {
            InodeId::ROOT
        } else {
            e.ino
        };
        if !e.name.is_empty() {
            entries.push(ImportEntry {
                parent,
                name: e.name.clone(),
                ino,
            });
        }
        inodes.entry(ino).or_insert_with(|| ImportInode {
            inode: Inode {
                id: ino,
                attr: e.attr,
                content: e.meta_content(),
            },
            xattrs: e.xattrs.clone(),
        });
        if let TreeContent::Dir(listing) = &e.content {
            for child in tree::read_listing(store, listing)? {
                stack.push((ino, child));
            }
        }
    }
    Ok((inodes.into_values().collect(), entries))
}

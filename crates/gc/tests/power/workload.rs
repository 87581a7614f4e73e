//! A random workload: file operations drawn from a seed, applied to the
//! file system and to the model together.

use std::fmt;
use std::sync::Arc;

use fs::history::{SNAPSHOT_PREFIX as SNAPSHOT, VERSION_PREFIX as VERSION};
use fs::{Fs, FsError};
use gc::{GcOptions, Live};
use meta::{Content, InodeId, NewInode, RenameFlags, SetAttr};
use rand::rngs::StdRng;
use rand::Rng;

use super::model::{Bytes, Model, Rooted};

/// Files never grow past this, so a run stays small at opt-level 0.
const MAX_FILE: usize = 256 << 10;
const MAX_FILES: usize = 10;
const MAX_DIRS: usize = 4;

pub enum Op {
    Create {
        parent: u64,
        name: Vec<u8>,
    },
    Mkdir {
        parent: u64,
        name: Vec<u8>,
    },
    Write {
        ino: u64,
        offset: u64,
        data: Bytes,
    },
    Close {
        ino: u64,
    },
    Fsync {
        ino: u64,
    },
    Truncate {
        ino: u64,
        size: u64,
    },
    Rename {
        from: (u64, Vec<u8>),
        to: (u64, Vec<u8>),
    },
    Link {
        ino: u64,
        to: (u64, Vec<u8>),
    },
    Unlink {
        parent: u64,
        name: Vec<u8>,
    },
    Rmdir {
        parent: u64,
        name: Vec<u8>,
    },
    SyncAll,
    /// Writes a version (which syncs everything first).
    Version,
    Snapshot {
        name: String,
    },
    DeleteSnapshot {
        name: String,
    },
    /// A garbage collection reclaiming every container with any garbage
    /// (which syncs everything once it has marked).
    Gc,
}

impl Op {
    /// Whether the operation makes everything before it durable.
    pub fn syncs(&self) -> bool {
        matches!(
            self,
            Op::Fsync { .. } | Op::SyncAll | Op::Version | Op::Snapshot { .. } | Op::Gc
        )
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |name: &[u8]| String::from_utf8_lossy(name).into_owned();
        match self {
            Op::Create { parent, name } => write!(f, "create {parent}/{}", n(name)),
            Op::Mkdir { parent, name } => write!(f, "mkdir {parent}/{}", n(name)),
            Op::Write { ino, offset, data } => {
                write!(f, "write {} bytes at {offset} of inode {ino}", data.len())
            }
            Op::Close { ino } => write!(f, "close {ino}"),
            Op::Fsync { ino } => write!(f, "fsync {ino}"),
            Op::Truncate { ino, size } => write!(f, "truncate {ino} to {size}"),
            Op::Rename { from, to } => write!(
                f,
                "rename {}/{} to {}/{}",
                from.0,
                n(&from.1),
                to.0,
                n(&to.1)
            ),
            Op::Link { ino, to } => write!(f, "link inode {ino} as {}/{}", to.0, n(&to.1)),
            Op::Unlink { parent, name } => write!(f, "unlink {parent}/{}", n(name)),
            Op::Rmdir { parent, name } => write!(f, "rmdir {parent}/{}", n(name)),
            Op::SyncAll => write!(f, "sync all"),
            Op::Version => write!(f, "write a version"),
            Op::Snapshot { name } => write!(f, "create snapshot {name}"),
            Op::DeleteSnapshot { name } => write!(f, "delete snapshot {name}"),
            Op::Gc => write!(f, "collect garbage"),
        }
    }
}

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[rng.gen_range(0..items.len())].clone())
}

/// A name not yet used in `parent`.
fn fresh_name(rng: &mut StdRng, model: &Model, parent: u64, prefix: &str) -> Vec<u8> {
    loop {
        let name = format!("{prefix}{}", rng.gen_range(0..100)).into_bytes();
        if !model.entries.contains_key(&(parent, name.clone())) {
            return name;
        }
    }
}

/// Bytes to write: random, zeros, or a copy of another file's (dedup).
fn data(rng: &mut StdRng, model: &Model) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(1..4096),
        6..=8 => rng.gen_range(4096..40_000),
        _ => rng.gen_range(40_000..120_000),
    };
    match rng.gen_range(0..8) {
        0 => vec![0; len],
        1 => {
            let sources: Vec<Bytes> = model
                .live
                .values()
                .filter(|b| !b.is_empty())
                .cloned()
                .collect();
            match pick(rng, &sources) {
                Some(src) => {
                    let start = rng.gen_range(0..src.len());
                    src[start..src.len().min(start + len)].to_vec()
                }
                None => vec![7; len],
            }
        }
        _ => {
            let mut v = vec![0u8; len];
            rng.fill(&mut v[..]);
            v
        }
    }
}

/// The next operation, valid for the model's state.
pub fn next(rng: &mut StdRng, model: &Model) -> Op {
    loop {
        let files = model.files();
        let roll = rng.gen_range(0..100);
        let op = match roll {
            0..=10 if files.len() < MAX_FILES => {
                let parent = pick(rng, &model.dirs()).expect("the root");
                let name = fresh_name(rng, model, parent, "f");
                Some(Op::Create { parent, name })
            }
            11..=40 => pick(rng, &files).and_then(|ino| {
                let size = model.live[&ino].len() as u64;
                let data = data(rng, model);
                let offset = match rng.gen_range(0..10) {
                    0..=4 => size,
                    5..=7 => rng.gen_range(0..=size),
                    8 => size + rng.gen_range(1..50_000),
                    _ => 0,
                };
                (offset as usize + data.len() <= MAX_FILE).then(|| Op::Write {
                    ino,
                    offset,
                    data: Arc::new(data),
                })
            }),
            41..=51 => pick(rng, &model.open.iter().copied().collect::<Vec<_>>())
                .map(|ino| Op::Close { ino }),
            52..=61 => pick(rng, &files).map(|ino| Op::Fsync { ino }),
            62..=66 => pick(rng, &files).map(|ino| {
                let size = model.live[&ino].len() as u64;
                let size = match rng.gen_range(0..4) {
                    0 => 0,
                    1 => size + rng.gen_range(1..30_000),
                    _ => rng.gen_range(0..=size),
                };
                Op::Truncate { ino, size }
            }),
            67..=72 => {
                let dir = rng.gen_bool(0.25);
                pick(rng, &model.names(dir)).and_then(|from| {
                    let moved = model.entries[&from].0;
                    let parent = pick(rng, &model.dirs()).expect("the root");
                    if dir && model.is_within(parent, moved) {
                        return None;
                    }
                    // A file may replace another file.
                    let to = match pick(rng, &model.names(false)) {
                        Some(target) if !dir && rng.gen_bool(0.3) && target != from => target,
                        _ => (
                            parent,
                            fresh_name(rng, model, parent, if dir { "d" } else { "f" }),
                        ),
                    };
                    Some(Op::Rename { from, to })
                })
            }
            73..=75 => {
                pick(rng, &model.names(false)).map(|(parent, name)| Op::Unlink { parent, name })
            }
            76..=77 => pick(rng, &files).map(|ino| {
                let parent = pick(rng, &model.dirs()).expect("the root");
                let name = fresh_name(rng, model, parent, "l");
                Op::Link {
                    ino,
                    to: (parent, name),
                }
            }),
            78..=80 if model.dirs().len() <= MAX_DIRS => {
                let parent = pick(rng, &model.dirs()).expect("the root");
                let name = fresh_name(rng, model, parent, "d");
                Some(Op::Mkdir { parent, name })
            }
            81..=82 => {
                let empty: Vec<(u64, Vec<u8>)> = model
                    .names(true)
                    .into_iter()
                    .filter(|k| model.is_empty_dir(model.entries[k].0))
                    .collect();
                pick(rng, &empty).map(|(parent, name)| Op::Rmdir { parent, name })
            }
            83..=84 => Some(Op::SyncAll),
            85..=88 => Some(Op::Version),
            89..=92 => {
                if rng.gen_bool(0.6) {
                    Some(Op::Snapshot {
                        name: format!("s{}", model.snapshots_named),
                    })
                } else {
                    let names: Vec<String> = model
                        .roots
                        .keys()
                        .filter_map(|l| l.strip_prefix(SNAPSHOT))
                        .map(str::to_string)
                        .collect();
                    pick(rng, &names).map(|name| Op::DeleteSnapshot { name })
                }
            }
            _ => Some(Op::Gc),
        };
        if let Some(op) = op {
            return op;
        }
    }
}

fn new_inode(dir: bool) -> NewInode {
    NewInode {
        kind: Model::kind(dir),
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

/// Closes a file's handle, as the kernel does: flush, then release.
fn close(fs: &Fs, model: &mut Model, ino: u64) -> Result<(), FsError> {
    if model.open.remove(&ino) {
        fs.flush(InodeId(ino))?;
        fs.release(InodeId(ino))?;
        model.record(ino);
        model.left_whole(ino);
    }
    Ok(())
}

/// Applies `op` to the file system and, once it succeeded, to the model.
pub fn apply(fs: &Fs, model: &mut Model, op: &Op) -> Result<(), super::AnyError> {
    match op {
        Op::Create { parent, name } | Op::Mkdir { parent, name } => {
            let dir = matches!(op, Op::Mkdir { .. });
            let inode = fs.create(InodeId(*parent), name, new_inode(dir))?;
            model.add(*parent, name, inode.id.0, dir);
            if !dir {
                // A create opens the file, as open(2) with O_CREAT does.
                fs.open(inode.id)?;
                model.open.insert(inode.id.0);
            }
        }
        Op::Write { ino, offset, data } => {
            if !model.open.contains(ino) {
                fs.open(InodeId(*ino))?;
                model.open.insert(*ino);
                model.left_whole(*ino);
            }
            let written = fs.write(InodeId(*ino), *offset, data)?;
            assert_eq!(written as usize, data.len(), "a short write");
            let live = Arc::make_mut(model.live.get_mut(ino).expect("a live file"));
            let end = *offset as usize + data.len();
            if live.len() < end {
                live.resize(end, 0);
            }
            live[*offset as usize..end].copy_from_slice(data);
        }
        Op::Close { ino } => close(fs, model, *ino)?,
        Op::Fsync { ino } => {
            fs.fsync(InodeId(*ino))?;
            synced(model, op);
            if model.open.contains(ino) {
                model.left_whole(*ino);
            }
        }
        Op::Truncate { ino, size } => {
            fs.setattr(InodeId(*ino), &SetAttr::default(), Some(*size))?;
            Arc::make_mut(model.live.get_mut(ino).expect("a live file")).resize(*size as usize, 0);
            model.record(*ino);
        }
        Op::Rename { from, to } => {
            let moved = model.entries[from].0;
            if let Some((target, false)) = model.entries.get(to).copied() {
                if target == moved {
                    // Two names of one file: rename(2) leaves both.
                    fs.rename(
                        InodeId(from.0),
                        &from.1,
                        InodeId(to.0),
                        &to.1,
                        RenameFlags::default(),
                    )?;
                    return Ok(());
                }
                close(fs, model, target)?;
            }
            fs.rename(
                InodeId(from.0),
                &from.1,
                InodeId(to.0),
                &to.1,
                RenameFlags::default(),
            )?;
            let moved = model.entries.remove(from).expect("renamed from an entry");
            if model.entries.contains_key(to) {
                model.remove(to.0, &to.1);
            }
            model.entries.insert(to.clone(), moved);
        }
        Op::Link { ino, to } => {
            fs.link(InodeId(*ino), InodeId(to.0), &to.1)?;
            model.entries.insert(to.clone(), (*ino, false));
        }
        Op::Unlink { parent, name } => {
            let ino = model.entries[&(*parent, name.clone())].0;
            close(fs, model, ino)?;
            fs.unlink(InodeId(*parent), name)?;
            model.remove(*parent, name);
        }
        Op::Rmdir { parent, name } => {
            fs.rmdir(InodeId(*parent), name)?;
            model.remove(*parent, name);
        }
        Op::SyncAll => {
            fs.sync_all()?;
            synced(model, op);
        }
        Op::Version => {
            let report = fs.write_version()?;
            synced(model, op);
            if report.written {
                let tree = model.version().tree();
                model
                    .roots
                    .insert(report.label, Rooted { tree, must: true });
            }
            for label in report.dropped {
                model.roots.remove(&label);
            }
        }
        Op::Snapshot { name } => {
            model.snapshots_named += 1;
            fs.snapshot_create(name)?;
            synced(model, op);
            let tree = model.snapshot().tree();
            model
                .roots
                .insert(format!("{SNAPSHOT}{name}"), Rooted { tree, must: true });
        }
        Op::DeleteSnapshot { name } => {
            fs.snapshot_delete(name)?;
            model.roots.remove(&format!("{SNAPSHOT}{name}"));
        }
        Op::Gc => {
            let options = GcOptions {
                threshold: 1.0,
                dry_run: false,
                max_garbage: 1.0,
                compact_index: false,
                peer_wait: gc::PEER_WAIT,
            };
            // Damage is reported, with the case's seed, by the caller.
            gc::collect(fs.store(), Live::Mounted(fs), options, &|_| {})?;
            synced(model, op);
        }
    }
    Ok(())
}

/// What an operation that the power cut interrupted may have done to the
/// roots: a root it was making may exist, one it was deleting may be gone.
pub fn interrupted(model: &mut Model, op: &Op) {
    match op {
        Op::Version => {
            let next = model
                .roots
                .keys()
                .filter_map(|l| l.strip_prefix(VERSION)?.parse::<u64>().ok())
                .max()
                .unwrap_or(0)
                + 1;
            let tree = model.version().tree();
            model
                .roots
                .insert(format!("{VERSION}{next}"), Rooted { tree, must: false });
            // Retention may drop any older version.
            for (label, rooted) in model.roots.iter_mut() {
                if label.starts_with(VERSION) {
                    rooted.must = false;
                }
            }
        }
        Op::Snapshot { name } => {
            let tree = model.snapshot().tree();
            model
                .roots
                .insert(format!("{SNAPSHOT}{name}"), Rooted { tree, must: false });
        }
        Op::DeleteSnapshot { name } => {
            if let Some(rooted) = model.roots.get_mut(&format!("{SNAPSHOT}{name}")) {
                rooted.must = false;
            }
        }
        _ => {}
    }
}

/// What a sync records in the model: the open files it flushes (a closed
/// file's content is recorded already).
pub fn synced(model: &mut Model, op: &Op) {
    match op {
        Op::Fsync { ino } if model.open.contains(ino) => model.record(*ino),
        Op::SyncAll | Op::Version | Op::Snapshot { .. } | Op::Gc => {
            for ino in model.open.clone() {
                model.record(ino);
            }
        }
        _ => {}
    }
}

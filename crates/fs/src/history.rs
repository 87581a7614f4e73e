//! Versions, snapshots, clones and restores: the file system's history.
//!
//! A version is the whole namespace written into the store as a Merkle tree
//! (see [`crate::tree`]) and rooted as `version/<n>`; the committer writes
//! one every `version_interval` when something changed (and one at
//! unmount), and keeps what the retention rule says ([`crate::retention`]:
//! the newest always, thinning out with age). A snapshot is the same, rooted as `snapshot/<name>` and
//! kept until deleted. Clones and restores copy recipes, never data: a file
//! is a reference to an immutable recipe, so a copy is independent by
//! construction.
//!
//! The history lock serializes writing versions with garbage collection's
//! mark phase: a version carries references from a view of the namespace to
//! a root, and a collection must see them in one place or the other.

use parking_lot::MutexGuard;
use std::collections::{HashMap, HashSet};

use cas::{CasError, ChunkId};
use meta::{Content, FileKind, Inode, InodeId, NewInode, SetAttr, Timestamp, XattrFlags};
use serde::{Deserialize, Serialize};

use crate::reach::{self, MarkSet};
use crate::retention::Dated;
use crate::rules::POLICY_XATTR;
use crate::tree::{self, Record, TreeContent, TreeEntry, TreeStats};
use crate::{Caller, Existing, Fs, FsError, Inner, Missing, NameProblem, Result};

pub const VERSION_PREFIX: &str = "version/";
pub const SNAPSHOT_PREFIX: &str = "snapshot/";

/// What writing a version did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionReport {
    /// `version/<n>`, or the previous version's label when nothing changed.
    pub label: String,
    pub written: bool,
    pub files: u64,
    pub dirs: u64,
    /// Directory listings stored (changed or not: unchanged ones dedupe).
    pub dirs_written: u64,
    /// Bytes the version added to the store, before compression.
    pub new_bytes: u64,
    pub seconds: f64,
    /// Old versions dropped by retention.
    pub dropped: Vec<String>,
}

/// One automatic version, for `cairn versions list`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionInfo {
    /// `version/<n>`.
    pub label: String,
    pub number: u64,
    /// Seconds since the Unix epoch; `None` when its record cannot be read.
    pub created: Option<i64>,
    pub files: u64,
    pub dirs: u64,
    pub logical_bytes: u64,
    /// Until when `[versions]` keeps it, if no newer version is written in
    /// its hour or day (seconds since the epoch); `None` while it is one
    /// of the newest `keep_last`, kept whatever its age.
    pub kept_until: Option<i64>,
}

/// What `cairn versions prune` dropped (or, dry, would drop).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PruneReport {
    pub dropped: Vec<String>,
    pub kept: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub name: String,
    /// Seconds since the Unix epoch.
    pub created: i64,
    pub files: u64,
    pub dirs: u64,
    pub logical_bytes: u64,
    /// Raw bytes of data no other snapshot, version, root or live file holds.
    pub unique_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    pub path: String,
}

/// The newest version as this mount last read it (see
/// `Inner::write_version`).
#[derive(Debug, Clone)]
pub(crate) struct Versioned {
    /// The metadata engine's count of changes before it was read.
    pub(crate) changes: u64,
    pub(crate) label: String,
    pub(crate) files: u64,
    pub(crate) dirs: u64,
    /// The open files it took as of their last close or fsync, and what
    /// it took of them.
    pub(crate) taken: Vec<(InodeId, Content)>,
}

/// What a clone or restore created.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CopyReport {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
}

fn check_snapshot_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(FsError::BadName {
            name: name.to_owned(),
            reason: NameProblem::SnapshotName,
        })
    }
}

/// A missing root read as the missing snapshot `name`.
fn no_root(e: CasError, name: &str) -> FsError {
    match e {
        CasError::NoSuchRoot(_) => FsError::NotFoundNamed {
            name: name.to_owned(),
            missing: Missing::Snapshot,
        },
        e => e.into(),
    }
}

/// `path` is not in snapshot `snapshot`.
fn not_in(path: &str, snapshot: &str) -> FsError {
    FsError::NotFoundNamed {
        name: path.to_owned(),
        missing: Missing::InSnapshot(snapshot.to_owned()),
    }
}

/// Splits a path inside the file system into names ("/a/b", "a/b").
pub(crate) fn components(path: &str) -> Vec<&[u8]> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::as_bytes)
        .collect()
}

impl Fs {
    /// Held while a version is written; garbage collection holds it while it
    /// marks.
    pub fn history_lock(&self) -> MutexGuard<'_, ()> {
        self.inner.history.lock()
    }

    /// The versions, oldest first: (number, record id).
    pub fn versions(&self) -> Result<Vec<(u64, ChunkId)>> {
        self.inner.versions()
    }

    /// Writes a version if anything changed since the last one, then drops
    /// the versions retention no longer keeps.
    pub fn write_version(&self) -> Result<VersionReport> {
        self.inner.write_version()
    }

    /// Drops the versions retention no longer keeps (see
    /// [`crate::retention`]), as writing a version does; returns their
    /// labels. Snapshots are never dropped; nothing is while the live
    /// namespace is empty.
    /// With `apply` false, only names them.
    /// The automatic versions, oldest first, and until when each is kept.
    pub fn version_list(&self) -> Result<Vec<VersionInfo>> {
        let versions = self.inner.versions()?;
        let records: Vec<Option<Record>> = versions
            .iter()
            .map(|(_, id)| tree::read_record(&self.inner.store, id).ok())
            .collect();
        let dated: Vec<Dated> = versions
            .iter()
            .zip(&records)
            .map(|((n, _), r)| Dated {
                number: *n,
                created: r.as_ref().map(|r| r.created.secs),
            })
            .collect();
        let now = self.inner.clock.read().now().secs;
        let until: HashMap<u64, Option<i64>> = self
            .inner
            .settings
            .retention
            .kept_until(&dated, now)
            .into_iter()
            .collect();
        Ok(versions
            .iter()
            .zip(records)
            .map(|((n, _), r)| VersionInfo {
                label: format!("{VERSION_PREFIX}{n}"),
                number: *n,
                created: r.as_ref().map(|r| r.created.secs),
                files: r.as_ref().map_or(0, |r| r.files),
                dirs: r.as_ref().map_or(0, |r| r.dirs),
                logical_bytes: r.as_ref().map_or(0, |r| r.logical_bytes),
                kept_until: until.get(n).copied().flatten(),
            })
            .collect())
    }

    /// Drops every automatic version but the newest `keep` (at least one
    /// stays, for `cairn recover`), whatever `[versions]` says; with
    /// `dry_run`, only names them. Snapshots are never dropped. What only
    /// the dropped versions held is garbage for the next collection.
    pub fn prune_versions(&self, keep: u64, dry_run: bool) -> Result<PruneReport> {
        let _history = self.history_lock();
        let versions = self.inner.versions()?;
        let keep = keep.max(1);
        let drop = versions.len().saturating_sub(keep as usize);
        let mut dropped = Vec::with_capacity(drop);
        for (n, _) in &versions[..drop] {
            let label = format!("{VERSION_PREFIX}{n}");
            if !dry_run {
                self.inner.store.delete_root(&label)?;
            }
            dropped.push(label);
        }
        if !dry_run && !dropped.is_empty() {
            tracing::info!(dropped = dropped.len(), keep, "versions pruned");
        }
        Ok(PruneReport {
            kept: (versions.len() - drop) as u64,
            dropped,
        })
    }

    /// Drops the oldest automatic version, unless it is the only one (then
    /// `None`): what the file system does by itself when space runs low,
    /// before any write fails. Snapshots and labels are never dropped.
    pub fn thin_versions(&self) -> Result<Option<String>> {
        let _history = self.history_lock();
        let versions = self.inner.versions()?;
        let [(oldest, _), _, ..] = versions[..] else {
            return Ok(None);
        };
        let label = format!("{VERSION_PREFIX}{oldest}");
        self.inner.store.delete_root(&label)?;
        Ok(Some(label))
    }

    pub fn apply_retention(&self, apply: bool) -> Result<Vec<String>> {
        let _history = self.history_lock();
        self.inner.retain(apply)
    }

    pub fn snapshot_create(&self, name: &str) -> Result<SnapshotInfo> {
        check_snapshot_name(name)?;
        let label = format!("{SNAPSHOT_PREFIX}{name}");
        let _history = self.history_lock();
        self.inner.history_allowed()?;
        if self.inner.store.get_root(&label).is_ok() {
            return Err(FsError::Exists {
                name: name.to_owned(),
                holder: Existing::Snapshot,
            });
        }
        // A snapshot takes open files as they are now (asked for by name,
        // at a moment the user chose).
        let (id, record, _) = self.inner.write_record(None)?;
        self.inner.store.put_root(&label, &id)?;
        Ok(info(name, &record, None))
    }

    fn snapshot_record(&self, name: &str) -> Result<(ChunkId, Record)> {
        check_snapshot_name(name)?;
        let id = self
            .inner
            .store
            .get_root(&format!("{SNAPSHOT_PREFIX}{name}"))
            .map_err(|e| no_root(e, name))?;
        Ok((id, tree::read_record(&self.inner.store, &id)?))
    }

    /// Every snapshot, by name; with `unique`, also the bytes each alone
    /// holds (one mark pass over everything else per snapshot).
    pub fn snapshot_list(&self, unique: bool) -> Result<Vec<SnapshotInfo>> {
        let roots = self.inner.store.list_roots()?;
        let mut out = Vec::new();
        for (label, id) in &roots {
            let Some(name) = label.strip_prefix(SNAPSHOT_PREFIX) else {
                continue;
            };
            let record = tree::read_record(&self.inner.store, id)?;
            let unique_bytes = if unique {
                let mut others = MarkSet::default();
                self.mark_live(&mut others)?;
                for (other, oid) in &roots {
                    if other != label {
                        others.root(&self.inner.store, oid)?;
                    }
                }
                Some(reach::unique_bytes(&self.inner.store, id, &others)?)
            } else {
                None
            };
            out.push(info(name, &record, unique_bytes));
        }
        Ok(out)
    }

    pub fn snapshot_delete(&self, name: &str) -> Result<()> {
        check_snapshot_name(name)?;
        self.inner
            .store
            .delete_root(&format!("{SNAPSHOT_PREFIX}{name}"))
            .map_err(|e| no_root(e, name))
    }

    /// Paths added, removed and changed from snapshot `a` to snapshot `b`
    /// (directories that did not change are skipped whole).
    pub fn snapshot_diff(&self, a: &str, b: &str) -> Result<Vec<Change>> {
        let (_, ra) = self.snapshot_record(a)?;
        let (_, rb) = self.snapshot_record(b)?;
        let mut out = Vec::new();
        if let (TreeContent::Dir(la), TreeContent::Dir(lb)) = (&ra.root.content, &rb.root.content) {
            self.diff_dirs(la, lb, &mut out)?;
        }
        Ok(out)
    }

    /// Compares two stored directories depth first, as a stack of the
    /// directory pairs on the way down (a tree is as deep as its users make
    /// it) and one path buffer: in each pair, `a`'s entries in order (a
    /// changed subdirectory's changes where it stands), then what only `b`
    /// has.
    fn diff_dirs(&self, a: &ChunkId, b: &ChunkId, out: &mut Vec<Change>) -> Result<()> {
        let mut path = String::new();
        let mut stack = Vec::new();
        if a != b {
            stack.push(self.diff_pair(0, a, b)?);
        }
        let at = |path: &str, e: &TreeEntry| format!("{path}/{}", String::from_utf8_lossy(&e.name));
        while let Some(top) = stack.last_mut() {
            let Some(x) = top.a.next() else {
                let done = stack.pop().expect("the top");
                for y in &done.b {
                    if done.unmatched.contains_key(&y.name) {
                        out.push(Change {
                            kind: ChangeKind::Added,
                            path: at(&path, y),
                        });
                    }
                }
                path.truncate(done.parent_len);
                continue;
            };
            let Some(i) = top.unmatched.remove(&x.name) else {
                out.push(Change {
                    kind: ChangeKind::Removed,
                    path: at(&path, &x),
                });
                continue;
            };
            let y = &top.b[i];
            match (&x.content, &y.content) {
                (TreeContent::Dir(da), TreeContent::Dir(db)) if da != db => {
                    let (da, db) = (*da, *db);
                    let parent_len = path.len();
                    path.push('/');
                    path.push_str(&String::from_utf8_lossy(&x.name));
                    stack.push(self.diff_pair(parent_len, &da, &db)?);
                }
                (TreeContent::Dir(_), TreeContent::Dir(_)) => {}
                _ if x.attr.kind != y.attr.kind => {
                    out.push(Change {
                        kind: ChangeKind::Removed,
                        path: at(&path, &x),
                    });
                    out.push(Change {
                        kind: ChangeKind::Added,
                        path: at(&path, y),
                    });
                }
                _ if !x.same_as(y) => out.push(Change {
                    kind: ChangeKind::Changed,
                    path: at(&path, &x),
                }),
                _ => {}
            }
        }
        Ok(())
    }

    fn diff_pair(&self, parent_len: usize, a: &ChunkId, b: &ChunkId) -> Result<DiffPair> {
        let store = &self.inner.store;
        let b = tree::read_listing(store, b)?;
        // Later duplicates win, as a map built from the listing would.
        let unmatched = b
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        Ok(DiffPair {
            parent_len,
            a: tree::read_listing(store, a)?.into_iter(),
            b,
            unmatched,
        })
    }

    /// The live inode at `path` (relative to the file system's root).
    pub fn resolve(&self, path: &str) -> Result<Inode> {
        let mut inode = self.getattr(InodeId::ROOT)?;
        for name in components(path) {
            inode = self.lookup(inode.id, name).map_err(|e| match e {
                FsError::Meta(meta::MetaError::NotFound) => FsError::NotFoundNamed {
                    name: path.to_owned(),
                    missing: Missing::Path,
                },
                e => e,
            })?;
        }
        Ok(inode)
    }

    /// The directory that will hold `path` and the new name; `missing`
    /// when that directory is not there.
    fn parent_of<'p>(&self, path: &'p str, missing: Missing) -> Result<(InodeId, &'p [u8])> {
        let mut parts = components(path);
        let name = parts.pop().ok_or_else(|| FsError::BadName {
            name: path.to_owned(),
            reason: NameProblem::Root,
        })?;
        let dir = parts
            .iter()
            .try_fold(self.getattr(InodeId::ROOT)?, |d, n| self.lookup(d.id, n))
            .map_err(|_| FsError::NotFoundNamed {
                name: path.to_owned(),
                missing,
            })?;
        Ok((dir.id, name))
    }

    /// Copies the file or tree at `src` to `dst` by copying recipes.
    pub fn clone_path(&self, src: &str, dst: &str) -> Result<CopyReport> {
        let from = self.resolve(src)?;
        let (parent, name) = self.parent_of(dst, Missing::Parent)?;
        let entry = self.live_entry(name.to_vec(), &from)?;
        let mut cx = CopyCx::default();
        self.materialize(parent, &entry, &Source::Live, &mut cx)?;
        Ok(cx.report)
    }

    /// Brings `path` back from snapshot or version `name` (see
    /// [`Fs::stored_entry`]) to `to` (default: the same path), copying
    /// recipes. With `overwrite`, existing files there are replaced and
    /// directories merged; otherwise an existing target is an error.
    pub fn restore(
        &self,
        name: &str,
        path: &str,
        to: Option<&str>,
        overwrite: bool,
    ) -> Result<CopyReport> {
        let mut entry = self.stored_entry(name, path)?;
        let target = to.unwrap_or(path);
        let mut cx = CopyCx::default();
        let source = Source::Stored { overwrite };
        if components(target).is_empty() {
            // Restoring onto the root: merge the snapshot's top level into it.
            let TreeContent::Dir(listing) = &entry.content else {
                return Err(FsError::BadName {
                    name: path.to_owned(),
                    reason: NameProblem::RestoreOntoRoot,
                });
            };
            for child in tree::read_listing(&self.inner.store, listing)? {
                self.materialize(InodeId::ROOT, &child, &source, &mut cx)?;
            }
            return Ok(cx.report);
        }
        let (parent, new_name) = self.parent_of(target, Missing::RestoreParent)?;
        entry.name = new_name.to_vec();
        self.materialize(parent, &entry, &source, &mut cx)?;
        Ok(cx.report)
    }

    /// The entry at `path` in `name`: a snapshot's name, or a label `cairn
    /// roots` lists (`snapshot/<name>`, `version/<n>`).
    pub(crate) fn stored_entry(&self, name: &str, path: &str) -> Result<TreeEntry> {
        let (record, name) = if name.starts_with(VERSION_PREFIX) {
            let id = self.inner.store.get_root(name).map_err(|e| match e {
                CasError::NoSuchRoot(_) => FsError::NotFoundNamed {
                    name: name.to_owned(),
                    missing: Missing::Version,
                },
                e => e.into(),
            })?;
            (tree::read_record(&self.inner.store, &id)?, name)
        } else {
            let name = name.strip_prefix(SNAPSHOT_PREFIX).unwrap_or(name);
            (self.snapshot_record(name)?.1, name)
        };
        let mut entry = record.root;
        for part in components(path) {
            let TreeContent::Dir(listing) = &entry.content else {
                return Err(not_in(path, name));
            };
            entry = tree::read_listing(&self.inner.store, listing)?
                .into_iter()
                .find(|e| e.name == part)
                .ok_or_else(|| not_in(path, name))?;
        }
        Ok(entry)
    }

    /// A live inode as a tree entry (its data recorded first, so an open
    /// file's latest writes are part of the copy).
    fn live_entry(&self, name: Vec<u8>, inode: &Inode) -> Result<TreeEntry> {
        if inode.attr.kind == FileKind::File {
            self.flush(inode.id)?;
        }
        let inode = self.getattr(inode.id)?;
        let content = match (&inode.attr.kind, &inode.content) {
            // No stored listing: `children` reads a live directory's
            // entries from the namespace, by its kind.
            (FileKind::Dir, _) => TreeContent::Empty,
            (_, Content::Empty) => TreeContent::Empty,
            (_, Content::Inline(b)) => TreeContent::Inline(b.clone()),
            (_, Content::Recipe(id)) => TreeContent::Recipe(*id),
        };
        let mut xattrs = Vec::new();
        for x in self.list_xattr(inode.id)? {
            let v = self.get_xattr(inode.id, &x)?;
            xattrs.push((x, v));
        }
        Ok(TreeEntry {
            name,
            ino: inode.id,
            attr: inode.attr,
            content,
            xattrs,
        })
    }

    fn children(&self, entry: &TreeEntry, source: &Source) -> Result<Vec<TreeEntry>> {
        match (source, &entry.content) {
            (Source::Live, _) => {
                let mut out = Vec::new();
                let mut after: Option<Vec<u8>> = None;
                loop {
                    let batch = self.readdir(entry.ino, after.as_deref(), 1024)?;
                    if batch.is_empty() {
                        break;
                    }
                    for e in &batch {
                        let inode = self.getattr(e.ino)?;
                        out.push(self.live_entry(e.name.clone(), &inode)?);
                    }
                    after = batch.last().map(|e| e.name.clone());
                }
                Ok(out)
            }
            (Source::Stored { .. }, TreeContent::Dir(listing)) => {
                tree::read_listing(&self.inner.store, listing)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Creates `entry` (and, for a directory, everything below it) in
    /// `parent`, depth first in name order. Hard links inside the copied
    /// tree stay hard links. The directories on the way down are an
    /// explicit stack: a tree is as deep as its users make it.
    fn materialize(
        &self,
        parent: InodeId,
        entry: &TreeEntry,
        source: &Source,
        cx: &mut CopyCx,
    ) -> Result<()> {
        let mut stack: Vec<CopyDir> = Vec::new();
        let mut on_path = HashSet::new();
        let mut next = self
            .place(parent, entry, source, cx)?
            .map(|copy| (copy, entry.clone()));
        loop {
            if let Some((copy, dir)) = next.take() {
                if !on_path.insert(dir.ino) {
                    return Err(FsError::DirectoryCycle(dir.ino));
                }
                stack.push(CopyDir {
                    copy,
                    left: self.children(&dir, source)?.into_iter(),
                    dir,
                });
            }
            let Some(top) = stack.last_mut() else {
                return Ok(());
            };
            // A copy made inside its own source is not copied again.
            match top.left.find(|child| !cx.made.contains(&child.ino)) {
                Some(child) => {
                    next = self
                        .place(top.copy, &child, source, cx)?
                        .map(|copy| (copy, child));
                }
                None => {
                    let done = stack.pop().expect("the top");
                    on_path.remove(&done.dir.ino);
                    self.copy_times(done.copy, &done.dir.attr)?;
                }
            }
        }
    }

    /// Creates `entry` in `parent`: a file or link whole, a directory
    /// itself only, returning its copy for the caller to fill (and then
    /// give its times).
    fn place(
        &self,
        parent: InodeId,
        entry: &TreeEntry,
        source: &Source,
        cx: &mut CopyCx,
    ) -> Result<Option<InodeId>> {
        let a = &entry.attr;
        let overwrite = matches!(source, Source::Stored { overwrite: true });
        let existing = match self.lookup(parent, &entry.name) {
            Ok(cur) if overwrite && cur.attr.kind != FileKind::Dir && a.kind != FileKind::Dir => {
                self.unlink(parent, &entry.name)?;
                None
            }
            Ok(i) => Some(i),
            Err(FsError::Meta(meta::MetaError::NotFound)) => None,
            Err(e) => return Err(e),
        };
        let created = match existing {
            Some(cur) if overwrite && cur.attr.kind == FileKind::Dir && a.kind == FileKind::Dir => {
                cur
            }
            Some(_) => {
                return Err(FsError::Exists {
                    name: String::from_utf8_lossy(&entry.name).into_owned(),
                    holder: match source {
                        Source::Live => Existing::Entry,
                        Source::Stored { .. } => Existing::Restored,
                    },
                })
            }
            None => {
                if a.kind != FileKind::Dir {
                    if let Some(&target) = cx.links.get(&entry.ino) {
                        self.link(target, parent, &entry.name)?;
                        return Ok(None);
                    }
                }
                let content = match &entry.content {
                    TreeContent::Inline(b) => Content::Inline(b.clone()),
                    _ => Content::Empty,
                };
                let new = NewInode {
                    kind: a.kind,
                    perm: a.perm,
                    uid: a.uid,
                    gid: a.gid,
                    rdev: a.rdev,
                    content,
                    xattrs: Vec::new(),
                };
                self.create(parent, &entry.name, new)?
            }
        };
        cx.made.insert(created.id);
        if let TreeContent::Recipe(id) = entry.content {
            self.inner
                .meta
                .set_content(created.id, Content::Recipe(id), a.size, a.mtime)?;
        }
        for (name, value) in &entry.xattrs {
            self.set_xattr(created.id, name, value, XattrFlags::Either, &Caller::root())?;
        }
        let policy_set = entry.xattrs.iter().any(|(n, _)| n == POLICY_XATTR);
        if let (TreeContent::Recipe(root), false) = (&entry.content, policy_set) {
            // A policy xattr re-stores the copy itself (`set_xattr`); else
            // the copy's place may ask more than the source's chunks have.
            self.inner.protect_shared(created.id, a.size, *root);
        }
        if a.kind == FileKind::Dir {
            cx.report.dirs += 1;
            return Ok(Some(created.id));
        }
        cx.report.files += 1;
        cx.report.bytes += a.size;
        cx.links.insert(entry.ino, created.id);
        self.copy_times(created.id, a)?;
        Ok(None)
    }

    /// Gives a copy its source's access and modification times (last: a
    /// directory's change as its entries are made).
    fn copy_times(&self, copy: InodeId, a: &meta::Attr) -> Result<()> {
        let times = SetAttr {
            atime: Some(a.atime),
            mtime: Some(a.mtime),
            ..Default::default()
        };
        self.inner.meta.set_attr(copy, &times, Timestamp::now())?;
        Ok(())
    }

    /// Marks everything the live file system references: every inode's
    /// recipe and every open file's extents (including data written but not
    /// yet recorded). Call with the history lock held, and with the store's
    /// dedup recording on: an apply in flight is waited for, since the
    /// chunks it found already stored before the recording began are in
    /// none of the places marked until it is spliced in.
    pub fn mark_live(&self, set: &mut MarkSet) -> Result<()> {
        self.mark_open(set)?;
        let view = self.inner.meta.view()?;
        set.namespace(&self.inner.store, view.as_ref())
    }

    /// The open files' part of [`Fs::mark_live`]: what this mount's handles
    /// reach, recorded or not (another client's collection asks for it).
    pub fn mark_open(&self, set: &mut MarkSet) -> Result<()> {
        let open: Vec<_> = self.inner.files.lock().values().cloned().collect();
        for state in open {
            let f = self.inner.lock_settled(&state);
            set.chunks(f.extents.iter().filter_map(|e| e.chunk));
            if let Content::Recipe(id) = f.content {
                set.recipe(&self.inner.store, &id)?;
            }
            // What a version takes of the file, perhaps not written yet.
            if let Some(crate::tree::LeftWhole {
                content: Content::Recipe(id),
                ..
            }) = f.left_whole
            {
                set.recipe(&self.inner.store, &id)?;
            }
        }
        Ok(())
    }

    /// Refuses versions and snapshots while client `collector`'s
    /// collection runs (`Some`), or allows them again (`None`). Call with
    /// the history lock held when pausing, so that no version is half
    /// written.
    pub fn pause_history(&self, collector: Option<u64>) {
        *self.inner.history_paused.lock() = collector;
    }

    /// Where the clients of a shared namespace agree on a collection
    /// (`None` when this file system's namespace is its own).
    pub fn board(&self) -> Option<&dyn meta::CollectionBoard> {
        self.inner.meta.board()
    }

    /// Gives up what the namespace engine holds for this client
    /// (`MetaStore::close`), after [`Fs::shutdown`]: nothing may be asked
    /// of this file system after it.
    pub fn close_namespace(&self) {
        self.inner.meta.close();
    }
}

/// The state of one clone or restore.
#[derive(Default)]
struct CopyCx {
    /// Source inode -> its copy, so hard links stay links.
    links: HashMap<InodeId, InodeId>,
    /// Inodes this copy created.
    made: HashSet<InodeId>,
    report: CopyReport,
}

enum Source {
    Live,
    Stored { overwrite: bool },
}

/// A directory being copied: its copy, and its entries not copied yet.
struct CopyDir {
    copy: InodeId,
    dir: TreeEntry,
    left: std::vec::IntoIter<TreeEntry>,
}

/// Two stored directories being compared: the entries of `a` left, and
/// the names of `b` that no entry of `a` matched so far.
struct DiffPair {
    /// The length of the path of the directory holding this pair.
    parent_len: usize,
    a: std::vec::IntoIter<TreeEntry>,
    b: Vec<TreeEntry>,
    unmatched: HashMap<Vec<u8>, usize>,
}

impl Inner {
    /// Writes the namespace as it is now into the store (everything written
    /// before the call included) and returns the record's id, durable.
    /// A file in `taken` is written as given there, not as it is (see
    /// [`Inner::left_whole`]).
    pub(crate) fn write_record(
        &self,
        taken: Option<&HashMap<InodeId, tree::LeftWhole>>,
    ) -> Result<(ChunkId, Record, TreeStats)> {
        self.sync_all()?;
        let view = self.meta.view()?;
        let mut writer = self.store.stream();
        let created = self.clock.read().now();
        let none = HashMap::new();
        let taken = taken.unwrap_or(&none);
        let out = tree::write_tree(view.as_ref(), taken, &mut writer, self.params, created)?;
        writer.flush()?;
        // Files recorded between the sync above and the view: their data
        // must be durable before a root reaches it.
        self.commit()?;
        Ok(out)
    }

    /// The open files whose writes were recorded since their last close or
    /// fsync, as they were then: what a version takes of them, so that it
    /// never pins a half-written file.
    pub(crate) fn left_whole(&self) -> HashMap<InodeId, tree::LeftWhole> {
        let open: Vec<_> = self.files.lock().values().cloned().collect();
        let mut out = HashMap::new();
        for state in open {
            let f = state.lock();
            if let Some(s) = &f.left_whole {
                out.insert(f.ino, s.clone());
            }
        }
        out
    }

    /// The versions, oldest first: (number, record id).
    pub(crate) fn versions(&self) -> Result<Vec<(u64, ChunkId)>> {
        let mut out: Vec<(u64, ChunkId)> = self
            .store
            .list_roots()?
            .into_iter()
            .filter_map(|(label, id)| {
                let n = label.strip_prefix(VERSION_PREFIX)?.parse().ok()?;
                Some((n, id))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// [`FsError::HistoryPaused`] while another client's collection runs;
    /// the engine's error once this client was forgotten by the others
    /// (a collection may have run without it, so a root it wrote now
    /// could name chunks that are gone).
    fn history_allowed(&self) -> Result<()> {
        if let Some(collector) = *self.history_paused.lock() {
            return Err(FsError::HistoryPaused { collector });
        }
        if let Some(board) = self.meta.board() {
            board.may_write()?;
        }
        Ok(())
    }

    /// Writes a version if anything changed since the last one, then drops
    /// the versions retention no longer keeps.
    ///
    /// Whether anything changed is first asked of the metadata engine's
    /// count of changes ([`meta::MetaStore::changes`]): while it stays
    /// where it was when the newest version was read, the namespace is not
    /// walked again (a walk costs time in proportion to the tree, and
    /// stores a new record). Otherwise the tree is written and compared
    /// with the newest version's.
    pub(crate) fn write_version(&self) -> Result<VersionReport> {
        let started = std::time::Instant::now();
        let _history = self.history.lock();
        self.history_allowed()?;
        // Open files recorded first: their writes are changes too.
        self.sync_all()?;
        // Read before the walk syncs again: each change counted here is in
        // what the walk sees.
        let seen = self.meta.changes();
        let taken = self.left_whole();
        let mut taken_ids: Vec<(InodeId, Content)> = taken
            .iter()
            .map(|(ino, s)| (*ino, s.content.clone()))
            .collect();
        taken_ids.sort_by_key(|(ino, _)| *ino);
        let versions = self.versions()?;
        let newest = versions.last().map(|(n, _)| format!("{VERSION_PREFIX}{n}"));
        let known = self.versioned.lock().clone();
        let (label, written, files, dirs, stats) = match known {
            Some(v)
                if seen == Some(v.changes)
                    && newest.as_ref() == Some(&v.label)
                    && v.taken == taken_ids =>
            {
                (v.label, false, v.files, v.dirs, TreeStats::default())
            }
            _ => {
                let (id, record, stats) = self.write_record(Some(&taken))?;
                let unchanged = match versions.last() {
                    Some((_, last)) => tree::read_record(&self.store, last)
                        .map(|r| {
                            r.root.content == record.root.content && r.root.same_as(&record.root)
                        })
                        .unwrap_or(false),
                    None => false,
                };
                let label = match (unchanged, newest) {
                    (true, Some(newest)) => newest,
                    _ => {
                        let next = versions.last().map_or(1, |(n, _)| n + 1);
                        let label = format!("{VERSION_PREFIX}{next}");
                        self.store.put_root(&label, &id)?;
                        label
                    }
                };
                if let Some(changes) = seen {
                    *self.versioned.lock() = Some(Versioned {
                        changes,
                        label: label.clone(),
                        files: record.files,
                        dirs: record.dirs,
                        taken: taken_ids,
                    });
                }
                (label, !unchanged, record.files, record.dirs, stats)
            }
        };
        let dropped = self.retain(true)?;
        Ok(VersionReport {
            label,
            written,
            files,
            dirs,
            dirs_written: stats.dirs_written,
            new_bytes: stats.new_bytes,
            seconds: started.elapsed().as_secs_f64(),
            dropped,
        })
    }

    /// Drops the versions the retention rule no longer keeps (with `apply`;
    /// else only names them) and returns their labels. Call with the
    /// history lock held.
    ///
    /// Nothing is dropped while the live namespace is empty: an empty
    /// metadata engine over a store full of versions is far more often a
    /// lost one than a deliberate `rm -rf`, and the versions are then the
    /// only copy of the tree.
    pub(crate) fn retain(&self, apply: bool) -> Result<Vec<String>> {
        let versions = self.versions()?;
        if versions.len() <= 1 {
            return Ok(Vec::new());
        }
        let dated: Vec<Dated> = versions
            .iter()
            .map(|(n, id)| Dated {
                number: *n,
                created: tree::read_record(&self.store, id)
                    .map(|r| r.created.secs)
                    .ok(),
            })
            .collect();
        let now = self.clock.read().now().secs;
        let kept = self.settings.retention.kept(&dated, now);
        if kept.len() == versions.len() {
            return Ok(Vec::new());
        }
        if self.meta.readdir(InodeId::ROOT, None, 1)?.is_empty() {
            // Said once per mount: the committer asks every interval.
            if !self
                .empty_said
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    versions = versions.len(),
                    "the file system is empty: retention drops no version until it holds files again"
                );
            }
            return Ok(Vec::new());
        }
        let mut dropped = Vec::new();
        for (n, _) in &versions {
            if !kept.contains(n) {
                let old = format!("{VERSION_PREFIX}{n}");
                if apply {
                    self.store.delete_root(&old)?;
                }
                dropped.push(old);
            }
        }
        if apply && !dropped.is_empty() {
            tracing::info!(
                dropped = dropped.len(),
                kept = kept.len(),
                "retention dropped old versions"
            );
        }
        Ok(dropped)
    }
}

fn info(name: &str, r: &Record, unique_bytes: Option<u64>) -> SnapshotInfo {
    SnapshotInfo {
        name: name.to_string(),
        created: r.created.secs,
        files: r.files,
        dirs: r.dirs,
        logical_bytes: r.logical_bytes,
        unique_bytes,
    }
}

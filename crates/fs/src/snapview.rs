//! `MOUNTPOINT/.snapshots/NAME/`: every snapshot as a read-only tree.
//!
//! The snapshots' inodes live in a range of inode numbers no live inode
//! reaches (from [`SNAP_BASE`] up): `.snapshots` itself is `SNAP_BASE`, and
//! the inode `i` of the `k`-th snapshot seen by this mount is
//! `SNAP_BASE + k * 2^40 + i`, so hard links inside a snapshot keep sharing
//! a number. (Live inode numbers stay below 2^40 for that; a repository
//! would need a trillion files to reach it.) A number outside that range
//! is [`FsError::SnapshotInodeRange`], never a wrapped inode number.
//! `.snapshots` is hidden from the root's listing but found by name; every
//! change under it fails with EROFS.
//!
//! Entries are served from the stored listings, read on demand and kept in
//! a small LRU; an entry seen by a lookup or a listing stays known while it
//! is among the [`NODES_KNOWN`] most recently used, or open. One the kernel
//! asks for after that is [`FsError::Forgotten`] (ESTALE), and the kernel
//! looks its name up again.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use cas::ChunkId;
use meta::{Attr, DirEntry, FileKind, Inode, InodeId, MetaError, Timestamp};
use recipe::Recipe;

use crate::history::SNAPSHOT_PREFIX;
use crate::tree::{self, TreeContent, TreeEntry};
use crate::{Fs, FsError, Result};

pub const SNAP_BASE: u64 = 1 << 60;
/// The name of the hidden directory in the root.
pub const SNAPSHOTS_DIR: &[u8] = b".snapshots";
const SNAPS: InodeId = InodeId(SNAP_BASE);
const SPAN_BITS: u32 = 40;
/// Snapshots one mount can number: `SNAP_BASE + k * 2^40` must stay below
/// 2^64, so `k` below 2^24 - 2^20 (about 15 million: names are only
/// numbered when looked up or listed).
const SNAPSHOT_NUMBERS: u64 = (u64::MAX - SNAP_BASE) >> SPAN_BITS;
const LISTINGS_CACHED: usize = 256;
/// Entries remembered for the kernel. Each is a few hundred bytes (a small
/// file's content is inline, up to the inline limit), so this holds tens of
/// MiB at most, yet more entries than the kernel keeps cached for a walk
/// of a tree: an evicted one it still asks for is rare and recoverable.
pub const NODES_KNOWN: usize = 1 << 17;

pub fn is_virtual(ino: InodeId) -> bool {
    ino.0 >= SNAP_BASE
}

/// Whether `name` in `parent` is the `.snapshots` directory.
pub fn is_snapshots_name(parent: InodeId, name: &[u8]) -> bool {
    parent == InodeId::ROOT && name == SNAPSHOTS_DIR
}

/// The number of inode `orig` of the `k`-th snapshot.
fn vino(k: u64, orig: InodeId) -> Result<InodeId> {
    if k == 0 || k >= SNAPSHOT_NUMBERS || orig.0 >> SPAN_BITS != 0 {
        return Err(FsError::SnapshotInodeRange {
            snapshot: k,
            ino: orig,
        });
    }
    Ok(InodeId(SNAP_BASE + (k << SPAN_BITS) + orig.0))
}

fn snapshot_of(ino: InodeId) -> u64 {
    (ino.0 - SNAP_BASE) >> SPAN_BITS
}

pub(crate) struct SnapView {
    /// Snapshot names by their number `k` (from 1) in this mount.
    names: Mutex<Vec<String>>,
    nodes: Mutex<lru::LruCache<InodeId, Arc<TreeEntry>>>,
    listings: Mutex<lru::LruCache<ChunkId, Arc<Vec<TreeEntry>>>>,
    /// Open files with their entries, so an open file is never forgotten.
    open: Mutex<HashMap<InodeId, Open>>,
}

struct Open {
    entry: Arc<TreeEntry>,
    recipe: Option<Arc<Recipe>>,
    handles: u32,
}

impl Default for SnapView {
    fn default() -> Self {
        SnapView {
            names: Mutex::new(Vec::new()),
            nodes: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(NODES_KNOWN).expect("nonzero"),
            )),
            listings: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(LISTINGS_CACHED).expect("nonzero"),
            )),
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl SnapView {
    /// The number of snapshot `name` in this mount, from 1; past
    /// [`SNAPSHOT_NUMBERS`] names, [`FsError::SnapshotInodeRange`].
    fn number(&self, name: &str) -> Result<u64> {
        let mut names = self.names.lock();
        match names.iter().position(|n| n == name) {
            Some(i) => Ok(i as u64 + 1),
            None if names.len() as u64 + 1 >= SNAPSHOT_NUMBERS => {
                Err(FsError::SnapshotInodeRange {
                    snapshot: names.len() as u64 + 1,
                    ino: InodeId::ROOT,
                })
            }
            None => {
                names.push(name.to_string());
                Ok(names.len() as u64)
            }
        }
    }

    fn remember(&self, ino: InodeId, entry: TreeEntry) -> Inode {
        let inode = as_inode(ino, &entry);
        self.nodes.lock().put(ino, Arc::new(entry));
        inode
    }

    fn node(&self, ino: InodeId) -> Result<Arc<TreeEntry>> {
        if let Some(e) = self.nodes.lock().get(&ino) {
            return Ok(e.clone());
        }
        match self.open.lock().get(&ino) {
            Some(o) => Ok(o.entry.clone()),
            None => Err(FsError::Forgotten(ino)),
        }
    }
}

fn as_inode(ino: InodeId, e: &TreeEntry) -> Inode {
    Inode {
        id: ino,
        attr: Attr {
            nlink: if e.attr.kind == FileKind::Dir { 2 } else { 1 },
            ..e.attr
        },
        content: e.meta_content(),
    }
}

impl Fs {
    fn snapshots_dir(&self) -> Result<Inode> {
        let root = self.inner.meta.get(InodeId::ROOT)?;
        let now = Timestamp::now();
        Ok(Inode {
            id: SNAPS,
            attr: Attr {
                kind: FileKind::Dir,
                perm: 0o555,
                size: 0,
                nlink: 2,
                rdev: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: root.attr.crtime,
                ..root.attr
            },
            content: meta::Content::Empty,
        })
    }

    fn listing(&self, dir: &TreeEntry) -> Result<Arc<Vec<TreeEntry>>> {
        let TreeContent::Dir(root) = dir.content else {
            return Err(MetaError::NotDir.into());
        };
        let view = &self.inner.snapshots;
        if let Some(l) = view.listings.lock().get(&root) {
            return Ok(l.clone());
        }
        let entries = Arc::new(tree::read_listing(&self.inner.store, &root)?);
        view.listings.lock().put(root, entries.clone());
        Ok(entries)
    }

    fn snapshot_root(&self, name: &[u8]) -> Result<Inode> {
        let name = std::str::from_utf8(name).map_err(|_| MetaError::NotFound)?;
        let id = self
            .inner
            .store
            .get_root(&format!("{SNAPSHOT_PREFIX}{name}"))
            .map_err(|_| MetaError::NotFound)?;
        let record = tree::read_record(&self.inner.store, &id)?;
        let view = &self.inner.snapshots;
        let ino = vino(view.number(name)?, InodeId::ROOT)?;
        Ok(view.remember(ino, record.root))
    }

    pub(crate) fn snap_getattr(&self, ino: InodeId) -> Result<Inode> {
        if ino == SNAPS {
            return self.snapshots_dir();
        }
        Ok(as_inode(ino, self.inner.snapshots.node(ino)?.as_ref()))
    }

    /// See [`Fs::parent`]: stored trees keep no parent pointers.
    pub(crate) fn snap_parent(&self, dir: InodeId) -> InodeId {
        if dir == SNAPS {
            return InodeId::ROOT;
        }
        match vino(snapshot_of(dir), InodeId::ROOT) {
            Ok(root) if root == dir => SNAPS,
            _ => dir,
        }
    }

    pub(crate) fn snap_lookup(&self, parent: InodeId, name: &[u8]) -> Result<Inode> {
        if parent == SNAPS {
            return self.snapshot_root(name);
        }
        let dir = self.inner.snapshots.node(parent)?;
        let entries = self.listing(&dir)?;
        let i = entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .map_err(|_| MetaError::NotFound)?;
        let e = entries[i].clone();
        let ino = vino(snapshot_of(parent), e.ino)?;
        Ok(self.inner.snapshots.remember(ino, e))
    }

    pub(crate) fn snap_readdir(
        &self,
        dir: InodeId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let past = |name: &[u8]| after.is_none_or(|a| name > a);
        if dir == SNAPS {
            let mut names: Vec<String> = self
                .inner
                .store
                .list_roots()?
                .into_iter()
                .filter_map(|(l, _)| l.strip_prefix(SNAPSHOT_PREFIX).map(str::to_string))
                .collect();
            names.sort();
            for name in names.into_iter().filter(|n| past(n.as_bytes())).take(limit) {
                let k = self.inner.snapshots.number(&name)?;
                out.push(DirEntry {
                    name: name.into_bytes(),
                    ino: vino(k, InodeId::ROOT)?,
                    kind: FileKind::Dir,
                });
            }
            return Ok(out);
        }
        let node = self.inner.snapshots.node(dir)?;
        let k = snapshot_of(dir);
        for e in self
            .listing(&node)?
            .iter()
            .filter(|e| past(&e.name))
            .take(limit)
        {
            let ino = vino(k, e.ino)?;
            out.push(DirEntry {
                name: e.name.clone(),
                ino,
                kind: e.attr.kind,
            });
            self.inner.snapshots.remember(ino, e.clone());
        }
        Ok(out)
    }

    pub(crate) fn snap_open(&self, ino: InodeId) -> Result<()> {
        let node = self.inner.snapshots.node(ino)?;
        match node.content {
            TreeContent::Dir(_) => Err(MetaError::IsDir.into()),
            TreeContent::Recipe(root) => {
                let mut open = self.inner.snapshots.open.lock();
                if let Some(slot) = open.get_mut(&ino) {
                    slot.handles += 1;
                } else {
                    let recipe = Arc::new(Recipe::open(&self.inner.store, root)?);
                    open.insert(
                        ino,
                        Open {
                            entry: node,
                            recipe: Some(recipe),
                            handles: 1,
                        },
                    );
                }
                Ok(())
            }
            _ => {
                let mut open = self.inner.snapshots.open.lock();
                open.entry(ino)
                    .or_insert(Open {
                        entry: node,
                        recipe: None,
                        handles: 0,
                    })
                    .handles += 1;
                Ok(())
            }
        }
    }

    pub(crate) fn snap_release(&self, ino: InodeId) {
        let mut open = self.inner.snapshots.open.lock();
        if let Some(slot) = open.get_mut(&ino) {
            slot.handles -= 1;
            if slot.handles == 0 {
                open.remove(&ino);
            }
        }
    }

    pub(crate) fn snap_read(&self, ino: InodeId, offset: u64, len: u32) -> Result<Vec<u8>> {
        let node = self.inner.snapshots.node(ino)?;
        let end = (offset + len as u64).min(node.attr.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        match &node.content {
            TreeContent::Inline(b) => Ok(b[offset as usize..end as usize].to_vec()),
            TreeContent::Recipe(root) => {
                let opened = self
                    .inner
                    .snapshots
                    .open
                    .lock()
                    .get(&ino)
                    .and_then(|o| o.recipe.clone());
                let recipe = match opened {
                    Some(r) => r,
                    None => Arc::new(Recipe::open(&self.inner.store, *root)?),
                };
                Ok(recipe.read_at(offset, end - offset)?)
            }
            TreeContent::Empty => Ok(vec![0; (end - offset) as usize]),
            TreeContent::Dir(_) => Err(MetaError::IsDir.into()),
        }
    }

    pub(crate) fn snap_readlink(&self, ino: InodeId) -> Result<Vec<u8>> {
        match (&self.inner.snapshots.node(ino)?.as_ref(), ino == SNAPS) {
            (
                TreeEntry {
                    content: TreeContent::Inline(target),
                    attr:
                        Attr {
                            kind: FileKind::Symlink,
                            ..
                        },
                    ..
                },
                false,
            ) => Ok(target.clone()),
            _ => Err(MetaError::Invalid("not a symbolic link").into()),
        }
    }

    pub(crate) fn snap_xattrs(&self, ino: InodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if ino == SNAPS {
            return Ok(Vec::new());
        }
        Ok(self.inner.snapshots.node(ino)?.xattrs.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ino: u64) -> TreeEntry {
        let t = Timestamp::default();
        TreeEntry {
            name: format!("f{ino}").into_bytes(),
            ino: InodeId(ino),
            attr: Attr {
                kind: FileKind::File,
                perm: 0o644,
                uid: 0,
                gid: 0,
                size: 0,
                nlink: 1,
                rdev: 0,
                atime: t,
                mtime: t,
                ctime: t,
                crtime: t,
            },
            content: TreeContent::Empty,
            xattrs: Vec::new(),
        }
    }

    #[test]
    fn snapshot_inode_numbers_never_wrap() {
        let last = vino(SNAPSHOT_NUMBERS - 1, InodeId((1 << SPAN_BITS) - 1)).unwrap();
        assert!(is_virtual(last));
        assert_eq!(snapshot_of(last), SNAPSHOT_NUMBERS - 1);
        assert!(matches!(
            vino(SNAPSHOT_NUMBERS, InodeId::ROOT),
            Err(FsError::SnapshotInodeRange { .. })
        ));
        assert!(matches!(
            vino(1, InodeId(1 << SPAN_BITS)),
            Err(FsError::SnapshotInodeRange { .. })
        ));
        assert!(vino(0, InodeId::ROOT).is_err(), "0 is .snapshots itself");
    }

    #[test]
    fn remembered_entries_are_bounded_and_open_ones_are_kept() {
        let view = SnapView::default();
        let first = vino(1, InodeId(2)).unwrap();
        view.remember(first, entry(2));
        let open = vino(1, InodeId(3)).unwrap();
        view.remember(open, entry(3));
        view.open.lock().insert(
            open,
            Open {
                entry: view.node(open).unwrap(),
                recipe: None,
                handles: 1,
            },
        );
        for i in 0..NODES_KNOWN as u64 {
            view.remember(vino(1, InodeId(10 + i)).unwrap(), entry(10 + i));
        }
        assert_eq!(view.nodes.lock().len(), NODES_KNOWN);
        assert!(matches!(view.node(first), Err(FsError::Forgotten(_))));
        assert_eq!(view.node(open).unwrap().ino, InodeId(3));
        assert_eq!(FsError::Forgotten(first).errno(), libc::ESTALE);
    }
}

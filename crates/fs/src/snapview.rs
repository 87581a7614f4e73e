//! `MOUNTPOINT/.snapshots/NAME/`: every snapshot as a read-only tree.
//!
//! The snapshots' inodes live in a range of inode numbers no live inode
//! reaches (from [`SNAP_BASE`] up): `.snapshots` itself is `SNAP_BASE`, and
//! the inode `i` of the `k`-th snapshot seen by this mount is
//! `SNAP_BASE + k * 2^40 + i`, so hard links inside a snapshot keep sharing
//! a number. (Live inode numbers stay below 2^40 for that; a repository
//! would need a trillion files to reach it.) `.snapshots` is hidden from the
//! root's listing but found by name; every change under it fails with EROFS.
//!
//! Entries are served from the stored listings, read on demand and kept in
//! a small LRU; an entry seen by a lookup or a listing stays known for the
//! mount's life (a few hundred bytes each), since the kernel may ask for
//! its attributes at any time later.

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
const LISTINGS_CACHED: usize = 256;

pub fn is_virtual(ino: InodeId) -> bool {
    ino.0 >= SNAP_BASE
}

/// Whether `name` in `parent` is the `.snapshots` directory.
pub fn is_snapshots_name(parent: InodeId, name: &[u8]) -> bool {
    parent == InodeId::ROOT && name == SNAPSHOTS_DIR
}

fn vino(k: u64, orig: InodeId) -> InodeId {
    InodeId(SNAP_BASE + (k << SPAN_BITS) + orig.0)
}

fn snapshot_of(ino: InodeId) -> u64 {
    (ino.0 - SNAP_BASE) >> SPAN_BITS
}

pub(crate) struct SnapView {
    /// Snapshot names by their number `k` (from 1) in this mount.
    names: Mutex<Vec<String>>,
    nodes: Mutex<HashMap<InodeId, Arc<TreeEntry>>>,
    listings: Mutex<lru::LruCache<ChunkId, Arc<Vec<TreeEntry>>>>,
    open: Mutex<HashMap<InodeId, (Arc<Recipe>, u32)>>,
}

impl Default for SnapView {
    fn default() -> Self {
        SnapView {
            names: Mutex::new(Vec::new()),
            nodes: Mutex::new(HashMap::new()),
            listings: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(LISTINGS_CACHED).expect("nonzero"),
            )),
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl SnapView {
    fn number(&self, name: &str) -> u64 {
        let mut names = self.names.lock();
        match names.iter().position(|n| n == name) {
            Some(i) => i as u64 + 1,
            None => {
                names.push(name.to_string());
                names.len() as u64
            }
        }
    }

    fn remember(&self, ino: InodeId, entry: TreeEntry) -> Inode {
        let inode = as_inode(ino, &entry);
        self.nodes.lock().insert(ino, Arc::new(entry));
        inode
    }

    fn node(&self, ino: InodeId) -> Result<Arc<TreeEntry>> {
        self.nodes
            .lock()
            .get(&ino)
            .cloned()
            .ok_or(FsError::Meta(MetaError::NotFound))
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
        let ino = vino(view.number(name), InodeId::ROOT);
        Ok(view.remember(ino, record.root))
    }

    pub(crate) fn snap_getattr(&self, ino: InodeId) -> Result<Inode> {
        if ino == SNAPS {
            return self.snapshots_dir();
        }
        Ok(as_inode(ino, self.inner.snapshots.node(ino)?.as_ref()))
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
        let ino = vino(snapshot_of(parent), e.ino);
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
                let k = self.inner.snapshots.number(&name);
                out.push(DirEntry {
                    name: name.into_bytes(),
                    ino: vino(k, InodeId::ROOT),
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
            let ino = vino(k, e.ino);
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
                    slot.1 += 1;
                } else {
                    let recipe = Arc::new(Recipe::open(&self.inner.store, root)?);
                    open.insert(ino, (recipe, 1));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn snap_release(&self, ino: InodeId) {
        let mut open = self.inner.snapshots.open.lock();
        if let Some(slot) = open.get_mut(&ino) {
            slot.1 -= 1;
            if slot.1 == 0 {
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
                let recipe = match self.inner.snapshots.open.lock().get(&ino) {
                    Some((r, _)) => r.clone(),
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

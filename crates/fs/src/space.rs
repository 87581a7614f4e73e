//! What holds the store's space, and how much deduplication and
//! compression save: the numbers `cairn stats` prints, computed the same
//! way whether the file system is mounted or not.
//!
//! **Dedup and compression are separate ratios.**
//! - dedup = logical bytes (live files, inline ones included, plus stored
//!   streams) / the bytes that hold them before compression: the distinct
//!   data chunks they reach, plus every inline file's bytes (kept in its
//!   inode, one copy per file: inline files are never deduplicated).
//! - compression = raw bytes of every chunk in the containers / container
//!   bytes on disk.
//!
//! **What holds space**, in raw (uncompressed) bytes of data chunks, each
//! chunk counted once, in the first of these that reaches it: live files,
//! stored streams (`cairn put`), then what only snapshots hold, only
//! versions hold, or snapshots and versions share (a version's or
//! snapshot's directory listings count as its data). The rest of the
//! containers' raw bytes are recipe nodes, version records and garbage
//! that `cairn gc` can reclaim.
//!
//! The cost is a mark pass over everything (as a collection's), and a
//! second over the versions and snapshots when there are both; memory is
//! a mark set (8 bytes per reachable chunk), twice over in that case.

use cas::Store;
use meta::{Content, FileKind, MetaView};
use serde::{Deserialize, Serialize};

use crate::history::{SNAPSHOT_PREFIX, VERSION_PREFIX};
use crate::reach::MarkSet;
use crate::Result;

/// The live file system's counts and sizes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveUsage {
    pub files: u64,
    pub dirs: u64,
    /// Sizes of regular files, hard links counted once.
    pub logical_bytes: u64,
    /// Bytes of the files kept inline in their inodes.
    pub inline_bytes: u64,
    pub inline_files: u64,
}

/// Raw bytes of data chunks, by what holds them (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub live_bytes: u64,
    pub stored_streams_bytes: u64,
    pub snapshots_only_bytes: u64,
    pub versions_only_bytes: u64,
    pub snapshots_and_versions_bytes: u64,
    /// Recipe nodes, version records, and garbage `gc` can reclaim.
    pub other_bytes: u64,
}

/// Everything `cairn stats` reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpaceReport {
    pub roots: u64,
    pub versions: u64,
    pub snapshots: u64,
    /// Live files plus every stored stream.
    pub logical_bytes: u64,
    /// The live file system's files (every kind but directories), its
    /// directories, the sizes of its regular files, and the bytes and
    /// files kept inline; `None` when the repository has no file system
    /// (never mounted).
    pub fs_files: Option<u64>,
    pub fs_dirs: Option<u64>,
    pub fs_logical_bytes: Option<u64>,
    pub fs_inline_bytes: Option<u64>,
    pub fs_inline_files: Option<u64>,
    /// What the logical bytes take before compression: the distinct data
    /// chunks they reach, plus inline bytes.
    pub referenced_bytes: u64,
    /// Raw bytes of every chunk in the containers.
    pub unique_bytes: u64,
    /// Container bytes on the branches (after compression).
    pub stored_bytes: u64,
    /// logical / referenced.
    pub dedup_ratio: f64,
    /// unique / stored.
    pub compression_ratio: f64,
    pub held: Held,
    pub chunks: u64,
    pub containers: u64,
    pub index_ram_bytes: u64,
    pub index_ram_bytes_per_chunk: f64,
    /// Roots whose tree could not be read, each with why; their share is
    /// counted nowhere.
    pub unreadable_roots: Vec<String>,
    /// The mounted file system's read caches; `None` when not mounted.
    #[serde(default)]
    pub read_cache: Option<ReadCacheReport>,
}

/// What the read caches of a mounted file system did since the mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadCacheReport {
    /// Bytes the DRAM chunk cache holds.
    pub dram_bytes: u64,
    /// Chunks read from the store: missed by every cache.
    pub store_chunk_reads: u64,
    /// The persistent tier (`[cache]`), when configured.
    pub tier: Option<::cache::TierStats>,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The live file system's counts and sizes, from one view.
pub fn live_usage(view: &dyn MetaView) -> Result<LiveUsage> {
    let mut u = LiveUsage::default();
    view.for_each_inode(&mut |i| match i.attr.kind {
        FileKind::File => {
            u.files += 1;
            u.logical_bytes += i.attr.size;
            if let Content::Inline(b) = &i.content {
                u.inline_bytes += b.len() as u64;
                u.inline_files += 1;
            }
        }
        FileKind::Dir => u.dirs += 1,
        _ => u.files += 1,
    })?;
    Ok(u)
}

/// What holds `store`'s space, with `view` the live file system (if the
/// repository has one). Roots are read as they are: hold the file
/// system's history lock while a version could be written or dropped.
pub fn report(store: &Store, view: Option<&dyn MetaView>) -> Result<SpaceReport> {
    let s = store.stats()?;
    let mut out = SpaceReport {
        unique_bytes: s.unique_bytes,
        stored_bytes: s.stored_bytes,
        chunks: s.chunks,
        containers: s.containers,
        index_ram_bytes: s.index_ram_bytes,
        index_ram_bytes_per_chunk: s.index_ram_bytes_per_chunk,
        compression_ratio: ratio(s.unique_bytes, s.stored_bytes),
        ..SpaceReport::default()
    };
    let mut marks = MarkSet::default();
    if let Some(view) = view {
        let live = live_usage(view)?;
        marks.namespace(store, view)?;
        out.held.live_bytes = marks.data_bytes;
        out.logical_bytes = live.logical_bytes;
        out.fs_files = Some(live.files);
        out.fs_dirs = Some(live.dirs);
        out.fs_logical_bytes = Some(live.logical_bytes);
        out.fs_inline_bytes = Some(live.inline_bytes);
        out.fs_inline_files = Some(live.inline_files);
    }
    let (mut versions, mut snapshots) = (Vec::new(), Vec::new());
    for (label, id) in store.list_roots()? {
        out.roots += 1;
        if label.starts_with(VERSION_PREFIX) {
            versions.push((label, id));
        } else if label.starts_with(SNAPSHOT_PREFIX) {
            snapshots.push((label, id));
        } else {
            let before = marks.data_bytes;
            let len = recipe::Recipe::open(store, id).map(|r| r.len());
            match len.map_err(crate::FsError::from).and_then(|len| {
                marks.root(store, &id)?;
                Ok(len)
            }) {
                Ok(len) => out.logical_bytes += len,
                Err(e) => out.unreadable_roots.push(format!("{label}: {e}")),
            }
            out.held.stored_streams_bytes += marks.data_bytes - before;
        }
    }
    out.versions = versions.len() as u64;
    out.snapshots = snapshots.len() as u64;
    let inline = out.fs_inline_bytes.unwrap_or(0);
    out.referenced_bytes = marks.data_bytes + inline;
    out.dedup_ratio = ratio(out.logical_bytes, out.referenced_bytes);

    // Snapshots then versions: what versions add is theirs alone. The
    // other order gives what snapshots alone hold.
    // Without both, the second pass would only repeat the first.
    let current = marks.data_bytes;
    let mut other = (!snapshots.is_empty() && !versions.is_empty()).then(|| marks.clone());
    let snap = mark_all(store, &mut marks, &snapshots, &mut out.unreadable_roots);
    let unreadable = &mut out.unreadable_roots;
    out.held.versions_only_bytes = mark_all(store, &mut marks, &versions, unreadable);
    out.held.snapshots_only_bytes = match &mut other {
        Some(other) => {
            let _ = mark_all(store, other, &versions, &mut Vec::new());
            mark_all(store, other, &snapshots, &mut Vec::new())
        }
        None => snap,
    };
    out.held.snapshots_and_versions_bytes = snap - out.held.snapshots_only_bytes;
    let data = current + snap + out.held.versions_only_bytes;
    out.held.other_bytes = s.unique_bytes.saturating_sub(data);
    Ok(out)
}

/// Marks `roots` into `marks`; returns the data bytes they added. A root
/// that cannot be read is named in `unreadable`.
fn mark_all(
    store: &Store,
    marks: &mut MarkSet,
    roots: &[(String, cas::ChunkId)],
    unreadable: &mut Vec<String>,
) -> u64 {
    let before = marks.data_bytes;
    for (label, id) in roots {
        if let Err(e) = marks.root(store, id) {
            unreadable.push(format!("{label}: {e}"));
        }
    }
    marks.data_bytes - before
}

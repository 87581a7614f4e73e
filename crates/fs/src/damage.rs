//! Files of the live namespace whose content the store cannot give back:
//! a recipe node that cannot be read, a data chunk the index does not
//! hold, or one the caller knows to be damaged (a check found it corrupt,
//! or in a container that cannot be read). `cairn check` lists them by
//! path, and garbage collection names them when it cannot mark or skips a
//! container.
//!
//! The namespace is walked from the root with a stack on the heap (a tree
//! can be any depth); a file with several names is reported under the first
//! one the walk meets.

use std::collections::HashSet;

use cas::{ChunkId, Store};
use meta::{Content, FileKind, InodeId, MetaView};
use recipe::Recipe;
use serde::{Deserialize, Serialize};

use crate::Result;

/// A file whose content cannot be read back whole.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DamagedFile {
    /// From the mount root, starting with `/`.
    pub path: String,
    pub ino: u64,
    /// What is missing or unreadable.
    pub cause: String,
}

/// Why a chunk the index holds cannot be read, when the caller knows.
pub type KnownDamage<'a> = &'a dyn Fn(&ChunkId) -> Option<String>;

/// Every damaged file of `view`; `known` names chunks that are indexed but
/// damaged.
pub fn damaged_files(
    store: &Store,
    view: &dyn MetaView,
    known: KnownDamage<'_>,
) -> Result<Vec<DamagedFile>> {
    let mut out = Vec::new();
    let mut seen: HashSet<InodeId> = HashSet::new();
    let mut stack: Vec<(InodeId, String)> = vec![(InodeId::ROOT, String::new())];
    while let Some((dir, path)) = stack.pop() {
        for e in view.entries(dir)? {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let child = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            match e.kind {
                FileKind::Dir => stack.push((e.ino, child)),
                FileKind::File if seen.insert(e.ino) => {
                    if let Content::Recipe(root) = view.get(e.ino)?.content {
                        if let Some(cause) = unreadable(store, root, known) {
                            out.push(DamagedFile {
                                path: child,
                                ino: e.ino.0,
                                cause,
                            });
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Why the recipe at `root` cannot be read back, if it cannot.
fn unreadable(store: &Store, root: ChunkId, known: KnownDamage<'_>) -> Option<String> {
    let extents = Recipe::open(store, root)
        .and_then(|r| r.extents(0, r.len()))
        .map_err(|e| e.to_string());
    let extents = match extents {
        Ok(x) => x,
        Err(e) => return Some(format!("its recipe cannot be read: {e}")),
    };
    for (e, id) in extents.iter().filter_map(|e| Some((e, e.chunk?))) {
        if let Some(why) = known(&id) {
            return Some(format!(
                "bytes {}..{} are chunk {}, and {why}",
                e.offset,
                e.offset + e.len,
                id
            ));
        }
        match store.contains(&id) {
            Ok(true) => {}
            Ok(false) => {
                return Some(format!(
                    "bytes {}..{} are chunk {}, which is not in the store",
                    e.offset,
                    e.offset + e.len,
                    id
                ))
            }
            Err(err) => return Some(format!("chunk {} cannot be located: {err}", id)),
        }
    }
    None
}

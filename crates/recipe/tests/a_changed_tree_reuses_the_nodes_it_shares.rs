//! A file's next tree, stored with the memo of its last, writes only the
//! nodes that changed, and is exactly the tree stored without the memo.

use std::sync::Arc;

use branch::LocalDir;
use cas::{ChunkId, RepoKey, Store, StoreSettings};
use proptest::prelude::*;
use recipe::{store_tree, store_tree_reusing, Recipe};

fn store(dir: &std::path::Path) -> Store {
    let (branch, _) = LocalDir::open("local", dir.join("b")).unwrap();
    Store::open(
        Arc::new(branch),
        dir,
        RepoKey::generate(),
        StoreSettings::default(),
    )
    .unwrap()
}

/// A child id from a number: ids of chunks that need not exist, since a
/// tree only refers to its data chunks.
fn id(n: u64) -> ChunkId {
    ChunkId::from_bytes(*blake3::hash(&n.to_le_bytes()).as_bytes())
}

fn children(ids: &[u64]) -> Vec<(u64, Option<ChunkId>)> {
    ids.iter().map(|&n| (4096, Some(id(n)))).collect()
}

#[test]
fn one_overwritten_block_stores_one_path_of_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let blocks: Vec<u64> = (0..200_000).collect();
    let mut w = s.stream();
    let first = store_tree_reusing(&mut w, children(&blocks), None).unwrap();
    assert!(first.len() > 100, "a tree of {} nodes", first.len());
    assert_eq!(first.reused(), 0);

    // An aligned overwrite (one child replaced), one insertion and one
    // removal far apart.
    let mut next = blocks.clone();
    next[50_000] = 1_000_000;
    next.insert(120_000, 1_000_001);
    next.remove(180_000);
    let before = w.stats().new_chunks;
    let second = store_tree_reusing(&mut w, children(&next), Some(&first)).unwrap();
    let stored = w.stats().new_chunks - before;
    // Each edit changes its leaf (and at most the one after, where the
    // boundaries meet again) and the nodes above it.
    assert!(
        stored <= 3 * 2 + 2 * 3 + 1,
        "{stored} nodes stored for 3 edits"
    );
    assert!(second.reused() + stored as usize >= second.len());
    w.flush().unwrap();

    let mut plain = s.stream();
    assert_eq!(store_tree(&mut plain, children(&next)).unwrap(), second.root());
    let r = Recipe::open(&s, second.root()).unwrap();
    let extents = r.extents(0, r.len()).unwrap();
    let got: Vec<ChunkId> = extents.iter().filter_map(|e| e.chunk).collect();
    let want: Vec<ChunkId> = next.iter().map(|&n| id(n)).collect();
    assert!(got == want, "the tree reads back other children");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the edits, the memo never changes the tree: the root is
    /// the one stored without it.
    #[test]
    fn the_memo_never_changes_the_tree(
        len in 1usize..6000,
        edits in proptest::collection::vec((any::<u16>(), 0u8..3, any::<u32>()), 0..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut ids: Vec<u64> = (0..len as u64).collect();
        let mut w = s.stream();
        let mut memo = store_tree_reusing(&mut w, children(&ids), None).unwrap();
        for (at, op, n) in edits {
            let i = at as usize % ids.len().max(1);
            match op {
                0 if !ids.is_empty() => ids[i] = n as u64 + 10_000_000,
                1 => ids.insert(i.min(ids.len()), n as u64 + 10_000_000),
                _ if ids.len() > 1 => { ids.remove(i); }
                _ => {}
            }
            memo = store_tree_reusing(&mut w, children(&ids), Some(&memo)).unwrap();
            let mut plain = s.stream();
            prop_assert_eq!(store_tree(&mut plain, children(&ids)).unwrap(), memo.root());
        }
    }
}

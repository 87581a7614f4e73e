//! A file's next tree, stored with the memo of its last, writes only the
//! nodes that changed, visits only the leaves over the changed bytes, and
//! is exactly the tree stored without the memo.

mod common;

use std::ops::Range;

use cas::{ChunkId, Store};
use common::store;
use proptest::prelude::*;
use recipe::{store_tree, store_tree_changed, Extent, Recipe};

/// A child id from a number: ids of chunks that need not exist, since a
/// tree only refers to its data chunks.
fn id(n: u64) -> ChunkId {
    ChunkId::from_bytes(*blake3::hash(&n.to_le_bytes()).as_bytes())
}

/// Extents of `lens[i]` bytes each holding chunk `ids[i]`.
fn extents(ids: &[(u64, u64)]) -> Vec<Extent> {
    let mut at = 0;
    ids.iter()
        .map(|&(n, len)| {
            let e = Extent {
                offset: at,
                len,
                chunk: Some(id(n)),
            };
            at += len;
            e
        })
        .collect()
}

fn plain_root(s: &Store, e: &[Extent]) -> ChunkId {
    store_tree(&mut s.stream(), e.iter().map(|e| (e.len, e.chunk))).unwrap()
}

#[test]
fn one_overwritten_block_stores_one_path_of_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut blocks: Vec<(u64, u64)> = (0..200_000).map(|n| (n, 4096)).collect();
    let mut w = s.stream();
    let first = store_tree_changed(&mut w, &extents(&blocks), None, None).unwrap();
    assert!(first.len() > 100, "a tree of {} nodes", first.len());
    assert_eq!(first.reused(), 0);

    // An aligned overwrite, and a block split in two (as a write into the
    // middle of a content-defined chunk does), far apart.
    blocks[50_000].0 = 1_000_000;
    blocks[120_000] = (1_000_001, 1024);
    blocks.insert(120_001, (1_000_002, 3072));
    let changed: Vec<Range<u64>> =
        vec![50_000 * 4096..50_001 * 4096, 120_000 * 4096..120_001 * 4096];
    let next = extents(&blocks);
    let before = w.stats().new_chunks;
    let second = store_tree_changed(&mut w, &next, Some(&first), Some(&changed)).unwrap();
    let stored = w.stats().new_chunks - before;
    // Each edit changes its leaf (and at most the one after, where the
    // boundaries meet again) and the nodes above it.
    assert!(
        stored <= 2 * 2 + 2 * 2 + 1,
        "{stored} nodes stored for 2 edits"
    );
    assert!(second.reused() + stored as usize >= second.len());
    // Taken whole or found by fingerprint, every node of the second tree
    // is known to the third, stored from every extent.
    let third = store_tree_changed(&mut w, &next, Some(&second), None).unwrap();
    assert_eq!(third.root(), second.root());
    assert_eq!(third.reused(), third.len());
    w.flush().unwrap();

    assert_eq!(plain_root(&s, &next), second.root());
    let r = Recipe::open(&s, second.root()).unwrap();
    let got = r.extents(0, r.len()).unwrap();
    assert!(got == next, "the tree reads back other extents");
}

#[test]
fn a_change_left_out_of_the_ranges_is_not_seen() {
    // What the ranges are for: a leaf they do not touch is not looked at.
    // (The file system notes every change; this shows the contract.)
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut blocks: Vec<(u64, u64)> = (0..20_000).map(|n| (n, 4096)).collect();
    let mut w = s.stream();
    let first = store_tree_changed(&mut w, &extents(&blocks), None, None).unwrap();
    blocks[100].0 = 7_000_000;
    let next = extents(&blocks);
    let blind = store_tree_changed(&mut w, &next, Some(&first), Some(&[])).unwrap();
    assert_eq!(blind.root(), first.root());
    let block = 100 * 4096..101 * 4096;
    let told = store_tree_changed(
        &mut w,
        &next,
        Some(&first),
        Some(std::slice::from_ref(&block)),
    )
    .unwrap();
    assert_eq!(told.root(), plain_root(&s, &next));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the edits, with every changed range given (or none: any
    /// change), the tree is the one stored without the memo.
    #[test]
    fn the_memo_never_changes_the_tree(
        len in 1usize..6000,
        edits in proptest::collection::vec((any::<u16>(), 0u8..3, any::<u32>(), any::<bool>()), 0..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut blocks: Vec<(u64, u64)> = (0..len as u64).map(|n| (n, 4096)).collect();
        let mut w = s.stream();
        let mut memo = store_tree_changed(&mut w, &extents(&blocks), None, None).unwrap();
        for (at, op, n, say_all) in edits {
            let i = at as usize % blocks.len();
            let before = extents(&blocks);
            let start = before[i].offset;
            match op {
                0 => blocks[i].0 = n as u64 + 10_000_000,
                1 => {
                    // Split block i in two.
                    let (old, l) = blocks[i];
                    if l > 1 {
                        blocks[i] = (old + 20_000_000, l / 2);
                        blocks.insert(i + 1, (n as u64 + 30_000_000, l - l / 2));
                    }
                }
                _ if blocks.len() > 1 && i + 1 < blocks.len() => {
                    // Merge blocks i and i + 1.
                    let l = blocks[i].1 + blocks[i + 1].1;
                    blocks[i] = (n as u64 + 40_000_000, l);
                    blocks.remove(i + 1);
                }
                _ => {}
            }
            let next = extents(&blocks);
            let end = next.iter().chain(&before).map(|e| e.offset + e.len)
                .filter(|&e| e > start).min().unwrap_or(start + 1);
            let end = end.max(before.get(i + 1).map_or(end, |e| e.offset + e.len));
            let changed = start..end;
            let said = (!say_all).then_some(std::slice::from_ref(&changed));
            memo = store_tree_changed(&mut w, &next, Some(&memo), said).unwrap();
            prop_assert_eq!(plain_root(&s, &next), memo.root());
        }
    }
}

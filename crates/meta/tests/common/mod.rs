#![allow(dead_code)]

pub use meta::conformance::*;
use meta::{MetaStore, RedbMeta};

pub fn store() -> (tempfile::TempDir, RedbMeta) {
    let dir = tempfile::tempdir().unwrap();
    let meta = RedbMeta::open(&dir.path().join("meta.redb"), 1000, 1000).unwrap();
    (dir, meta)
}

/// The redb engine's own check of every invariant.
pub fn assert_consistent(m: &RedbMeta) {
    let problems = m.verify().unwrap();
    assert!(problems.is_empty(), "store inconsistent: {problems:#?}");
    consistent(m as &dyn MetaStore);
}

//! A collection frees the chunks no root reaches and keeps, byte-exact,
//! every chunk a root still reaches.

mod common;

use common::*;

#[test]
fn unreferenced_chunks_are_freed_and_referenced_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (store, branch) = store(dir.path());
    let kept = random(1 << 20, 1);
    let gone = random(1 << 20, 2);
    let kept_root = put(&store, "kept", &kept);
    let gone_root = put(&store, "gone", &gone);
    let before = store.stats().unwrap();
    let blobs_before = blobs(&branch).len();

    store.delete_root("gone").unwrap();
    let report = collect(&store, 1.0, false);

    assert!(report.reclaimed_containers > 0, "{report:?}");
    assert!(report.freed_bytes >= gone.len() as u64 / 2, "{report:?}");
    for id in data_chunks(&gone, &store).iter().chain([&gone_root]) {
        assert!(
            !store.contains(id).unwrap(),
            "chunk {id} of a deleted root survived"
        );
    }
    for id in data_chunks(&kept, &store).iter().chain([&kept_root]) {
        assert!(
            store.contains(id).unwrap(),
            "chunk {id} of a live root was freed"
        );
    }
    let after = store.stats().unwrap();
    assert!(after.chunks < before.chunks, "{before:?} -> {after:?}");
    assert!(
        after.stored_bytes < before.stored_bytes,
        "{before:?} -> {after:?}"
    );
    assert!(blobs(&branch).len() < blobs_before);
    assert!(
        read(&store, kept_root) == kept,
        "the live file reads other bytes"
    );
    assert_clean(&store);
}

//! A dry run reports what a collection would reclaim, and changes nothing:
//! the same blobs on the branch, the same chunks indexed, every root whole.

mod common;

use common::*;

#[test]
fn dry_run_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, branch) = store(dir.path());
    let kept = random(512 << 10, 3);
    let gone = random(1 << 20, 4);
    let kept_root = put(&store, "kept", &kept);
    let gone_root = put(&store, "gone", &gone);
    store.delete_root("gone").unwrap();
    let blobs_before = blobs(&branch);
    let stats_before = store.stats().unwrap();

    let report = collect(&store, 1.0, true);

    assert!(report.reclaimed_containers > 0, "{report:?}");
    assert!(report.freed_bytes > 0, "{report:?}");
    assert_eq!(blobs(&branch), blobs_before);
    let stats_after = store.stats().unwrap();
    assert_eq!(
        (
            stats_after.chunks,
            stats_after.containers,
            stats_after.stored_bytes
        ),
        (
            stats_before.chunks,
            stats_before.containers,
            stats_before.stored_bytes
        )
    );
    assert!(store.contains(&gone_root).unwrap());
    // What a dry run left is still there to be rooted again and read.
    store.put_root("gone", &gone_root).unwrap();
    assert!(read(&store, gone_root) == gone);
    assert!(read(&store, kept_root) == kept);
    assert_clean(&store);

    // The same collection for real does free what the dry run counted.
    store.delete_root("gone").unwrap();
    let real = collect(&store, 1.0, false);
    assert_eq!(real.reclaimed_containers, report.reclaimed_containers);
    assert!(!store.contains(&gone_root).unwrap());
}

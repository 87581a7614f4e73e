//! A container is lost only where a block row has fewer good blocks than
//! its policy needs, and then only in that row's bad data blocks: reads
//! elsewhere work, the error names the container and row, and scrub
//! repairs what it can and names the bytes that are lost.

mod common;

use branch::BlobKey;
use common::{key, pattern, policy, Rig};
use redundancy::shard::BLOCK;
use redundancy::Error;

/// One container of `blocks` 64 KiB rows per shard (plus a short one)
/// under `text`.
fn one(rig: &Rig, text: &str, blocks: u64) -> (BlobKey, Vec<u8>) {
    let k = key("containers/0001");
    let data_shards = u64::from(policy(text).data_shards());
    let data = pattern(((blocks * BLOCK - 999) * data_shards) as usize, 7);
    rig.store.put(&k, &data, &policy(text), &rig.all()).unwrap();
    (k, data)
}

#[test]
fn a_row_with_too_few_good_blocks_loses_only_its_bad_data_blocks() {
    let rig = Rig::new(3);
    let (k, data) = one(&rig, "rs:2+1", 4);
    // Row 1 keeps only shard 1's block; row 3 only loses one (repairable).
    rig.corrupt_block(&k, 0, 1);
    rig.corrupt_block(&k, 2, 1);
    rig.corrupt_block(&k, 1, 3);
    let s = rig.store.locate(&k).unwrap().container_len.div_ceil(2);
    let s = s + s % 2;
    let err = rig.store.get(&k).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("containers/0001") && msg.contains("row 1 "),
        "{msg}"
    );
    assert!(!msg.contains("lost )") && !msg.ends_with("lost "), "{msg}");
    match err {
        Error::Unrecoverable { rows, lost, .. } => {
            assert_eq!(rows, vec![1]);
            assert!(lost.iter().any(|f| f.index == 0), "{lost:?}");
        }
        other => panic!("{other}"),
    }
    // Bytes outside shard 0's block 1 read, including shard 1's row 1.
    let at = s as usize + BLOCK as usize + 10;
    assert!(rig.store.read_range(&k, at as u64, 100).unwrap() == data[at..at + 100]);
    assert!(rig.store.read_range(&k, 0, 1000).unwrap() == data[..1000]);
    assert!(rig.store.read_range(&k, BLOCK + 5, 10).is_err());

    let summary = rig.store.scrub_all(|_| {});
    assert_eq!(summary.lost.len(), 1, "{summary:?}");
    let report = &summary.lost[0];
    assert_eq!(report.lost, vec![BLOCK..2 * BLOCK], "{report:?}");
    // Shard 1's bad block was in a good row: rewritten; the others not.
    assert!(report.repaired.iter().any(|r| r.index == 1), "{report:?}");
    assert_eq!(report.unrepaired.len(), 2, "{report:?}");
    for f in &report.unrepaired {
        let why = f.to_string();
        assert!(
            why.contains("cannot rebuild") && why.contains("row 1 "),
            "{why}"
        );
    }
    // Scrub wrote no wrong bytes: what read before reads the same.
    assert!(rig.store.read_range(&k, 0, 1000).unwrap() == data[..1000]);
}

//! A stream asks for small compression regions; a read of one chunk with
//! neighbours offered returns the neighbours its region holds, whether the
//! region is stored raw (read in part) or compressed (decoded whole); raw
//! regions beside it that hold offered neighbours are read for them too
//! (two at most), as a region often ends right next to a random read.

mod common;

use bytes::Bytes;
use cas::RepoKey;

#[test]
fn a_random_read_of_raw_regions_returns_its_region_neighbours() {
    reads_neighbours(
        (0..32).map(|_| common::random(4096)).collect(),
        &[2, 3, 4, 6, 7, 8, 9, 10, 11],
    );
}

#[test]
fn a_random_read_of_compressed_regions_returns_its_region_neighbours() {
    reads_neighbours((0..32).map(|i| common::text(4096, i)).collect(), &[4, 6, 7]);
}

fn reads_neighbours(chunks: Vec<Bytes>, expect: &[usize]) {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _branch) = common::open(dir.path(), &key);
    let mut w = store.stream();
    // 16 KiB regions (the store's setting is 32 KiB): four chunks each.
    let ids = w.write_batch_in(&chunks, 16 << 10).unwrap();
    w.flush().unwrap();

    let near: Vec<_> = ids[2..12].to_vec();
    let (asked, extra) = store.read_around(&ids[5..6], &near).unwrap();
    assert_eq!(asked, vec![chunks[5].clone()]);
    let mut got: Vec<usize> = extra
        .iter()
        .map(|(id, bytes)| {
            let i = ids.iter().position(|x| x == id).unwrap();
            assert_eq!(*bytes, chunks[i], "neighbour {i} verified");
            i
        })
        .collect();
    got.sort();
    assert_eq!(got, expect, "the neighbours read with chunk 5");

    // No neighbour offered: the asked chunk alone.
    let (asked, extra) = store.read_around(&ids[5..6], &[]).unwrap();
    assert_eq!(asked, vec![chunks[5].clone()]);
    assert!(extra.is_empty());
}

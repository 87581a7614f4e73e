//! A stream asks for small compression regions; a read of one chunk with
//! neighbours offered returns exactly the neighbours its region holds,
//! whether the region is stored raw (read in part) or compressed (decoded
//! whole).

mod common;

use bytes::Bytes;
use cas::RepoKey;

#[test]
fn a_random_read_of_raw_regions_returns_its_region_neighbours() {
    reads_neighbours((0..32).map(|_| common::random(4096)).collect());
}

#[test]
fn a_random_read_of_compressed_regions_returns_its_region_neighbours() {
    reads_neighbours((0..32).map(|i| common::text(4096, i)).collect());
}

fn reads_neighbours(chunks: Vec<Bytes>) {
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
    assert_eq!(got, vec![4, 6, 7], "the other chunks of chunk 5's region");

    // No neighbour offered, or none in the region: the asked chunk alone.
    let (_, extra) = store.read_around(&ids[5..6], &ids[20..24]).unwrap();
    assert!(extra.is_empty());
}

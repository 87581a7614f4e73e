//! Recipes over a real store: streaming in, random access and streaming out.

mod common;

use chunking::ChunkerParams;
use common::store;
use recipe::{store_stream, Recipe};

/// Small chunks so that a few MiB make a tree of several levels.
const TINY: ChunkerParams = ChunkerParams::ContentDefined {
    min: 64,
    avg: 256,
    max: 1024,
};

fn data(len: usize) -> Vec<u8> {
    let mut x = 0x1234_5678_u64;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Half random, half repetitive, so both dedup and compression happen.
            if (i / 4096) % 2 == 0 {
                x as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect()
}

#[test]
fn multi_level_tree_round_trips_and_reads_at_any_offset() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let input = data(3 << 20);
    let stored = store_stream(&s, &input[..], TINY, &|_| {}).unwrap();
    assert_eq!(stored.len, input.len() as u64);
    let r = Recipe::open(&s, stored.root).unwrap();
    assert_eq!(r.len(), input.len() as u64);
    let extents = r.extents(0, r.len()).unwrap();
    assert!(
        extents.len() > recipe::FANOUT,
        "tree must have more than one level"
    );
    let mut out = Vec::new();
    r.write_to(&mut out, &|_| {}).unwrap();
    assert!(out == input, "streamed content differs");
    for _ in 0..200 {
        let off = rand::random::<u64>() % (input.len() as u64);
        let len = rand::random::<u64>() % 70_000;
        let end = ((off + len) as usize).min(input.len());
        assert_eq!(r.read_at(off, len).unwrap(), &input[off as usize..end]);
    }
    assert!(r.read_at(r.len(), 10).unwrap().is_empty());
}

#[test]
fn exact_fanout_and_tiny_and_empty_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let fixed = ChunkerParams::Fixed { size: 512 };
    for len in [
        0usize,
        1,
        511,
        512,
        513,
        512 * recipe::FANOUT,
        512 * recipe::FANOUT + 1,
        512 * recipe::FANOUT * 2,
    ] {
        let input = data(len);
        let stored = store_stream(&s, &input[..], fixed, &|_| {}).unwrap();
        let r = Recipe::open(&s, stored.root).unwrap();
        let mut out = Vec::new();
        r.write_to(&mut out, &|_| {}).unwrap();
        assert_eq!(out.len(), len);
        assert!(out == input, "length {len}");
    }
}

#[test]
fn a_second_copy_stores_only_its_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let input = data(2 << 20);
    let a = store_stream(&s, &input[..], ChunkerParams::default(), &|_| {}).unwrap();
    let b = store_stream(&s, &input[..], ChunkerParams::default(), &|_| {}).unwrap();
    assert_eq!(a.root, b.root);
    assert_eq!(b.stats.new_chunks, 0);
}

#[test]
fn input_errors_are_reported() {
    struct Broken;
    impl std::io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let err = store_stream(&s, Broken, ChunkerParams::default(), &|_| {}).unwrap_err();
    assert!(err.to_string().contains("disk on fire"), "{err}");
}

#[test]
fn holes_read_as_zeros_without_storing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut w = s.stream();
    let a = w.write_chunk(bytes::Bytes::from_static(b"hello")).unwrap();
    let b = w.write_chunk(bytes::Bytes::from_static(b"world")).unwrap();
    let big_hole = 3 << 20;
    let root = recipe::store_tree(
        &mut w,
        [(5, Some(a)), (7, None), (5, Some(b)), (big_hole, None)],
    )
    .unwrap();
    w.flush().unwrap();
    let r = Recipe::open(&s, root).unwrap();
    assert_eq!(r.len(), 17 + big_hole);
    assert_eq!(r.read_at(0, 20).unwrap(), b"hello\0\0\0\0\0\0\0world\0\0\0");
    let mut out = Vec::new();
    r.write_to(&mut out, &|_| {}).unwrap();
    assert_eq!(out.len() as u64, 17 + big_hole);
    assert_eq!(&out[..17], b"hello\0\0\0\0\0\0\0world");
    assert!(out[17..].iter().all(|&x| x == 0));
}

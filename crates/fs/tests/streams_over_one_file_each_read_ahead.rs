//! Streams that say where they end ([`fs::Fs::read_stream`], a GET of a
//! range) read ahead each on its own, however they interleave: four
//! clients fetching four quarters of one object at once are four
//! sequential readers, not one reader jumping around the file. Plain
//! reads interleaved the same way look random, which is the contrast that
//! makes the counts below mean something. Counts, no timing.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Fs, FsSettings, Stream};
use meta::InodeId;

const MIB: usize = 1 << 20;
const PIECE: usize = 256 << 10;
const STREAMS: usize = 4;

/// Reads `bytes.len()` bytes of `ino` as STREAMS ranges at once, a piece
/// of each in turn, with `read`; checks every piece.
fn interleaved(bytes: &[u8], mut read: impl FnMut(usize, u64, u32) -> Vec<u8>) {
    let quarter = bytes.len() / STREAMS;
    for piece in 0..quarter / PIECE {
        for s in 0..STREAMS {
            let at = s * quarter + piece * PIECE;
            let got = read(s, at as u64, PIECE as u32);
            assert!(got[..] == bytes[at..at + PIECE], "bytes at {at}");
        }
    }
}

fn new_fs(dir: &std::path::Path, name: &[u8], bytes: &[u8]) -> (Fs, InodeId) {
    let (store, meta) = common::store_and_meta(dir);
    let settings = FsSettings {
        readahead: 8 * MIB as u64,
        ..FsSettings::default()
    };
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();
    let ino = fs
        .create(InodeId::ROOT, name, common::new_file())
        .unwrap()
        .id;
    fs.open(ino).unwrap();
    for (i, piece) in bytes.chunks(MIB).enumerate() {
        fs.write(ino, (i * MIB) as u64, piece).unwrap();
    }
    fs.flush(ino).unwrap();
    fs.release(ino).unwrap();
    fs.sync_all().unwrap();
    (fs, ino)
}

#[test]
fn streams_over_one_file_each_read_ahead() {
    let bytes = branch::testing::pattern(16 * MIB, 5);
    let pieces = (bytes.len() / PIECE) as u64;

    // Each stream's first read hints the rest of its quarter; every later
    // piece is then in the cache or being fetched, and costs its reader
    // no storage read of its own.
    let dir = tempfile::tempdir().unwrap();
    let (fs, ino) = new_fs(dir.path(), b"object", &bytes);
    fs.open(ino).unwrap();
    let before = fs.store().reads_by_class();
    let quarter = (bytes.len() / STREAMS) as u64;
    let mut streams: Vec<Stream> = (1..=STREAMS as u64)
        .map(|s| Stream::new(s * quarter))
        .collect();
    interleaved(&bytes, |s, at, len| {
        fs.read_stream(ino, at, len, &mut streams[s]).unwrap()
    });
    let after = fs.store().reads_by_class();
    assert_eq!(
        after.random, before.random,
        "a stream's reads counted random"
    );
    let reads = after.sequential - before.sequential;
    assert!(
        reads < pieces / 2,
        "{reads} storage reads for {pieces} pieces: the streams did not read ahead"
    );
    fs.release(ino).unwrap();
    drop(fs);

    // The same interleaving through plain reads: one reader jumping by a
    // quarter of the file each time, read at random and never ahead.
    let dir = tempfile::tempdir().unwrap();
    let (fs, ino) = new_fs(dir.path(), b"object", &bytes);
    fs.open(ino).unwrap();
    let before = fs.store().reads_by_class();
    interleaved(&bytes, |_, at, len| fs.read(ino, at, len).unwrap());
    let after = fs.store().reads_by_class();
    assert!(
        after.random > before.random,
        "interleaved plain reads were not seen as random: {before:?} -> {after:?}"
    );
    fs.release(ino).unwrap();
}

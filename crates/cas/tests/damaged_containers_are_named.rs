//! A flipped byte and a truncated container are found by reads and by the
//! check, and named.

mod common;

use bytes::Bytes;
use cas::{CasError, Problem, RepoKey};

use common::*;

#[test]
fn flipped_byte_is_detected_by_read_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..4).map(|_| random(20_000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    assert!(store.check(&no_progress()).unwrap().is_clean());
    let loc = store.locate(&ids[2]).unwrap();
    let path = container_path(dir.path(), loc.container);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = loc.region_offset as usize + 5 + loc.offset_in_region as usize + 100;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    drop((w, store));
    let (store, _) = open(dir.path(), &key);
    let err = store.read_chunk(&ids[2]).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CasError::CorruptChunk { .. }), "{msg}");
    assert!(
        msg.contains(&ids[2].to_string()) && msg.contains(&loc.container.to_string()),
        "{msg}"
    );
    assert_eq!(store.read_chunk(&ids[0]).unwrap(), chunks[0]);
    let report = store.check(&no_progress()).unwrap();
    assert!(!report.is_clean());
    assert!(report.problems.iter().any(|p| matches!(p,
        Problem::CorruptChunk { chunk, .. } if *chunk == ids[2])));
}

#[test]
fn truncated_container_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let mut w = store.stream();
    let ids = w.write_batch(&[random(40_000), random(40_000)]).unwrap();
    w.flush().unwrap();
    let loc = store.locate(&ids[1]).unwrap();
    let path = container_path(dir.path(), loc.container);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let report = store.check(&no_progress()).unwrap();
    let text: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        text.iter()
            .any(|t| t.contains(&loc.container.to_string()) && t.contains("truncated")),
        "{text:?}"
    );
    assert!(report
        .problems
        .iter()
        .any(|p| matches!(p, Problem::DanglingIndexEntry { .. })));
    let err = store.read_chunk(&ids[1]).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
}

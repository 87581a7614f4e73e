use std::time::Duration;

use super::*;

fn verify() -> Verify {
    Arc::new(|data: &[u8]| ChunkId::from_bytes(*blake3::hash(data).as_bytes()))
}

fn id_of(data: &[u8]) -> ChunkId {
    verify()(data)
}

fn settings(dir: &Path, size: u64) -> TierSettings {
    TierSettings {
        dir: dir.to_path_buf(),
        size,
        write_rate: 1 << 30,
    }
}

#[test]
fn entries_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let data = Bytes::from(vec![7u8; 5000]);
    let id = id_of(&data);
    let tier = ChunkTier::open(&settings(dir.path(), 1 << 20), verify()).unwrap();
    assert_eq!(tier.get(&id), None);
    tier.admit(id, data.clone());
    tier.close();
    assert_eq!(tier.stats().admitted, 1);
    drop(tier);
    let tier = ChunkTier::open(&settings(dir.path(), 1 << 20), verify()).unwrap();
    assert_eq!(tier.get(&id), Some(data));
    let s = tier.stats();
    assert_eq!((s.hits, s.misses, s.entries, s.bytes), (1, 0, 1, 5000));
}

#[test]
fn a_corrupt_entry_is_dropped_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let data = Bytes::from(vec![3u8; 4096]);
    let id = id_of(&data);
    let tier = ChunkTier::open(&settings(dir.path(), 1 << 20), verify()).unwrap();
    tier.admit(id, data);
    tier.close();
    let path = tier.shared.path(&id);
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 1;
    fs::write(&path, bytes).unwrap();
    assert_eq!(tier.get(&id), None);
    let s = tier.stats();
    assert_eq!((s.corrupt, s.hits, s.entries), (1, 0, 0));
    assert!(!path.exists(), "the corrupt file is deleted");
}

#[test]
fn least_recently_used_entries_leave_first() {
    let dir = tempfile::tempdir().unwrap();
    let chunks: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![i; 1000])).collect();
    let tier = ChunkTier::open(&settings(dir.path(), 3000), verify()).unwrap();
    for c in &chunks[..3] {
        tier.admit(id_of(c), c.clone());
    }
    // Written in order by the one writer thread; wait for them.
    while tier.stats().admitted < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(tier.get(&id_of(&chunks[0])).is_some());
    tier.admit(id_of(&chunks[3]), chunks[3].clone());
    tier.close();
    let s = tier.stats();
    assert_eq!((s.entries, s.bytes), (3, 3000));
    assert!(
        tier.get(&id_of(&chunks[1])).is_none(),
        "1 was least recently used"
    );
    assert!(tier.get(&id_of(&chunks[0])).is_some());
    drop(tier);
    let reopened = ChunkTier::open(&settings(dir.path(), 3000), verify()).unwrap();
    assert_eq!(reopened.stats().entries, 3);
}

#[test]
fn the_write_budget_limits_admission() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), 1 << 20);
    s.write_rate = 10_000;
    // No time passes: the first second's 10,000 bytes are all there is.
    let (clock, _now) = budget::tests::manual();
    let tier = ChunkTier::open_with_clock(&s, verify(), clock).unwrap();
    for i in 0..10u8 {
        let c = Bytes::from(vec![i; 4000]);
        tier.admit(id_of(&c), c);
    }
    tier.close();
    let st = tier.stats();
    assert!(st.admitted_bytes <= 10_000, "{st:?}");
    assert_eq!(st.admitted + st.skipped, 10);
    assert_eq!((st.admitted, st.skipped), (2, 8), "{st:?}");
}

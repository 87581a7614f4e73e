//! A prefetch of a range of a coded container hints only the branch that
//! holds the data shard covering it, with a range inside that shard blob.

mod common;

use std::sync::{Arc, Mutex};

use branch::{BlobKey, Branch, LocalDir};
use common::{key, pattern, policy};
use redundancy::Redundant;

/// A branch that notes the prefetch hints it gets.
struct Hints {
    inner: Arc<dyn Branch>,
    seen: Mutex<Vec<(BlobKey, u64, u64)>>,
}

impl Branch for Hints {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn put(&self, key: &BlobKey, data: &[u8]) -> branch::Result<()> {
        self.inner.put(key, data)
    }
    fn get(&self, key: &BlobKey) -> branch::Result<Vec<u8>> {
        self.inner.get(key)
    }
    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> branch::Result<Vec<u8>> {
        self.inner.read_range(key, offset, len)
    }
    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        self.seen.lock().unwrap().push((key.clone(), offset, len));
    }
    fn size(&self, key: &BlobKey) -> branch::Result<u64> {
        self.inner.size(key)
    }
    fn list(&self, prefix: &str) -> branch::Result<Vec<BlobKey>> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &BlobKey) -> branch::Result<()> {
        self.inner.delete(key)
    }
}

#[test]
fn prefetch_hints_the_data_shard_holding_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let hints: Vec<Arc<Hints>> = (0..3)
        .map(|i| {
            let (local, _) =
                LocalDir::open(format!("b{i}"), dir.path().join(i.to_string())).unwrap();
            Arc::new(Hints {
                inner: Arc::new(local),
                seen: Mutex::new(Vec::new()),
            })
        })
        .collect();
    let branches: Vec<Arc<dyn Branch>> =
        hints.iter().map(|h| h.clone() as Arc<dyn Branch>).collect();
    let store = Redundant::new(branches).unwrap();
    let k = key("containers/1");
    let data = pattern(300_000, 1);
    store
        .put(&k, &data, &policy("rs:2+1"), &store.branch_ids())
        .unwrap();
    // Bytes 160_000.. are in data shard 1 (each holds 150_000 bytes).
    store.prefetch(&k, 160_000, 1000);
    let holder = store.locate(&k).unwrap().shards[1].branches[0];
    for (i, h) in hints.iter().enumerate() {
        let seen = h.seen.lock().unwrap();
        if i == usize::from(holder.0) {
            assert_eq!(seen.len(), 1);
            let (blob, offset, len) = &seen[0];
            assert_eq!(blob.as_str(), "containers/1.s1");
            let size = h.inner.size(blob).unwrap();
            assert!(
                *offset > 0 && offset + len <= size,
                "{offset}+{len} of {size}"
            );
        } else {
            assert!(seen.is_empty(), "branch {i} got {seen:?}");
        }
    }
    assert!(store.get(&k).unwrap() == data);
}

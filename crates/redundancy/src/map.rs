//! Where each container's shards live: the in-memory map, kept so reads
//! never list a branch, and the shard blob naming that lets
//! [`crate::Redundant::discover`] rebuild the map from the branches alone.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

use branch::BlobKey;

use crate::members::BranchId;
use crate::policy::Policy;
use crate::shard::Layout;

/// Shard `index` of container `key` is stored as `<key>.s<index>`, e.g.
/// `containers/00000/0000000000000001.s2`.
pub fn shard_key(key: &BlobKey, index: u16) -> BlobKey {
    BlobKey::new(format!("{key}.s{index}")).expect("a key with a suffix is still a key")
}

/// The container key and shard index a shard blob name stands for.
pub fn parse_shard_key(blob: &BlobKey) -> Option<(BlobKey, u16)> {
    let (key, index) = blob.as_str().rsplit_once(".s")?;
    let index: u16 = index.parse().ok()?;
    let key = BlobKey::new(key).ok()?;
    (shard_key(&key, index) == *blob).then_some((key, index))
}

/// One container: its layout and, per shard index, the branches holding it
/// (normally one; two while a rebuild has copied it and not yet dropped
/// the old place).
#[derive(Debug, Clone)]
pub struct Entry {
    pub layout: Layout,
    pub locations: Vec<Vec<BranchId>>,
}

impl Entry {
    pub fn holds(&self, id: BranchId) -> bool {
        self.locations.iter().any(|l| l.contains(&id))
    }

    pub fn placement(&self, key: &BlobKey) -> Placement {
        Placement {
            key: key.clone(),
            policy: self.layout.policy.clone(),
            container_len: self.layout.container_len,
            shards: self
                .locations
                .iter()
                .enumerate()
                .map(|(i, branches)| ShardPlace {
                    index: i as u16,
                    blob: shard_key(key, i as u16),
                    branches: branches.clone(),
                })
                .collect(),
        }
    }
}

/// Where a container's shards are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub key: BlobKey,
    pub policy: Policy,
    pub container_len: u64,
    /// One per shard index: data shards first, then parity.
    pub shards: Vec<ShardPlace>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlace {
    pub index: u16,
    /// The shard's blob key on its branch.
    pub blob: BlobKey,
    /// Branches holding it; empty when none is known to.
    pub branches: Vec<BranchId>,
}

#[derive(Default)]
pub struct Map(RwLock<BTreeMap<BlobKey, Arc<Entry>>>);

impl Map {
    pub fn get(&self, key: &BlobKey) -> Option<Arc<Entry>> {
        self.0.read().get(key).cloned()
    }

    pub fn contains(&self, key: &BlobKey) -> bool {
        self.0.read().contains_key(key)
    }

    pub fn insert(&self, key: BlobKey, entry: Entry) {
        self.0.write().insert(key, Arc::new(entry));
    }

    pub fn remove(&self, key: &BlobKey) -> Option<Arc<Entry>> {
        self.0.write().remove(key)
    }

    pub fn replace_all(&self, entries: BTreeMap<BlobKey, Arc<Entry>>) {
        *self.0.write() = entries;
    }

    /// Changes the locations of a container still in the map.
    pub fn update(&self, key: &BlobKey, change: impl FnOnce(&mut Vec<Vec<BranchId>>)) {
        let mut map = self.0.write();
        if let Some(entry) = map.get_mut(key) {
            change(&mut Arc::make_mut(entry).locations);
        }
    }

    /// Keys starting with `prefix`, in order. Only opening a store lists,
    /// so a scan is fine.
    pub fn keys(&self, prefix: &str) -> Vec<BlobKey> {
        let map = self.0.read();
        map.keys()
            .filter(|k| k.as_str().starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Every container, for scrub and rebuild.
    pub fn snapshot(&self) -> Vec<(BlobKey, Arc<Entry>)> {
        let map = self.0.read();
        map.iter().map(|(k, e)| (k.clone(), e.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> BlobKey {
        BlobKey::new(s).unwrap()
    }

    #[test]
    fn shard_names_round_trip() {
        let k = key("containers/00000/0000000000000001");
        assert_eq!(
            shard_key(&k, 3).as_str(),
            "containers/00000/0000000000000001.s3"
        );
        assert_eq!(parse_shard_key(&shard_key(&k, 3)), Some((k, 3)));
        let odd = key("a.s1");
        assert_eq!(parse_shard_key(&shard_key(&odd, 0)), Some((odd, 0)));
        for not_a_shard in ["a", "a.s", "a.s01", "a.s-1", "a.s99999", ".s1/x", "a/.s1"] {
            if let Ok(k) = BlobKey::new(not_a_shard) {
                assert_eq!(parse_shard_key(&k), None, "{not_a_shard}");
            }
        }
    }

    #[test]
    fn keys_by_prefix() {
        let map = Map::default();
        let layout = Layout::new(Policy::Single, "x", 1);
        for k in ["a/1", "a/2", "ab", "b/1"] {
            map.insert(
                key(k),
                Entry {
                    layout: layout.clone(),
                    locations: vec![vec![BranchId(0)]],
                },
            );
        }
        let names = |p: &str| -> Vec<String> {
            map.keys(p).iter().map(|k| k.as_str().to_string()).collect()
        };
        assert_eq!(names("a/"), ["a/1", "a/2"]);
        assert_eq!(names("a"), ["a/1", "a/2", "ab"]);
        assert_eq!(names(""), ["a/1", "a/2", "ab", "b/1"]);
        assert_eq!(names("c"), Vec::<String>::new());
    }
}

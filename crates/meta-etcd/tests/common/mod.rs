//! What the etcd engine's tests share: a real `etcd` (testkit's, Debian's
//! etcd-server on loopback), short deadlines, fresh file-system ids, the
//! tree two stores are compared by, and a ring of clusters.
#![allow(dead_code)]

pub mod differential;
pub mod races;

use std::time::Duration;

use meta::{MetaError, MetaStore};
use meta_etcd::{EtcdError, EtcdMeta, EtcdOptions};

/// One etcd member (testkit's), with what these tests ask of it.
pub struct Etcd(testkit::etcd::Etcd);

impl Etcd {
    /// Starts a one-member cluster on tmpfs and waits until it answers.
    pub fn start() -> Etcd {
        Etcd(testkit::etcd::Etcd::start())
    }

    pub fn endpoint(&self) -> String {
        self.0.endpoint(0)
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.0.endpoints()
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        self.0.kill(0)
    }

    /// Starts the process again on the same data and ports.
    pub fn restart(&mut self) {
        self.0.restart(0)
    }

    /// A store on this etcd for file system `fsid`, with short deadlines.
    pub fn open(&self, fsid: &str) -> EtcdMeta {
        EtcdMeta::open(&self.endpoints(), fsid, 1000, 1000, quick()).unwrap()
    }
}

pub fn quick() -> EtcdOptions {
    EtcdOptions {
        rpc_timeout: Duration::from_secs(2),
        op_deadline: Duration::from_secs(4),
        client_ttl: Duration::from_secs(2),
        seed: None,
        retry_pause: Duration::from_millis(100),
    }
}

/// A fresh file-system id per store, so that tests sharing one etcd do
/// not see each other.
pub fn fsid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "fs{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The etcd error inside a metadata error, if it is one.
pub fn etcd_error(e: &MetaError) -> Option<&EtcdError> {
    match e {
        MetaError::Remote(src) => src.downcast_ref::<EtcdError>(),
        _ => None,
    }
}

/// Every path of the tree under the root with its inode's kind and link
/// count, in order: what two stores are compared by.
pub fn tree(m: &dyn MetaStore) -> Vec<(String, meta::FileKind, u32, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), meta::InodeId::ROOT)];
    while let Some((path, dir)) = todo.pop() {
        for e in m.readdir(dir, None, usize::MAX).unwrap() {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let i = m.get(e.ino).unwrap();
            out.push((p.clone(), e.kind, i.attr.nlink, i.attr.size));
            if e.kind == meta::FileKind::Dir {
                todo.push((p, e.ino));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A control cluster and `n` data clusters, one etcd each.
pub struct Ring {
    pub control: Etcd,
    pub data: Vec<Etcd>,
}

impl Ring {
    pub fn start(n: usize) -> Ring {
        Ring {
            control: Etcd::start(),
            data: (0..n).map(|_| Etcd::start()).collect(),
        }
    }

    /// A new file system over every data cluster, with `shards` shards.
    pub fn init(&self, shards: u32) -> String {
        let fs = fsid();
        let data: Vec<Vec<String>> = self.data.iter().map(Etcd::endpoints).collect();
        meta_etcd::init_cluster(
            &self.control.endpoints(),
            &data,
            &fs,
            shards,
            1000,
            1000,
            &quick(),
        )
        .unwrap();
        fs
    }

    /// A client of file system `fsid`.
    pub fn open(&self, fsid: &str) -> EtcdMeta {
        EtcdMeta::open_cluster(&self.control.endpoints(), fsid, quick()).unwrap()
    }
}

/// The data cluster owning inode `ino`'s shard.
pub fn cluster_of(m: &EtcdMeta, control: &Etcd, ino: meta::InodeId) -> usize {
    let st = m.cluster_status(&control.endpoints()).unwrap();
    st.shards[meta_etcd::shard_of(ino) as usize].0 as usize
}

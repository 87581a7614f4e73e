//! A real `etcd` (Debian's etcd-server) on free loopback ports, with its
//! data in a temporary directory, killed when dropped.
#![allow(dead_code)]

pub mod differential;
pub mod races;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use meta::{MetaError, MetaStore};
use meta_etcd::{EtcdError, EtcdMeta, EtcdOptions};

pub struct Etcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
    /// This member's name and the cluster's `--initial-cluster`.
    name: String,
    initial: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Etcd {
    /// Starts a one-member cluster and waits until it answers. Its data
    /// is on tmpfs when there is one (fsync costs nothing there; a kill
    /// keeps what the process wrote).
    pub fn start() -> Etcd {
        let mut e = Etcd::member("t");
        e.initial = format!("t=http://127.0.0.1:{}", e.peer);
        e.restart();
        e
    }

    fn member(name: &str) -> Etcd {
        let base = PathBuf::from("/dev/shm");
        let dir = if base.is_dir() {
            tempfile::tempdir_in(base).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        Etcd {
            child: None,
            dir,
            client: free_port(),
            peer: free_port(),
            name: name.to_string(),
            initial: String::new(),
        }
    }

    /// Starts an `n`-member cluster and waits until every member answers.
    pub fn start_cluster(n: usize) -> Vec<Etcd> {
        let mut members: Vec<Etcd> = (0..n).map(|i| Etcd::member(&format!("m{i}"))).collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        for m in &mut members {
            m.initial = initial.clone();
            m.spawn();
        }
        for m in &members {
            m.wait_healthy();
        }
        members
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the process again on the same data and ports.
    pub fn restart(&mut self) {
        self.spawn();
        self.wait_healthy();
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &self.endpoint()])
            .args(["--advertise-client-urls", &self.endpoint()])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian's etcd-server) must be installed: .ci/run installs it");
        self.child = Some(child);
    }

    fn wait_healthy(&self) {
        let start = Instant::now();
        while !self.healthy() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not start: {}",
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.client)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_err() {
            return false;
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.contains("\"health\":\"true\"")
    }

    /// A store on this etcd for file system `fsid`, with short deadlines.
    pub fn open(&self, fsid: &str) -> EtcdMeta {
        EtcdMeta::open(&self.endpoints(), fsid, 1000, 1000, quick()).unwrap()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
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

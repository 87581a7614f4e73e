//! What the `cairn coord` tests share: a client of the file system in the
//! test process (to interrupt an operation across clusters by fault
//! injection, and to look at the intents without settling them), and a
//! `cairn coord` process with its log.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use meta::{Content, FileKind, InodeId, MetaError, MetaStore, NewInode, Timestamp};
use meta_etcd::{EtcdError, EtcdMeta, EtcdOptions};

/// How long any wait of these tests may take before it fails the test.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A client of the file system at `url` (`etcd://CONTROL/FSID`).
pub fn client(url: &str) -> EtcdMeta {
    let (control, fsid) = meta_etcd::parse_url(url).unwrap();
    let opts = EtcdOptions {
        client_ttl: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    EtcdMeta::open_cluster(&control, &fsid, opts).unwrap()
}

pub fn dir() -> NewInode {
    NewInode {
        kind: FileKind::Dir,
        perm: 0o755,
        uid: 1000,
        gid: 1000,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

pub fn file() -> NewInode {
    NewInode {
        kind: FileKind::File,
        perm: 0o644,
        ..dir()
    }
}

pub fn now() -> Timestamp {
    Timestamp { secs: 1, nanos: 0 }
}

/// The data cluster owning `ino`'s shard.
pub fn cluster_of(m: &EtcdMeta, url: &str, ino: InodeId) -> u16 {
    let (control, _) = meta_etcd::parse_url(url).unwrap();
    m.cluster_status(&control).unwrap().shards[meta_etcd::shard_of(ino) as usize].0
}

/// The unfinished intents, read without settling them.
pub fn unfinished(m: &EtcdMeta, url: &str) -> usize {
    let (control, _) = meta_etcd::parse_url(url).unwrap();
    m.cluster_status(&control).unwrap().intents.len()
}

pub fn injected(e: &MetaError) -> bool {
    matches!(e, MetaError::Remote(src)
        if matches!(src.downcast_ref::<EtcdError>(), Some(EtcdError::Injected)))
}

/// Makes directories `prefix{i}` in `parent` until one lands on another
/// data cluster than `parent`, which stops after its first part (its
/// intent stays committed): that name.
pub fn interrupted_mkdir(m: &EtcdMeta, parent: InodeId, prefix: &str) -> String {
    m.stop_after_first_part();
    for i in 0..200 {
        let name = format!("{prefix}{i}");
        match m.create(parent, name.as_bytes(), dir(), now()) {
            Ok(_) => {}
            Err(e) if injected(&e) => return name,
            Err(e) => panic!("mkdir {name}: {e}"),
        }
    }
    panic!("no directory landed on another cluster");
}

/// Waits until `done`, failing the test after [`DEADLINE`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `cairn coord` process, its stderr in a file.
pub struct Coord {
    child: Option<Child>,
    log: PathBuf,
}

impl Coord {
    /// `cairn coord --cluster URL --interval 1 --ttl TTL`, logging to
    /// `log`.
    pub fn start(url: &str, ttl: u32, log: &Path) -> Coord {
        let child = Command::new(super::CAIRN)
            .args(["coord", "--cluster", url, "--interval", "1", "--ttl"])
            .arg(ttl.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        Coord {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap()
    }

    /// SIGTERM, then waits: it must exit 0.
    pub fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: a signal to our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let status = child.wait().unwrap();
        assert!(status.success(), "cairn coord exited with {status}");
    }

    /// `kill -9`, then waits.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Coord {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

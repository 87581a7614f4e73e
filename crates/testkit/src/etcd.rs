//! An etcd cluster (Debian's `etcd-server`) of one or more members on free
//! loopback ports, with its data in a temporary directory: on tmpfs
//! unless a test asks for a disk (`fsync` then costs what it costs, and a
//! power-loss test means something).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a member may take to become healthy.
const START: Duration = Duration::from_secs(30);

struct Member {
    name: String,
    data: PathBuf,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A running etcd cluster; its processes are killed when it is dropped.
pub struct Etcd {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Etcd {
    /// One member, data on tmpfs.
    pub fn start() -> Etcd {
        Etcd::cluster(1, false)
    }

    /// `members` members (a quorum of `members / 2 + 1`); data on the
    /// disk under the system's temporary directory when `on_disk`, else on
    /// tmpfs (`/dev/shm`) when there is one.
    pub fn cluster(members: usize, on_disk: bool) -> Etcd {
        let shm = Path::new("/dev/shm");
        let dir = if !on_disk && shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .expect("a temporary directory for etcd");
        let data = (0..members)
            .map(|i| dir.path().join(format!("m{i}")))
            .collect();
        Etcd::launch(dir, data)
    }

    /// One member per directory in `data`, each keeping its data there
    /// (on a [`crate::powercut::Disks`] disk, say); logs elsewhere.
    pub fn cluster_on(data: &[PathBuf]) -> Etcd {
        let dir = tempfile::tempdir().expect("a temporary directory for etcd's logs");
        Etcd::launch(dir, data.iter().map(|d| d.join("etcd")).collect())
    }

    fn launch(dir: tempfile::TempDir, data: Vec<PathBuf>) -> Etcd {
        let token = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "cairn-test".into());
        let members = data
            .into_iter()
            .enumerate()
            .map(|(i, data)| Member {
                name: format!("m{i}"),
                data,
                client: free_port(),
                peer: free_port(),
                child: None,
            })
            .collect();
        let mut e = Etcd {
            dir,
            members,
            token,
        };
        for i in 0..e.members.len() {
            e.spawn(i);
        }
        for i in 0..e.members.len() {
            e.wait_healthy(i);
        }
        e
    }

    /// `http://127.0.0.1:PORT` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client)
    }

    /// The client address of member `i` (for a proxy in front of it).
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.members[i].client))
    }

    /// Every member's endpoint.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// `H:P,H:P,...` of every member, as an `etcd://` URL lists them.
    pub fn hosts(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `i` (SIGKILL) and waits for it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data and ports, and waits until it
    /// is healthy (with a quorum of the others running).
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i);
        self.wait_healthy(i);
    }

    /// Kills every member (SIGKILL) and waits for them.
    pub fn kill_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }

    /// Starts every member again and waits until each is healthy.
    pub fn restart_all(&mut self) {
        for i in 0..self.members.len() {
            assert!(self.members[i].child.is_none(), "member {i} is running");
            self.spawn(i);
        }
        for i in 0..self.members.len() {
            self.wait_healthy(i);
        }
    }

    /// The log of member `i`, for a failing test's message.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize) {
        let initial = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .expect("etcd's log file");
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-token", &self.token])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian's etcd-server) must be installed: .ci/run installs it");
        self.members[i].child = Some(child);
    }

    fn wait_healthy(&self, i: usize) {
        let start = Instant::now();
        while !self.healthy(i) {
            assert!(
                start.elapsed() < START,
                "etcd member {i} did not become healthy: {}",
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether member `i` answers `/health` with a leader elected.
    pub fn healthy(&self, i: usize) -> bool {
        let Ok(mut s) = TcpStream::connect(self.addr(i)) else {
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
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

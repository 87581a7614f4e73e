//! A real one-member `etcd` (Debian's etcd-server) on free loopback ports,
//! its data in a temporary directory, killed when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    dir: tempfile::TempDir,
    client: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Etcd {
    pub fn start() -> Etcd {
        let dir = tempfile::tempdir().unwrap();
        let client = free_port();
        let url = format!("http://127.0.0.1:{client}");
        let peer = format!("http://127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "t"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian's etcd-server) must be installed: .ci/run installs it");
        let e = Etcd { child, dir, client };
        let start = Instant::now();
        while !e.healthy() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not start: {}",
                std::fs::read_to_string(e.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        e
    }

    /// `etcd://127.0.0.1:PORT/FSID`, as `cairn mount --meta` takes it.
    pub fn url(&self, fsid: &str) -> String {
        format!("etcd://127.0.0.1:{}/{fsid}", self.client)
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
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

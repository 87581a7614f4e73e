//! Two client repositories of one file system: the namespace in a real
//! etcd, the containers in one S3 bucket (S3Proxy), client A the first
//! repository and client B made with `cairn init --join A --client 1`.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use branch::testing::S3Proxy;

use crate::common::etcd::Etcd;
use crate::common::{ok, Mount};

pub struct Cluster {
    pub url: String,
    /// The etcd endpoint (`http://127.0.0.1:PORT`).
    pub etcd: String,
    pub a: PathBuf,
    pub b: PathBuf,
    bucket_dir: PathBuf,
    // Dropped last: the mounts are gone by then.
    pub base: tempfile::TempDir,
    _etcd: Etcd,
    _s3: S3Proxy,
}

/// A file system whose branch is one bucket, with its two clients.
pub fn cluster() -> Cluster {
    cluster_with(|_, _| String::new())
}

/// [`cluster`], with `extra(etcd endpoint, base directory)` appended to
/// A's cairn.toml before B joins (so B's copy has it too).
pub fn cluster_with(extra: impl FnOnce(&str, &Path) -> String) -> Cluster {
    let etcd = Etcd::start();
    let endpoint = etcd
        .url("x")
        .replace("etcd://", "http://")
        .replace("/x", "");
    let s3 = S3Proxy::start();
    let bucket = s3.new_bucket();
    let base = tempfile::tempdir().unwrap();
    let (a, b) = (base.path().join("a"), base.path().join("b"));
    ok(&a, &["init"]);
    let toml = a.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap()
        + &format!(
            "\n[[branch]]\nname = \"shared\"\nkind = \"s3\"\nendpoint = \"{}\"\nbucket = \"{}\"\n\
             access_key_id = \"{}\"\nsecret_access_key = \"{}\"\n\
             \n[default_rule]\npolicy = \"single\"\nbranches = [\"shared\"]\n",
            bucket.endpoint, bucket.bucket, bucket.access_key_id, bucket.secret_access_key
        )
        + &extra(&endpoint, base.path());
    fs::write(&toml, text).unwrap();
    ok(
        &b,
        &["init", "--join", a.to_str().unwrap(), "--client", "1"],
    );
    Cluster {
        url: etcd.url("shared"),
        etcd: endpoint,
        a,
        b,
        bucket_dir: s3.bucket_dir(&bucket.bucket),
        base,
        _etcd: etcd,
        _s3: s3,
    }
}

impl Cluster {
    /// Mounts client `repo` with the shared namespace at `base/NAME`.
    pub fn mount(&self, repo: &Path, name: &str) -> Mount {
        let dir = self.base.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        Mount::start_cmd(repo.to_path_buf(), dir, &["mount", "--meta", &self.url])
    }

    /// Mounting client `repo` at `base/NAME` is refused: what it said.
    pub fn mount_refused(&self, repo: &Path, name: &str) -> String {
        let dir = self.base.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new(crate::common::CAIRN)
            .args([
                "--repo",
                repo.to_str().unwrap(),
                "mount",
                "--meta",
                &self.url,
            ])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{} mounted", repo.display());
        assert!(!crate::common::is_cairn_mounted(&dir));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Bytes of every container in the bucket.
    pub fn container_bytes(&self) -> u64 {
        let mut total = 0;
        let mut stack = vec![self.bucket_dir.join("containers")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let meta = e.metadata().unwrap();
                if meta.is_dir() {
                    stack.push(e.path());
                } else {
                    total += meta.len();
                }
            }
        }
        total
    }

    /// Container ids in the bucket, as their file names (hex).
    pub fn container_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for d in fs::read_dir(self.bucket_dir.join("containers"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in fs::read_dir(d.path()).into_iter().flatten().flatten() {
                out.push(f.file_name().into_string().unwrap());
            }
        }
        out.sort();
        out
    }
}

/// Asserts `path` holds exactly `want`, naming it (not dumping the bytes).
pub fn reads_back(path: &Path, want: &[u8]) {
    let got = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        got == want,
        "{}: {} bytes read, {} expected, first difference at {:?}",
        path.display(),
        got.len(),
        want.len(),
        got.iter().zip(want).position(|(a, b)| a != b)
    );
}

/// The fingerprint index of file system "fs1" over two real `cairn
/// chunkd`s, each owning half of the space (range table in the
/// cluster's etcd).
pub struct ChunkdIndex {
    /// Owner of fingerprints below 0x80.., then of the rest.
    pub owners: [crate::common::chunkd::Chunkd; 2],
}

/// The `[shared_index]` section naming the chunkd index of "fs1". The
/// chunkds' token is written under `base`, and a copy in client A's
/// repository, named by a relative path (`init --join` copies it to B).
pub fn shared_index_toml(etcd: &str, base: &Path) -> String {
    let token = crate::common::chunkd::token_file(base);
    fs::copy(&token, base.join("a").join("index.token")).unwrap();
    format!(
        "\n[shared_index]\nkind = \"chunkd\"\netcd = [\"{etcd}\"]\nfsid = \"fs1\"\n\
         token_file = \"index.token\"\n"
    )
}

impl Cluster {
    /// Sets the range table and starts its two owners.
    pub fn chunkd_index(&self) -> ChunkdIndex {
        let token = self.base.path().join("chunkd.token");
        let addrs = [free_addr(), free_addr()];
        let urls = addrs.clone().map(|a| format!("http://{a}"));
        let cluster = ["--etcd", &self.etcd, "--fsid", "fs1"];
        let mut init = vec!["chunkd", "ranges", "init"];
        init.extend(cluster);
        init.extend(["--owner", &urls[0], "--owner", &urls[1]]);
        ok(Path::new("/nonexistent"), &init);
        let extra = [&cluster[..], &["--refresh", "1"]].concat();
        let start = |i: usize| {
            let dir = self.base.path().join(format!("chunkd-{i}"));
            crate::common::chunkd::Chunkd::start_with(&dir, &token, &addrs[i], &extra)
        };
        ChunkdIndex {
            owners: [start(0), start(1)],
        }
    }

    /// Lines of client `repo`'s log (REPO/log/cairn.log) holding `text`.
    pub fn log_lines(&self, repo: &Path, text: &str) -> usize {
        fs::read_to_string(repo.join("log").join("cairn.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(text))
            .count()
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

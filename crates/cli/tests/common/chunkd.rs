//! A real `cairn chunkd` on a free loopback port, its directory and token
//! in a temporary directory; killed (`kill -9`) when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const TOKEN: &str = "test-token-0123456789abcdef";

pub struct Chunkd {
    child: Option<Child>,
    pub dir: PathBuf,
    pub token_file: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    listen: String,
    extra: Vec<String>,
}

/// Writes the shared token under `base`; its path.
pub fn token_file(base: &Path) -> PathBuf {
    let path = base.join("chunkd.token");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    path
}

impl Chunkd {
    /// Serves `dir` as a branch (no index).
    pub fn start(dir: &Path, token_file: &Path) -> Chunkd {
        Chunkd::start_with(dir, token_file, "127.0.0.1:0", &[])
    }

    /// Serves `dir` on `listen` with more arguments (`--etcd` ...).
    pub fn start_with(dir: &Path, token_file: &Path, listen: &str, extra: &[&str]) -> Chunkd {
        let mut c = Chunkd {
            child: None,
            dir: dir.to_path_buf(),
            token_file: token_file.to_path_buf(),
            url: String::new(),
            listen: listen.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        let mut child = Command::new(super::CAIRN)
            .args(["-q", "chunkd", "--dir"])
            .arg(&self.dir)
            .args(["--listen", &self.listen, "--token-file"])
            .arg(&self.token_file)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("cairn chunkd printed {line:?}"))
            .to_string();
        // Restarts keep the same port, so a repository's url stays right.
        self.listen = url.trim_start_matches("http://").to_string();
        self.url = url;
        self.child = Some(child);
    }

    /// `kill -9`, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts again on the same directory and port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// cairn.toml lines naming this chunkd as branch `name`.
    pub fn branch_toml(&self, name: &str) -> String {
        format!(
            "\n[[branch]]\nname = \"{name}\"\nkind = \"chunkd\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            self.url,
            self.token_file.display()
        )
    }

    pub fn config(&self) -> branch::ChunkdConfig {
        branch::ChunkdConfig::new(self.url.clone(), self.token_file.clone())
    }
}

impl Drop for Chunkd {
    fn drop(&mut self) {
        self.kill();
    }
}

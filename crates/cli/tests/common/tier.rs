//! A repository with the persistent cache tier on, and random reads
//! through its mount: what the cache tier tests share.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{ok, random, Mount};

/// The test file: above `page_cache_max` (set to 1 MiB), so every read
/// reaches the daemon as the reader sent it.
pub const FILE_LEN: usize = 4 << 20;
/// Reads of one pass; the detector calls the file random after 16.
pub const READS: usize = 96;

/// A repository whose `[cache] dir` is `base/tier`, mounted, holding
/// `img` (random bytes, returned); versions off.
pub fn mounted(base: &Path) -> (Mount, PathBuf, Vec<u8>) {
    let repo = base.join("repo");
    let dir = base.join("mnt");
    let tier = base.join("tier");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml)
        .unwrap()
        .replace("version_seconds = 30", "version_seconds = 0")
        .replace("page_cache_max = \"16MiB\"", "page_cache_max = \"1MiB\"")
        .replace(
            "# dir = \"/mnt/nvme/cairn-cache\"",
            &format!("dir = \"{}\"", tier.display()),
        );
    fs::write(&toml, text).unwrap();
    let m = Mount::start(repo, dir);
    let data = random(FILE_LEN, 15);
    fs::write(m.path("img"), &data).unwrap();
    (m, tier, data)
}

/// Offsets of 4 KiB reads scattered over the file (a fixed sequence).
pub fn offsets() -> Vec<u64> {
    let blocks = (FILE_LEN / 4096) as u64;
    let mut x = 7u64;
    (0..READS)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % blocks) * 4096
        })
        .collect()
}

/// Reads 4 KiB at each offset and checks the bytes.
pub fn read_at(path: &Path, data: &[u8], offsets: &[u64]) {
    let f = fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 4096];
    for &at in offsets {
        f.read_exact_at(&mut buf, at).unwrap();
        assert!(
            buf[..] == data[at as usize..at as usize + 4096],
            "wrong bytes at {at}"
        );
    }
}

/// `read_cache` of `cairn stats --json`: (store chunk reads, tier figures).
pub fn figures(repo: &Path) -> (u64, serde_json::Value) {
    let s: serde_json::Value = serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap();
    let rc = &s["read_cache"];
    (
        rc["store_chunk_reads"].as_u64().unwrap(),
        rc["tier"].clone(),
    )
}

/// The files the tier holds.
pub fn entries(tier: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fan in fs::read_dir(tier.join("chunks")).unwrap() {
        for e in fs::read_dir(fan.unwrap().path()).unwrap() {
            out.push(e.unwrap().path());
        }
    }
    out
}

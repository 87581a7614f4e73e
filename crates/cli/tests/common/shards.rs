//! Repositories over local-directory branches, and damage to their shard
//! files, for the redundancy scenarios.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ok, Mount};

/// A fresh repository at `base/repo` over local branches `names` (in
/// `repo/br/NAME`), every file stored under `policy`.
pub fn repo_over(base: &Path, names: &[&str], policy: &str) -> PathBuf {
    let repo = base.join("repo");
    ok(&repo, &["init"]);
    let path = repo.join("cairn.toml");
    let mut text = fs::read_to_string(&path).unwrap();
    for n in names {
        text += &format!("\n[[branch]]\nname = \"{n}\"\nkind = \"local\"\npath = \"br/{n}\"\n");
    }
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    text += &format!(
        "\n[default_rule]\npolicy = \"{policy}\"\nbranches = [{}]\n",
        list.join(", ")
    );
    fs::write(&path, text).unwrap();
    repo
}

/// Mounts `repo` at `base/mnt`.
pub fn mount(repo: &Path, base: &Path) -> Mount {
    let dir = base.join("mnt");
    fs::create_dir_all(&dir).unwrap();
    Mount::start(repo.to_path_buf(), dir)
}

/// Writes each `(name, bytes)` into the mount and makes it durable.
pub fn write_all(m: &Mount, files: &[(String, Vec<u8>)]) {
    for (name, data) in files {
        super::write_synced(&m.path(name), data).unwrap();
    }
}

/// Asserts every file reads back exactly.
pub fn assert_reads_back(m: &Mount, files: &[(String, Vec<u8>)]) {
    for (name, data) in files {
        let got = fs::read(m.path(name)).unwrap_or_else(|e| panic!("reading {name}: {e}"));
        assert!(got == *data, "{name} reads back different bytes");
    }
}

/// Every shard file under a branch directory, sorted.
pub fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains("containers/") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The shard files of container file name `name` (e.g.
/// "0000000000000001") on every branch under `br`, by shard index.
pub fn shards_of(br: &Path, container: &str) -> Vec<(u16, PathBuf)> {
    let mut out = Vec::new();
    for b in fs::read_dir(br).unwrap() {
        for p in shard_files(&b.unwrap().path()) {
            let file = p.file_name().unwrap().to_string_lossy().to_string();
            if let Some((c, i)) = file.split_once(".s") {
                if c == container {
                    out.push((i.parse().unwrap(), p));
                }
            }
        }
    }
    out.sort();
    out
}

/// The 64 KiB blocks a shard file stored under `policy` holds.
pub fn blocks_in(path: &Path, policy: &str) -> u64 {
    let header = 56 + policy.len() as u64 + 8;
    (fs::metadata(path).unwrap().len() - header).div_ceil((64 << 10) + 16)
}

/// Every container with shards under `br`: its file name and shards.
pub fn containers(br: &Path) -> Vec<(String, Vec<(u16, PathBuf)>)> {
    let mut names: Vec<String> = Vec::new();
    for b in fs::read_dir(br).unwrap() {
        for p in shard_files(&b.unwrap().path()) {
            let file = p.file_name().unwrap().to_string_lossy().to_string();
            let name = file.split_once(".s").unwrap().0.to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let shards = shards_of(br, &n);
            (n, shards)
        })
        .collect()
}

/// Flips a byte in the data of 64 KiB block `block` of a shard file stored
/// under `policy` (the block's digest no longer matches).
pub fn corrupt_block(path: &Path, policy: &str, block: u64) {
    const BLOCK: u64 = 64 << 10;
    let header = 56 + policy.len() as u64 + 8;
    let at = header + block * (BLOCK + 16) + 16 + 123;
    let mut bytes = fs::read(path).unwrap();
    assert!(
        (at as usize) < bytes.len(),
        "{} has no block {block}",
        path.display()
    );
    bytes[at as usize] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

//! A `[[chunking.rule]]` of `cairn.toml` puts the files it matches in fixed
//! 64 KiB blocks with no xattr set: aligned overwrites through the mount
//! store only the blocks they cover, and the file reads back byte-exact
//! after a remount; `check` stays clean.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{ok, random, xattrs, Mount};

const BLOCK: u64 = 64 << 10;

fn unique_bytes(repo: &Path) -> u64 {
    let s: serde_json::Value = serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap();
    s["unique_bytes"].as_u64().unwrap()
}

#[test]
fn a_chunking_rule_in_the_config_fixes_the_files_it_matches() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap();
    let text = text.replace("version_seconds = 30", "version_seconds = 0")
        + "\n[[chunking.rule]]\nname = \"vm\"\npath = \"vm/**\"\nmode = \"fixed:64K\"\n";
    fs::write(&toml, text).unwrap();

    let m = Mount::start(repo.clone(), dir);
    fs::create_dir(m.path("vm")).unwrap();
    let path = m.path("vm/disk");
    let mut model = random(64 * BLOCK as usize, 3);
    fs::write(&path, &model).unwrap();
    assert!(
        !xattrs(&path).contains_key(&b"user.cairn.chunking"[..]),
        "a rule sets no xattr"
    );
    let before = unique_bytes(&repo);
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    for (i, at) in [5u64, 20, 21].into_iter().enumerate() {
        let data = random(BLOCK as usize, 500 + 2 * i as u64);
        f.write_all_at(&data, at * BLOCK).unwrap();
        let from = (at * BLOCK) as usize;
        model[from..from + data.len()].copy_from_slice(&data);
    }
    f.sync_all().unwrap();
    drop(f);
    let added = unique_bytes(&repo) - before;
    // Three blocks, and the recipe's few small nodes.
    assert!(
        (3 * BLOCK..4 * BLOCK).contains(&added),
        "{added} bytes stored for 3 blocks of {BLOCK}"
    );

    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    assert!(
        fs::read(m.path("vm/disk")).unwrap() == model,
        "differs after a remount"
    );
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}

//! `copy_file_range` of a whole file onto an empty one (what `cp` does,
//! and Python's `os.copy_file_range`) is a recipe clone: no chunk is
//! stored for the copy, and each file changes alone afterwards.
//! The chunking changes between writing the source and copying it, so a
//! copy of the bytes would store new chunks where a clone stores none.
//! `cp --reflink=always` asks for `FICLONE`, which the kernel refuses for
//! FUSE before cairn sees it: it fails cleanly and copies nothing wrong.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::process::Command;

use common::{ok, random, Mount};

fn stored(repo: &std::path::Path) -> (u64, u64) {
    let st: serde_json::Value = serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap();
    (
        st["chunks"].as_u64().unwrap(),
        st["stored_bytes"].as_u64().unwrap(),
    )
}

#[test]
fn a_copied_file_is_a_clone_that_stores_no_chunks() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    // No version may be written between the counts below.
    common::no_versions(&repo);
    let toml = repo.join("cairn.toml");

    let m = Mount::start(repo.clone(), dir);
    let a = random(4 << 20, 21);
    fs::write(m.path("a"), &a).unwrap();
    let (repo, dir) = m.unmount();
    let text = fs::read_to_string(&toml).unwrap();
    let chunking = "min = \"16KiB\"\navg = \"64KiB\"\nmax = \"256KiB\"";
    assert!(text.contains(chunking), "{text}");
    let other = "min = \"40KiB\"\navg = \"160KiB\"\nmax = \"640KiB\"";
    fs::write(&toml, text.replace(chunking, other)).unwrap();
    let m = Mount::start(repo.clone(), dir);
    let before = stored(&repo);

    let cp = Command::new("cp")
        .arg(m.path("a"))
        .arg(m.path("b"))
        .output()
        .unwrap();
    assert!(
        cp.status.success(),
        "{}",
        String::from_utf8_lossy(&cp.stderr)
    );
    let py = Command::new("python3")
        .arg("-c")
        .arg(
            "import os,sys\n\
             s=os.open(sys.argv[1],os.O_RDONLY); d=os.open(sys.argv[2],os.O_WRONLY|os.O_CREAT,0o644)\n\
             while os.copy_file_range(s,d,1<<30): pass\n",
        )
        .arg(m.path("a"))
        .arg(m.path("c"))
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let reflink = Command::new("cp")
        .arg("--reflink=always")
        .arg(m.path("a"))
        .arg(m.path("d"))
        .output()
        .unwrap();
    if reflink.status.success() {
        assert!(fs::read(m.path("d")).unwrap() == a);
    } else {
        let err = String::from_utf8_lossy(&reflink.stderr);
        assert!(err.contains("Operation not supported"), "{err}");
    }

    for name in ["b", "c"] {
        assert!(fs::read(m.path(name)).unwrap() == a, "{name} differs");
    }
    assert_eq!(stored(&repo), before, "the copies stored chunks");
    // The control: the same bytes written through the kernel are cut anew.
    fs::write(m.path("e"), fs::read(m.path("a")).unwrap()).unwrap();
    assert!(stored(&repo).0 > before.0, "the chunking did not change");

    // Independent: a write to one changes neither the other nor the source.
    let b = fs::OpenOptions::new()
        .write(true)
        .open(m.path("b"))
        .unwrap();
    b.write_all_at(b"only b", 1000).unwrap();
    drop(b);
    let src = fs::OpenOptions::new()
        .write(true)
        .open(m.path("a"))
        .unwrap();
    src.write_all_at(b"only a", 3 << 20).unwrap();
    drop(src);
    let mut want_a = a.clone();
    want_a[3 << 20..(3 << 20) + 6].copy_from_slice(b"only a");
    let mut want_b = a.clone();
    want_b[1000..1006].copy_from_slice(b"only b");
    let (repo, dir) = m.unmount();

    ok(&repo, &["check"]);
    let m = Mount::start(repo.clone(), dir);
    assert!(fs::read(m.path("a")).unwrap() == want_a);
    assert!(fs::read(m.path("b")).unwrap() == want_b);
    for name in ["c", "e"] {
        assert!(fs::read(m.path(name)).unwrap() == a, "{name} differs");
    }
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}

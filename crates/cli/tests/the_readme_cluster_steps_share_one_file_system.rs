//! The README's "Two machines, one file system" steps, as a user runs
//! them: three etcd clusters (control and two data), `cairn chunkd`
//! serving the shared branch, `cluster init`, a second client by `init
//! --join`, `cairn coord`, both clients mounted with `--cluster`. What
//! one client writes and closes the other reads byte-exact; a rename on one is seen by the
//! other; both clients' `cairn check` is clean; after both unmount and
//! mount again every file is still there.

mod common;

use std::fs;

use common::chunkd::{token_file, Chunkd};
use common::coord::{client, wait_until, Coord};
use common::etcd::{cluster_init, Etcd};
use common::{ok, random, Mount};

#[test]
fn the_readme_cluster_steps_share_one_file_system() {
    let (control, d0, d1) = (Etcd::start(), Etcd::start(), Etcd::start());
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let chunkd = Chunkd::start(&base.path().join("blobs"), &token);
    let (a, b) = (base.path().join("a"), base.path().join("b"));
    ok(&a, &["init"]);
    let toml = a.join("cairn.toml");
    let mut text = fs::read_to_string(&toml).unwrap();
    text.push_str(&format!(
        "\n[[branch]]\nname = \"shared\"\nkind = \"chunkd\"\nurl = \"{}\"\ntoken_file = \"{}\"\n\n[default_rule]\npolicy = \"single\"\nbranches = [\"shared\"]\n",
        chunkd.url,
        token.display()
    ));
    fs::write(&toml, text).unwrap();
    let made = cluster_init(&a, &control, &[&d0, &d1], "home", &[]);
    let url = made["url"].as_str().unwrap().to_string();
    ok(
        &b,
        &["init", "--join", a.to_str().unwrap(), "--client", "1"],
    );
    let coord = Coord::start(&url, 10, &base.path().join("coord.log"));
    let mount = |repo: &std::path::Path, name: &str| {
        let dir = base.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        Mount::start_cmd(repo.to_path_buf(), dir, &["mount", "--cluster", &url])
    };
    let (ma, mb) = (mount(&a, "mnt-a"), mount(&b, "mnt-b"));

    let big = random(3 << 20, 7);
    fs::write(ma.path("note.txt"), b"hello from a\n").unwrap();
    fs::create_dir(ma.path("dir")).unwrap();
    fs::write(ma.path("dir/big.bin"), &big).unwrap();
    assert_eq!(fs::read(mb.path("note.txt")).unwrap(), b"hello from a\n");
    assert!(
        fs::read(mb.path("dir/big.bin")).unwrap() == big,
        "B reads A's bytes"
    );
    fs::rename(mb.path("dir"), mb.path("moved")).unwrap();
    fs::write(mb.path("moved/from-b.txt"), b"written by b").unwrap();
    let mut listed: Vec<String> = fs::read_dir(ma.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, ["moved", "note.txt"]);
    assert_eq!(
        fs::read(ma.path("moved/from-b.txt")).unwrap(),
        b"written by b"
    );
    for repo in [&a, &b] {
        let out = ok(repo, &["check"]);
        assert!(out.contains("clean"), "{out}");
    }
    ma.unmount();
    mb.unmount();

    let (ma, mb) = (mount(&a, "mnt-a"), mount(&b, "mnt-b"));
    for m in [&ma, &mb] {
        assert!(fs::read(m.path("moved/big.bin")).unwrap() == big);
        assert_eq!(
            fs::read(m.path("moved/from-b.txt")).unwrap(),
            b"written by b"
        );
    }
    ma.unmount();
    mb.unmount();
    wait_until("the coordinator leads", || {
        client(&url).coordinator().unwrap().map(|l| l.pid) == Some(coord.pid())
    });
    coord.stop();
}

//! `cairn coord` settles what a client left half done: a rename of a file
//! between directories on two data clusters stops after its first part
//! (fault injection in the test's own client, which then does nothing:
//! no client meets the intent's locks). A `cairn coord` process started
//! afterwards rolls it forward: no intent is left, the file has exactly
//! its new name, `cluster status` names the coordinator, and once the
//! coordinator is stopped (SIGTERM) it names none.

mod common;

use common::coord::{
    client, cluster_of, file, interrupted_mkdir, now, unfinished, wait_until, Coord,
};
use common::etcd::{cluster_init, Etcd};
use common::{cairn, ok};
use meta::{FileKind, InodeId, MetaError, MetaStore, RenameFlags};

fn status(repo: &std::path::Path, url: &str) -> serde_json::Value {
    let out = cairn(repo, &["cluster", "status", "--cluster", url, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_coordinator_rolls_forward_a_rename_its_client_left_half_done() {
    let (control, d0, d1) = (Etcd::start(), Etcd::start(), Etcd::start());
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let made = cluster_init(&repo, &control, &[&d0, &d1], "home", &["--shards", "16"]);
    let url = made["url"].as_str().unwrap().to_string();
    assert!(status(&repo, &url)["coordinator"].is_null());

    // Directories x and y on different data clusters, a file in x.
    let a = client(&url);
    let x = a
        .create(InodeId::ROOT, b"x", common::coord::dir(), now())
        .unwrap()
        .id;
    let y = (0..200)
        .map(|i| {
            a.create(x, format!("y{i}").as_bytes(), common::coord::dir(), now())
                .unwrap()
                .id
        })
        .find(|&y| cluster_of(&a, &url, y) != cluster_of(&a, &url, x))
        .expect("a directory on the other cluster");
    let f = a.create(x, b"f", file(), now()).unwrap().id;

    // The rename x/f -> y/g stops after its first part.
    a.stop_after_first_part();
    let e = a
        .rename(x, b"f", y, b"g", RenameFlags::default(), &|_| false, now())
        .unwrap_err();
    assert!(common::coord::injected(&e), "{e}");
    assert_eq!(unfinished(&a, &url), 1);

    let coord = Coord::start(&url, 3, &base.path().join("coord.log"));
    wait_until("the coordinator settles the rename", || {
        unfinished(&a, &url) == 0
    });
    assert!(matches!(a.lookup(x, b"f"), Err(MetaError::NotFound)));
    let g = a.lookup(y, b"g").unwrap();
    assert_eq!((g.id, g.attr.kind, g.attr.nlink), (f, FileKind::File, 1));
    assert_eq!(a.path_of(f).unwrap().unwrap().last().unwrap(), b"g");

    // It leads (the only one), and status says so.
    wait_until("the coordinator leads", || coord.log().contains("leading"));
    let st = status(&repo, &url);
    assert_eq!(
        st["coordinator"]["pid"].as_u64(),
        Some(u64::from(coord.pid()))
    );
    assert!(st["intents"].as_array().unwrap().is_empty());
    let human = ok(&repo, &["cluster", "status", "--cluster", &url]);
    assert!(
        human.contains(&format!(
            "coordinator: {} pid {}",
            st["coordinator"]["host"].as_str().unwrap(),
            coord.pid()
        )),
        "{human}"
    );

    // A later interruption is settled by its passes, not only at its
    // start: the log counts it.
    let name = interrupted_mkdir(&a, InodeId::ROOT, "m");
    wait_until("the coordinator's pass settles the mkdir", || {
        coord.log().contains("settled 1 intents")
    });
    assert_eq!(unfinished(&a, &url), 0);
    let d = a.lookup(InodeId::ROOT, name.as_bytes()).unwrap();
    assert_eq!((d.attr.kind, d.attr.nlink), (FileKind::Dir, 2));

    // Stopped, it gives the lead up at once: no coordinator is left.
    coord.stop();
    assert!(status(&repo, &url)["coordinator"].is_null());
}

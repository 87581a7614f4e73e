//! A client cut off from etcd by a partition (a TCP proxy that stops
//! carrying bytes, then heals, or closes every connection): its operations
//! fail with the typed error instead of hanging, the other client goes on,
//! and the partitioned client's request that arrives after it healed is
//! fenced by its compares: it never overwrites what the other client did
//! meanwhile (no split-brain write). Nothing acknowledged is lost.

mod common;

use std::net::SocketAddr;

use meta::conformance::{consistent, new, t, ROOT};
use meta::{FileKind, MetaStore};
use meta_etcd::{EtcdError, EtcdMeta};
use testkit::proxy::{Link, Proxy};

fn names(m: &dyn MetaStore) -> Vec<String> {
    let mut names: Vec<String> = m
        .readdir(ROOT, None, 1000)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    names.sort();
    names
}

fn assert_typed(e: &meta::MetaError) {
    assert!(
        matches!(
            common::etcd_error(e),
            Some(EtcdError::Unavailable { .. } | EtcdError::Timeout { .. } | EtcdError::Rpc(_))
        ),
        "a partition is a typed error: {e}"
    );
}

#[test]
fn a_partitioned_client_fails_cleanly_and_its_late_request_is_fenced() {
    let etcd = common::Etcd::start();
    let server: SocketAddr = etcd
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = Proxy::start(server).unwrap();
    let fs = common::fsid();
    let through = [format!("http://{}", proxy.addr())];
    let a = EtcdMeta::open(&through, &fs, 1000, 1000, common::quick()).unwrap();
    let b = etcd.open(&fs);
    let mut want: Vec<String> = Vec::new();
    for i in 0..10 {
        let name = format!("a{i}");
        a.create(ROOT, name.as_bytes(), new(FileKind::File), t(1))
            .unwrap();
        want.push(name);
    }

    // Partitioned: A's create of `x` waits in the proxy and fails; B,
    // on the other side, creates `x` meanwhile.
    proxy.set(Link::Held);
    let failed = std::thread::scope(|s| {
        let pending = s.spawn(|| a.create(ROOT, b"x", new(FileKind::File), t(2)));
        let theirs = b.create(ROOT, b"x", new(FileKind::Dir), t(3)).unwrap();
        want.push("x".into());
        (pending.join().unwrap(), theirs)
    });
    let (mine, theirs) = failed;
    let e = mine.expect_err("a partitioned create is not acknowledged");
    assert_typed(&e);

    // Healed: A's request reaches etcd late, and its compare (no entry
    // `x`) fails: `x` stays B's directory.
    proxy.set(Link::Up);
    a.create(ROOT, b"after-heal", new(FileKind::File), t(4))
        .unwrap();
    want.push("after-heal".into());
    want.sort();
    for m in [&a as &dyn MetaStore, &b] {
        let x = m.lookup(ROOT, b"x").unwrap();
        assert_eq!(x.id, theirs.id, "the late request overwrote nothing");
        assert_eq!(x.attr.kind, FileKind::Dir);
        assert_eq!(names(m), want, "acknowledged names, and only those");
        consistent(m);
    }

    // Every connection closed: A fails at once, B goes on; A works again
    // once the server is reachable.
    proxy.set(Link::Reset);
    let e = a
        .create(ROOT, b"during-reset", new(FileKind::File), t(5))
        .expect_err("no server, no create");
    assert_typed(&e);
    b.create(ROOT, b"b-during-reset", new(FileKind::File), t(5))
        .unwrap();
    proxy.set(Link::Up);
    a.create(ROOT, b"after-reset", new(FileKind::File), t(6))
        .unwrap();
    let listed = names(&b);
    assert!(listed.contains(&"b-during-reset".to_string()));
    assert!(listed.contains(&"after-reset".to_string()));
    // The failed create may have reached etcd before the reset (its
    // outcome was unknown to A); if it did, it is whole.
    if listed.contains(&"during-reset".to_string()) {
        assert_eq!(b.lookup(ROOT, b"during-reset").unwrap().attr.nlink, 1);
    }
    consistent(&b);
}

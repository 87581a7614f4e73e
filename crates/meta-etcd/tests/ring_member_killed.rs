//! The leader of a three-member data cluster killed with SIGKILL while a
//! client creates files in a directory that cluster holds: creates go on
//! (etcd elects a new leader; the client moves to another member and
//! retries within its deadline), and every acknowledged create is there. The member then
//! restarts and catches up: a client of it alone sees every file.

mod common;

use meta::conformance::{consistent, new, t, ROOT};
use meta::{FileKind, MetaStore};
use meta_etcd::EtcdMeta;

#[test]
fn creates_survive_a_killed_leader_and_it_catches_up() {
    let control = common::Etcd::start();
    let mut members = testkit::etcd::Etcd::cluster(3, false);
    let other = common::Etcd::start();
    let fs = common::fsid();
    let three = members.endpoints();
    meta_etcd::init_cluster(
        &control.endpoints(),
        &[three, other.endpoints()],
        &fs,
        16,
        1000,
        1000,
        &common::quick(),
    )
    .unwrap();
    let m = EtcdMeta::open_cluster(&control.endpoints(), &fs, common::quick()).unwrap();
    // A directory on the three-member cluster (index 0).
    let d = (0..200)
        .map(|i| {
            m.create(ROOT, format!("d{i}").as_bytes(), new(FileKind::Dir), t(1))
                .unwrap()
        })
        .find(|d| common::cluster_of(&m, &control, d.id) == 0)
        .expect("a directory on cluster 0");

    let st = m.cluster_status(&control.endpoints()).unwrap();
    let leader = st.clusters[0]
        .members
        .iter()
        .position(|h| h.leader)
        .expect("the cluster has a leader");
    assert_eq!(
        st.clusters[0].members[leader].endpoint,
        members.endpoint(leader)
    );
    let mut acked = Vec::new();
    for i in 0..300 {
        if i == 100 {
            members.kill(leader);
        }
        let name = format!("f{i}");
        let f = m
            .create(d.id, name.as_bytes(), new(FileKind::File), t(2))
            .unwrap_or_else(|e| panic!("create {name} with a member down: {e}"));
        acked.push((name, f.id));
    }
    for (name, ino) in &acked {
        assert_eq!(m.lookup(d.id, name.as_bytes()).unwrap().id, *ino);
    }
    consistent(&m);
    // A client opened while the member is down works too.
    let late = EtcdMeta::open_cluster(&control.endpoints(), &fs, common::quick()).unwrap();
    late.create(d.id, b"late", new(FileKind::File), t(3))
        .unwrap();
    acked.push(("late".into(), late.lookup(d.id, b"late").unwrap().id));
    let st = late.cluster_status(&control.endpoints()).unwrap();
    assert!(!st.clusters[0].members[leader].healthy);
    assert!(st.clusters[0].members.iter().filter(|h| h.healthy).count() == 2);

    // The killed member restarts and catches up with the others.
    members.restart(leader);
    let alone = etcd_count(&members.endpoint(leader), &fs);
    let start = std::time::Instant::now();
    let mut seen = alone;
    while seen < acked.len() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "member never caught up"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        seen = etcd_count(&members.endpoint(leader), &fs);
    }
    assert_eq!(seen, acked.len());
}

/// The directory entries named `f...` that one member holds, read from it
/// alone (a serializable read: its own copy, not the leader's).
fn etcd_count(endpoint: &str, fsid: &str) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let prefix = format!("/{fsid}/d/");
        let resp = c
            .get(
                prefix.clone(),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_serializable()
                        .with_keys_only(),
                ),
            )
            .await
            .unwrap();
        resp.kvs()
            .iter()
            .filter(|kv| {
                kv.key()
                    .get(prefix.len() + 9..)
                    .is_some_and(|n| n.starts_with(b"f") || n == b"late")
            })
            .count()
    })
}

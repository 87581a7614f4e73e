//! Two `cairn coord` processes on one file system: exactly one leads (the
//! other follows it). `kill -9` of the leader (its lease is not revoked):
//! once the lease lapses (`--ttl 3`) the other leads, and its pass
//! settles a mkdir across clusters that a client left half done after
//! the kill.

mod common;

use common::coord::{client, interrupted_mkdir, unfinished, wait_until, Coord};
use common::etcd::{cluster_init, Etcd};
use meta::{FileKind, InodeId, MetaStore};

#[test]
fn the_follower_leads_once_the_killed_leaders_lease_lapses_and_settles() {
    let (control, d0, d1) = (Etcd::start(), Etcd::start(), Etcd::start());
    let base = tempfile::tempdir().unwrap();
    let made = cluster_init(
        &base.path().join("repo"),
        &control,
        &[&d0, &d1],
        "home",
        &["--shards", "16"],
    );
    let url = made["url"].as_str().unwrap().to_string();
    let a = client(&url);

    let one = Coord::start(&url, 3, &base.path().join("one.log"));
    let two = Coord::start(&url, 3, &base.path().join("two.log"));
    // Both running: one leads, the other follows it.
    wait_until("one leads and the other follows", || {
        let (l1, l2) = (one.log(), two.log());
        (l1.contains("leading") && l2.contains("following"))
            || (l2.contains("leading") && l1.contains("following"))
    });
    let (leader, follower) = if one.log().contains("leading") {
        (one, two)
    } else {
        (two, one)
    };
    assert!(!follower.log().contains("leading"), "{}", follower.log());
    let holder = a.coordinator().unwrap().expect("a leader record");
    assert_eq!(holder.pid, leader.pid());

    let follower_pid = follower.pid();
    leader.kill();
    // Half done while no coordinator leads (the record lingers with the
    // dead leader's lease until it lapses).
    let name = interrupted_mkdir(&a, InodeId::ROOT, "m");
    wait_until("the follower leads", || {
        a.coordinator()
            .unwrap()
            .is_some_and(|l| l.pid == follower_pid)
    });
    wait_until("the new leader's pass settles the mkdir", || {
        follower.log().contains("settled 1 intents")
    });
    assert!(follower.log().contains("leading"), "{}", follower.log());
    assert_eq!(unfinished(&a, &url), 0);
    let d = a.lookup(InodeId::ROOT, name.as_bytes()).unwrap();
    assert_eq!((d.attr.kind, d.attr.nlink), (FileKind::Dir, 2));
    follower.stop();
    assert_eq!(a.coordinator().unwrap(), None);
}

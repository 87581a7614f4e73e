//! Client B is killed with SIGKILL in the middle of writing: every file it
//! had fsync-ed (or closed) reads back byte-exact through client A after B
//! is gone, the two clients' containers have ids in their own ranges, and
//! once B is mounted again `cairn check` is clean on both, every file of
//! the file system read back exact or named as lost.

mod common;
mod two_clients_common;

use std::fs;
use std::io::Write;

use common::{cairn, ok, random};

#[test]
fn a_killed_client_loses_nothing_it_synced() {
    let c = two_clients_common::cluster();
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");

    fs::write(ma.path("from-a"), random(300_000, 1)).unwrap();
    let synced: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| {
            (
                format!("synced-{i}"),
                random(200_000 + i * 70_000, 10 + i as u64),
            )
        })
        .collect();
    for (name, data) in &synced {
        let mut f = fs::File::create(mb.path(name)).unwrap();
        f.write_all(data).unwrap();
        f.sync_all().unwrap();
    }
    // Written, never synced nor closed: B dies with it open.
    let mut open = fs::File::create(mb.path("unsynced")).unwrap();
    open.write_all(&random(500_000, 99)).unwrap();
    mb.kill();
    drop(open);

    for (name, data) in &synced {
        two_clients_common::reads_back(&ma.path(name), data);
    }

    // Each client's containers are in its own id range (client number in
    // the top 16 bits: 0000... for A, 0001... for B).
    let names = c.container_names();
    assert!(names.iter().any(|n| n.starts_with("0000")), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("0001")), "{names:?}");
    assert!(names
        .iter()
        .all(|n| n.starts_with("0000") || n.starts_with("0001")));

    let mb = c.mount(&c.b, "mnt-b");
    for (name, data) in &synced {
        two_clients_common::reads_back(&mb.path(name), data);
    }
    // The file B died writing is whatever it recorded, or named as lost:
    // never bytes it did not write.
    for repo in [&c.a, &c.b] {
        let out = cairn(repo, &["check"]);
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            assert!(text.contains("/unsynced"), "{text}");
            assert!(!text.contains("/synced-"), "{text}");
        }
    }
    let _ = fs::remove_file(ma.path("unsynced"));
    for repo in [&c.a, &c.b] {
        ok(repo, &["check"]);
    }
    mb.unmount();
    ma.unmount();
}

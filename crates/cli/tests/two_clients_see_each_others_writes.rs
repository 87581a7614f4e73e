//! Two `cairn mount`s of one file system (two client repositories, one
//! namespace in etcd, one S3 bucket): what one writes and closes, the
//! other reads byte-exact at its next open (close-to-open), small inline
//! files and files of many chunks alike; overwrites, appends, renames and
//! unlinks are seen both ways; `cairn check` is clean on both clients
//! (collection across clients: `two_clients_collect_garbage_across_clients.rs`).

mod common;
mod two_clients_common;

use std::fs;
use std::io::Write;

use common::{ok, random};

#[test]
fn two_clients_see_each_others_writes_at_open() {
    let c = two_clients_common::cluster();
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");

    // A writes; B reads once A closed.
    let big = random(900_000, 1);
    fs::create_dir(ma.path("d")).unwrap();
    fs::write(ma.path("d/small"), b"written by a").unwrap();
    fs::write(ma.path("d/big"), &big).unwrap();
    assert_eq!(fs::read(mb.path("d/small")).unwrap(), b"written by a");
    two_clients_common::reads_back(&mb.path("d/big"), &big);

    // A reads it too (its page cache now holds it).
    two_clients_common::reads_back(&ma.path("d/big"), &big);

    // A has looked both up: its kernel holds their attributes.
    assert_eq!(fs::metadata(ma.path("d/small")).unwrap().len(), 12);
    let names = |m: &common::Mount| {
        let mut n: Vec<String> = fs::read_dir(m.path("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&ma), ["big", "small"]);

    // B overwrites one (same size: only its times tell A's kernel that
    // the cached pages are stale) and appends to the other; A's next open
    // sees both.
    let big2 = random(900_000, 2);
    fs::write(mb.path("d/big"), &big2).unwrap();
    let tail = random(50_000, 3);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(mb.path("d/small"))
        .unwrap();
    f.write_all(&tail).unwrap();
    drop(f);
    two_clients_common::reads_back(&ma.path("d/big"), &big2);
    let mut small = b"written by a".to_vec();
    small.extend_from_slice(&tail);
    // Attributes are asked again, not cached: A sees B's size at once.
    assert_eq!(
        fs::metadata(ma.path("d/small")).unwrap().len(),
        small.len() as u64
    );
    two_clients_common::reads_back(&ma.path("d/small"), &small);

    // Renames and unlinks, both ways.
    fs::rename(ma.path("d/small"), ma.path("d/renamed")).unwrap();
    assert!(!mb.path("d/small").exists());
    two_clients_common::reads_back(&mb.path("d/renamed"), &small);
    fs::remove_file(mb.path("d/big")).unwrap();
    assert!(!ma.path("d/big").exists());
    fs::write(mb.path("d/from-b"), b"b's own").unwrap();
    assert_eq!(names(&ma), ["from-b", "renamed"]);
    assert_eq!(names(&mb), ["from-b", "renamed"]);
    assert_eq!(fs::read(ma.path("d/from-b")).unwrap(), b"b's own");

    // Each client's check (through its mount) is clean.
    for repo in [&c.a, &c.b] {
        ok(repo, &["check"]);
    }

    mb.unmount();
    ma.unmount();
}

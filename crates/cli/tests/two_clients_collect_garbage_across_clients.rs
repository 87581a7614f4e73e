//! Garbage collection across two clients of one file system (two mounts,
//! one namespace in etcd, one S3 bucket): client A collects while B
//! holds open a file A has since overwritten (only B's handle reaches the
//! old content), has stored a copy of A's data (its chunks
//! are A's), and keeps writing more copies during the collection. A's
//! deleted file is reclaimed; everything else reads back byte-exact on
//! both clients after a remount, both checks are clean, and B then
//! collects too.

mod common;
mod two_clients_common;

use std::fs;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{cairn, no_versions, ok, random};
use two_clients_common::reads_back;

const MIB: usize = 1 << 20;

#[test]
fn a_collection_across_clients_frees_garbage_and_keeps_every_clients_data() {
    let c = two_clients_common::cluster();
    no_versions(&c.a);
    no_versions(&c.b);
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");

    let garbage = random(4 * MIB, 1);
    let keep = random(2 * MIB, 2);
    let held = random(MIB, 3);
    let mine = random(MIB, 4);
    fs::create_dir(ma.path("d")).unwrap();
    fs::write(ma.path("d/garbage"), &garbage).unwrap();
    fs::write(ma.path("d/keep"), &keep).unwrap();
    fs::write(ma.path("d/held"), &held).unwrap();
    // B's copy of A's data is A's chunks; B's own file is B's.
    fs::write(mb.path("d/keep-copy"), &keep).unwrap();
    fs::write(mb.path("d/mine"), &mine).unwrap();
    // B holds a file A then overwrites: only B's open handle reaches the
    // old content's chunks.
    let mut handle = fs::File::open(mb.path("d/held")).unwrap();
    let held_now = random(MIB, 5);
    fs::write(ma.path("d/held"), &held_now).unwrap();
    fs::remove_file(ma.path("d/garbage")).unwrap();
    let before = c.container_bytes();

    // B keeps storing copies of A's data (deduplicated against A's
    // containers) while A collects.
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = done.clone();
        let dir = mb.path("d");
        let keep = keep.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::SeqCst) || n < 2 {
                fs::write(dir.join(format!("dup-{n}")), &keep).unwrap();
                n += 1;
            }
            n
        })
    };
    let out = cairn(&c.a, &["gc", "--threshold", "1", "--json"]);
    done.store(true, Ordering::SeqCst);
    let dups = writer.join().unwrap();
    assert!(
        out.status.success(),
        "gc on A: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["reclaimed_containers"].as_u64().unwrap() > 0,
        "{report}"
    );
    let freed = report["freed_bytes"].as_u64().unwrap();
    assert!(
        freed >= 3 * MIB as u64,
        "freed only {freed} bytes: {report}"
    );
    let after = c.container_bytes();
    assert!(
        after + 3 * MIB as u64 <= before + (dups as u64) * 64 * 1024,
        "the bucket held {before} bytes before and {after} after"
    );

    // B's handle still reads what it opened.
    let mut got = Vec::new();
    handle.read_to_end(&mut got).unwrap();
    assert!(got == held, "the old content B's handle holds changed");
    drop(handle);

    // Read back from the store (fresh mounts: no page cache) on both.
    mb.unmount();
    ma.unmount();
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");
    for m in [&ma, &mb] {
        reads_back(&m.path("d/keep"), &keep);
        reads_back(&m.path("d/keep-copy"), &keep);
        reads_back(&m.path("d/mine"), &mine);
        reads_back(&m.path("d/held"), &held_now);
        for n in 0..dups {
            reads_back(&m.path(&format!("d/dup-{n}")), &keep);
        }
        assert!(!m.path("d/garbage").exists());
    }
    ok(&c.a, &["check"]);
    ok(&c.b, &["check"]);

    // B collects its own containers; A's data is untouched by it.
    fs::remove_file(mb.path("d/mine")).unwrap();
    ok(&c.b, &["gc", "--threshold", "1"]);
    mb.unmount();
    let mb = c.mount(&c.b, "mnt-b");
    for m in [&ma, &mb] {
        reads_back(&m.path("d/keep"), &keep);
        reads_back(&m.path("d/keep-copy"), &keep);
    }
    ok(&c.a, &["check"]);
    ok(&c.b, &["check"]);
    mb.unmount();
    ma.unmount();
}

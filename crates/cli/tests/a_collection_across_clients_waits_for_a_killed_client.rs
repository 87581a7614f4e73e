//! A client killed while mounted (`kill -9`) leaves its mounted mark: a
//! collection on another client cannot learn what it was holding, so it
//! gives up before deleting anything, naming the client (space leaks,
//! nothing is lost). Once that client is mounted again, it answers and
//! the collection frees the garbage; unmounted cleanly, it is not waited
//! for at all.

mod common;
mod two_clients_common;

use std::fs;

use common::{cairn, no_versions, ok, random};

const MIB: usize = 1 << 20;

#[test]
fn a_collection_gives_up_on_a_killed_client_and_runs_once_it_is_back() {
    let c = two_clients_common::cluster();
    no_versions(&c.a);
    no_versions(&c.b);
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");
    let keep = random(MIB, 1);
    fs::write(ma.path("keep"), &keep).unwrap();
    fs::write(ma.path("garbage"), random(3 * MIB, 2)).unwrap();
    two_clients_common::reads_back(&mb.path("keep"), &keep);
    fs::remove_file(ma.path("garbage")).unwrap();
    mb.kill();
    let before = c.container_bytes();

    let out = cairn(&c.a, &["gc", "--threshold", "1", "--peer-wait", "2"]);
    assert!(!out.status.success(), "gc ran past a killed client");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing was reclaimed") && err.contains("client(s) 1 did not answer"),
        "{err}"
    );
    assert_eq!(c.container_bytes(), before, "gc deleted containers");
    assert!(
        c.log_lines(&c.a, "did not answer") >= 1,
        "the refusal is not in A's log"
    );

    // B back: it answers, and the garbage goes.
    let mb = c.mount(&c.b, "mnt-b");
    ok(&c.a, &["gc", "--threshold", "1", "--peer-wait", "30"]);
    let after = c.container_bytes();
    assert!(
        after + 2 * MIB as u64 <= before,
        "the bucket held {before} bytes before and {after} after"
    );
    two_clients_common::reads_back(&mb.path("keep"), &keep);
    two_clients_common::reads_back(&ma.path("keep"), &keep);
    ok(&c.a, &["check"]);
    ok(&c.b, &["check"]);

    // B unmounted cleanly takes its mark away: a collection does not wait.
    // (Before session 31 the mark stayed, and every later gc gave up.)
    mb.unmount();
    ok(&c.a, &["gc", "--threshold", "1", "--peer-wait", "2"]);
    ma.unmount();
}

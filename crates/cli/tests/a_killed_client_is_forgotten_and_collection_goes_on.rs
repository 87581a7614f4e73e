//! A client killed while mounted, not coming back: `cairn cluster
//! forget-client` refuses while its registration in etcd still lives (a
//! minute), then takes its mark away, and a collection on another client
//! runs without it. Mounted again later, the client works as before.

mod common;
mod two_clients_common;

use std::fs;
use std::time::{Duration, Instant};

use common::{cairn, no_versions, ok, random};

const MIB: usize = 1 << 20;

#[test]
fn a_killed_client_is_forgotten_and_collection_goes_on() {
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
    let forget = ["cluster", "forget-client", "--meta", &c.url, "1"];

    // Its registration lives on for its TTL: refused, naming it.
    let out = cairn(&c.a, &forget);
    assert!(!out.status.success(), "a registered client was forgotten");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("client 1 is alive"), "{err}");
    let out = cairn(&c.a, &["gc", "--threshold", "1", "--peer-wait", "2"]);
    assert!(!out.status.success(), "gc ran past a killed client");

    // Once the registration lapsed (60 s), the mark goes.
    let start = Instant::now();
    loop {
        let out = cairn(&c.a, &forget);
        if out.status.success() {
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(said.contains("client 1 forgotten"), "{said}");
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("client 1 is alive"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(150),
            "the killed client's registration never lapsed"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let again = ok(&c.a, &forget);
    assert!(again.contains("not marked mounted"), "{again}");

    ok(&c.a, &["gc", "--threshold", "1", "--peer-wait", "2"]);
    let after = c.container_bytes();
    assert!(
        after + 2 * MIB as u64 <= before,
        "the bucket held {before} bytes before and {after} after"
    );
    two_clients_common::reads_back(&ma.path("keep"), &keep);
    ok(&c.a, &["check"]);

    // B mounted again: it reads what A kept, and writes.
    let mb = c.mount(&c.b, "mnt-b");
    two_clients_common::reads_back(&mb.path("keep"), &keep);
    let from_b = random(MIB, 3);
    fs::write(mb.path("from-b"), &from_b).unwrap();
    two_clients_common::reads_back(&ma.path("from-b"), &from_b);
    ok(&c.b, &["check"]);
    mb.unmount();
    ma.unmount();
}

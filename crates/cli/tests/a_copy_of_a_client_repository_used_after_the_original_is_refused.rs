//! A client repository copied (`cp -a`), then the original used again:
//! the copy would hand out container ids the original reserved since the
//! copy was made (both start their next batch at the same mark). Opening
//! the copy is refused before it writes anything: the original's new
//! containers are newer than the copy's id mark, and the message says the
//! copy is stale and must not be rebuilt (it used to say the metadata was
//! damaged and to run `cairn recover`). The original goes on working.
//! (Had the original reserved ids without storing a container yet, the
//! ledger of reservations in etcd refuses the copy at mount:
//! `crates/meta-etcd/tests/container_ids_are_reserved_once_per_client_number.rs`.)

mod common;
mod two_clients_common;

use std::fs;
use std::process::Command;

use common::random;
use two_clients_common::reads_back;

#[test]
fn a_stale_copy_of_a_client_repository_is_refused() {
    let c = two_clients_common::cluster();
    let first = random(300_000, 1);
    let mb = c.mount(&c.b, "mnt-b");
    fs::write(mb.path("first"), &first).unwrap();
    mb.unmount();

    let copy = c.base.path().join("b-copy");
    let cp = Command::new("cp")
        .args(["-a", c.b.to_str().unwrap(), copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(cp.status.success(), "{cp:?}");

    // The original writes again: a new batch of ids, past the copy's mark.
    let second = random(300_000, 2);
    let mb = c.mount(&c.b, "mnt-b");
    fs::write(mb.path("second"), &second).unwrap();
    mb.unmount();

    let err = c.mount_refused(&copy, "mnt-copy");
    assert!(
        err.contains("is stale: do not rebuild it") && !err.contains("cairn recover"),
        "the refusal says why: {err}"
    );

    let mb = c.mount(&c.b, "mnt-b");
    reads_back(&mb.path("first"), &first);
    reads_back(&mb.path("second"), &second);
    mb.unmount();
}

//! A client repository copied (`cp -a`) and mounted while the original is
//! mounted: both would be client 1 and hand out the same container ids,
//! so the second mount is refused before it writes anything, naming the
//! process that holds client 1, and the first goes on working (before
//! session 32 the copy wrote a container under an id the first then
//! failed to write: EIO). Unmounted cleanly, the first mounts again at
//! once.

mod common;
mod two_clients_common;

use std::fs;
use std::process::Command;

use common::random;
use two_clients_common::reads_back;

#[test]
fn a_copied_client_repository_is_refused_while_the_first_is_mounted() {
    let c = two_clients_common::cluster();
    let copy = c.base.path().join("b-copy");
    let cp = Command::new("cp")
        .args(["-a", c.b.to_str().unwrap(), copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(cp.status.success(), "{cp:?}");

    let mb = c.mount(&c.b, "mnt-b");
    let err = c.mount_refused(&copy, "mnt-copy");
    assert!(
        err.contains("client 1 is mounted by another process"),
        "the refusal says why: {err}"
    );

    let data = random(300_000, 3);
    fs::write(mb.path("still-b"), &data).unwrap();
    reads_back(&mb.path("still-b"), &data);
    mb.unmount();

    // Unmounted cleanly, the number is free again for the original.
    let mb = c.mount(&c.b, "mnt-b");
    reads_back(&mb.path("still-b"), &data);
    mb.unmount();
}

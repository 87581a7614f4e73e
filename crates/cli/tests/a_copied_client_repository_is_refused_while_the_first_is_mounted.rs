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

use common::{random, CAIRN};
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
    let dir = c.base.path().join("mnt-copy");
    fs::create_dir_all(&dir).unwrap();
    let second = Command::new(CAIRN)
        .args(["--repo", copy.to_str().unwrap(), "mount", "--meta", &c.url])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        !second.status.success(),
        "the copy mounted beside the original"
    );
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("client 1 is mounted by another process"),
        "the refusal says why: {err}"
    );
    assert!(!common::is_cairn_mounted(&dir));

    let data = random(300_000, 3);
    fs::write(mb.path("still-b"), &data).unwrap();
    reads_back(&mb.path("still-b"), &data);
    mb.unmount();

    // Unmounted cleanly, the number is free again for the original.
    let mb = c.mount(&c.b, "mnt-b");
    reads_back(&mb.path("still-b"), &data);
    mb.unmount();
}

//! Two clients on one etcd racing (`common::races`): creates of one
//! name, a create against an rmdir, crossing directory renames.

mod common;

#[test]
fn two_clients_race_without_breaking_the_tree() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let (x, y) = (etcd.open(&fs), etcd.open(&fs));
    common::races::run(&x, &y);
}

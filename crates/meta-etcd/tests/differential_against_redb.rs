//! The differential property test: random sequences of namespace
//! operations applied to the redb engine and to etcd give identical
//! results (inodes field by field, errors by kind) and identical final
//! namespaces (every inode, every entry, every xattr).

mod common;

use meta::MetaStore;

#[test]
fn random_operations_agree_with_redb() {
    let etcd = common::Etcd::start();
    common::differential::run(24, &|| {
        Box::new(etcd.open(&common::fsid())) as Box<dyn MetaStore>
    });
}

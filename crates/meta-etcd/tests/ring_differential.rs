//! The differential property test over a file system sharded over three
//! data clusters: random sequences of namespace operations (creates,
//! links, renames and removals that cross clusters) give the results the
//! redb engine gives, and the same final namespace.

mod common;

use meta::MetaStore;

#[test]
fn random_operations_over_three_clusters_agree_with_redb() {
    let ring = common::Ring::start(3);
    common::differential::run(12, &|| {
        let fs = ring.init(16);
        Box::new(ring.open(&fs)) as Box<dyn MetaStore>
    });
}

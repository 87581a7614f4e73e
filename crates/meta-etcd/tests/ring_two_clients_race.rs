//! Two clients of a file system over three data clusters racing
//! (`common::races`): creates of one name, a create against an rmdir of a
//! directory on another cluster, and crossing renames of directories into
//! each other's subtree, whose ancestors span clusters (intents): exactly
//! one create wins, no entry in a deleted directory, never a loop.

mod common;

#[test]
fn two_clients_race_across_clusters_without_breaking_the_tree() {
    let ring = common::Ring::start(3);
    let fs = ring.init(16);
    let (x, y) = (ring.open(&fs), ring.open(&fs));
    common::races::run(&x, &y);
}

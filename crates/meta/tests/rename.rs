//! Rename: moves, replacing a file or a directory, noreplace, exchange,
//! the same inode, parent pointers, a directory into its own subtree, errors.

mod common;

use common::*;
use meta::conformance;

#[test]
fn rename_moves_a_file_and_sets_times() {
    let (_d, m) = store();
    conformance::rename::rename_moves_a_file_and_sets_times(&m);
    assert_consistent(&m);
}

#[test]
fn rename_of_a_directory_moves_one_nlink_and_its_parent_pointer() {
    let (_d, m) = store();
    conformance::rename::rename_of_a_directory_moves_one_nlink_and_its_parent_pointer(&m);
    assert_consistent(&m);
}

#[test]
fn rename_into_its_own_subtree_is_invalid() {
    let (_d, m) = store();
    conformance::rename::rename_into_its_own_subtree_is_invalid(&m);
    assert_consistent(&m);
}

#[test]
fn rename_replacing_a_file_follows_unlink() {
    let (_d, m) = store();
    conformance::rename::rename_replacing_a_file_follows_unlink(&m);
    assert_consistent(&m);
}

#[test]
fn rename_replacing_a_directory() {
    let (_d, m) = store();
    conformance::rename::rename_replacing_a_directory(&m);
    assert_consistent(&m);
}

#[test]
fn rename_noreplace() {
    let (_d, m) = store();
    conformance::rename::rename_noreplace(&m);
    assert_consistent(&m);
}

#[test]
fn rename_exchange() {
    let (_d, m) = store();
    conformance::rename::rename_exchange(&m);
    assert_consistent(&m);
}

#[test]
fn rename_onto_the_same_inode_is_a_no_op() {
    let (_d, m) = store();
    conformance::rename::rename_onto_the_same_inode_is_a_no_op(&m);
    assert_consistent(&m);
}

#[test]
fn rename_errors() {
    let (_d, m) = store();
    conformance::rename::rename_errors(&m);
    assert_consistent(&m);
}

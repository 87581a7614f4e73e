//! Listing a directory: name order, pages, and directories kept apart.

mod common;

use common::*;
use meta::conformance;

#[test]
fn readdir_is_ordered_and_pages() {
    let (_d, m) = store();
    conformance::readdir::readdir_is_ordered_and_pages(&m);
    assert_consistent(&m);
}

#[test]
fn readdir_keeps_directories_apart_past_255_inodes() {
    let (_d, m) = store();
    conformance::readdir::readdir_keeps_directories_apart_past_255_inodes(&m);
    assert_consistent(&m);
}

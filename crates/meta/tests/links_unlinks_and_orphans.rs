//! Hard links, unlinks, orphans kept for open handles, and rmdir: the
//! nlink and ctime rules.

mod common;

use common::*;
use meta::conformance;

#[test]
fn link_raises_nlink_and_ctime() {
    let (_d, m) = store();
    conformance::links_unlinks_and_orphans::link_raises_nlink_and_ctime(&m);
    assert_consistent(&m);
}

#[test]
fn link_of_an_orphan_is_refused() {
    let (_d, m) = store();
    conformance::links_unlinks_and_orphans::link_of_an_orphan_is_refused(&m);
    assert_consistent(&m);
}

#[test]
fn unlink_lowers_nlink_then_deletes() {
    let (_d, m) = store();
    conformance::links_unlinks_and_orphans::unlink_lowers_nlink_then_deletes(&m);
    assert_consistent(&m);
}

#[test]
fn unlink_errors() {
    let (_d, m) = store();
    conformance::links_unlinks_and_orphans::unlink_errors(&m);
    assert_consistent(&m);
}

#[test]
fn orphans_live_until_dropped_or_purged() {
    let (_d, m) = store();
    conformance::links_unlinks_and_orphans::orphans_live_until_dropped_or_purged(&m);
    assert_consistent(&m);
}

#[test]
fn rmdir_removes_an_empty_directory() {
    let (_d, m) = store();
    conformance::links_unlinks_and_orphans::rmdir_removes_an_empty_directory(&m);
    assert_consistent(&m);
}

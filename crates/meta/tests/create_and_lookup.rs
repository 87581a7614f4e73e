//! Creating inodes (attributes, links, times, xattrs), the names every
//! operation checks, and lookups.

mod common;

use common::*;
use meta::conformance;

#[test]
fn create_sets_attributes_links_and_times() {
    let (_d, m) = store();
    conformance::create_and_lookup::create_sets_attributes_links_and_times(&m);
    assert_consistent(&m);
}

#[test]
fn create_errors_change_nothing() {
    let (_d, m) = store();
    conformance::create_and_lookup::create_errors_change_nothing(&m);
    assert_consistent(&m);
}

#[test]
fn create_stores_the_xattrs_it_is_given() {
    let (_d, m) = store();
    conformance::create_and_lookup::create_stores_the_xattrs_it_is_given(&m);
    assert_consistent(&m);
}

#[test]
fn names_are_checked_everywhere() {
    let (_d, m) = store();
    conformance::create_and_lookup::names_are_checked_everywhere(&m);
    assert_consistent(&m);
}

#[test]
fn lookup_and_get_errors() {
    let (_d, m) = store();
    conformance::create_and_lookup::lookup_and_get_errors(&m);
    assert_consistent(&m);
}

#[test]
fn get_many_answers_as_get() {
    let (_d, m) = store();
    conformance::create_and_lookup::get_many_answers_as_get(&m);
    assert_consistent(&m);
}

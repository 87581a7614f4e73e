//! Changing attributes, content and extended attributes, alone or in one
//! step.

mod common;

use common::*;
use meta::conformance;

#[test]
fn set_attr_changes_only_what_is_given() {
    let (_d, m) = store();
    conformance::attributes_content_and_xattrs::set_attr_changes_only_what_is_given(&m);
    assert_consistent(&m);
}

#[test]
fn set_content_and_for_each_content() {
    let (_d, m) = store();
    conformance::attributes_content_and_xattrs::set_content_and_for_each_content(&m);
    assert_consistent(&m);
}

#[test]
fn xattrs() {
    let (_d, m) = store();
    conformance::attributes_content_and_xattrs::xattrs(&m);
    assert_consistent(&m);
}

#[test]
fn update_changes_attributes_and_xattrs_in_one_step() {
    let (_d, m) = store();
    conformance::attributes_content_and_xattrs::update_changes_attributes_and_xattrs_in_one_step(
        &m,
    );
    assert_consistent(&m);
}

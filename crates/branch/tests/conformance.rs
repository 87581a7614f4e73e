//! Every branch implementation passes the same conformance suite.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use branch::testing::{conformance, S3Proxy};
use branch::{Branch, FaultyBranch, LocalDir, S3Bucket};

/// Fresh local branches under one temporary directory.
fn local_dirs() -> (tempfile::TempDir, impl Fn() -> Arc<dyn Branch>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let n = AtomicU64::new(0);
    let make = move || -> Arc<dyn Branch> {
        let sub = root.join(n.fetch_add(1, Ordering::Relaxed).to_string());
        Arc::new(LocalDir::open("local", sub).unwrap().0)
    };
    (dir, make)
}

#[test]
fn local_dir() {
    let (_dir, make) = local_dirs();
    conformance(make);
}

#[test]
fn healthy_faulty_branch_over_local_dir() {
    let (_dir, make) = local_dirs();
    conformance(|| Arc::new(FaultyBranch::new(make())));
}

#[test]
fn s3_bucket_on_s3proxy() {
    let proxy = S3Proxy::start();
    conformance(|| Arc::new(S3Bucket::open("s3", &proxy.new_bucket()).unwrap()));
}

#[test]
fn powered_crash_branch_over_local_dir() {
    let (_dir, make) = local_dirs();
    let power = branch::crash::Power::on();
    conformance(|| Arc::new(branch::crash::CrashBranch::new(make(), &power)));
}

//! The S3 branch against a real S3 server: how it refuses bad configuration
//! and how it reports a store that stops answering.

use std::net::TcpListener;

use branch::testing::S3Proxy;
use branch::{BlobKey, Branch, BranchError, S3Bucket, S3Config};

#[test]
fn open_fails_with_a_named_error_when_nothing_listens() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let Err(err) = S3Bucket::open("s3", &S3Config::new(&endpoint, "blobs", "id", "secret")) else {
        panic!("opened a bucket where nothing listens");
    };
    assert!(matches!(err, BranchError::Unreachable { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&endpoint) && message.contains("blobs"),
        "{message}"
    );
}

#[test]
fn open_refuses_a_missing_bucket_and_wrong_credentials() {
    let proxy = S3Proxy::start();
    let Err(err) = S3Bucket::open("s3", &proxy.config("no-such-bucket")) else {
        panic!("opened a bucket that does not exist");
    };
    let message = err.to_string();
    assert!(matches!(err, BranchError::Unreachable { .. }), "{message}");
    assert!(
        message.contains("no-such-bucket") && message.contains("NoSuchBucket"),
        "{message}"
    );

    let mut config = proxy.new_bucket();
    config.secret_access_key = "wrong".into();
    let Err(err) = S3Bucket::open("s3", &config) else {
        panic!("opened a bucket with a wrong secret");
    };
    assert!(matches!(err, BranchError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains(&config.bucket), "{err}");
}

#[test]
fn errors_of_a_store_that_stopped_name_branch_operation_and_blob() {
    let proxy = S3Proxy::start();
    let mut config = proxy.new_bucket();
    config.max_retries = 0;
    let bucket = S3Bucket::open("remote-1", &config).unwrap();
    let key = BlobKey::new("c/00/blob").unwrap();
    bucket.put(&key, b"data").unwrap();
    drop(proxy);
    for (op, err) in [
        ("get", bucket.get(&key).unwrap_err()),
        ("read", bucket.read_range(&key, 0, 2).unwrap_err()),
        (
            "put",
            bucket
                .put(&BlobKey::new("c/01/x").unwrap(), b"x")
                .unwrap_err(),
        ),
        ("list", bucket.list("c/").unwrap_err()),
    ] {
        let BranchError::Remote {
            branch, op: got, ..
        } = &err
        else {
            panic!("{op}: {err}");
        };
        assert_eq!((branch.as_str(), *got), ("remote-1", op));
        let message = err.to_string();
        assert!(
            message.contains("remote-1") && message.contains("c/"),
            "{message}"
        );
    }
}

#[test]
fn config_debug_hides_the_secret() {
    let config = S3Config::new("http://127.0.0.1:1", "b", "id", "very-secret");
    assert!(!format!("{config:?}").contains("very-secret"));
}

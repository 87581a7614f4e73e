//! Every refusal the gateway answers carries S3's code and a message (a
//! missing key, bucket, upload or part, a bad range, name or precondition,
//! a bucket not empty, a bad signature, an unknown key): boto3 and the AWS
//! CLI print "Unknown" for an answer without them
//! (`s3_clients/error_messages.py`).

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::path::Path;

#[test]
fn gateway_refusals_name_their_code_and_reason() {
    let base = tempfile::tempdir().unwrap();
    let served = serve::serve(&base.path().join("repo"), &base.path().join("mnt"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3_clients/error_messages.py");
    let out = served
        .python()
        .arg(&script)
        .output()
        .expect("python3 with boto3 (pip install boto3)");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.ends_with("OK\n"),
        "error_messages.py failed:\n{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("get_object: NoSuchKey: The specified key does not exist."),
        "{said}"
    );
    served.mount.unmount();
}

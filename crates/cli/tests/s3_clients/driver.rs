//! A boto3 process answering one JSON request a line (create a bucket,
//! put, get, copy, delete, and a GET and HEAD of many keys at once), for
//! tests that count what each request does or compare what S3 answers
//! with the tree, and the daemon's `storage_reads` control request.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use crate::serve::Served;

const DRIVER: &str = r#"
import binascii, json, sys
from botocore.exceptions import ClientError
from cairn_s3 import client
s3 = client()
for line in sys.stdin:
    r = json.loads(line)
    if r["op"] == "bucket":
        s3.create_bucket(Bucket=r["bucket"])
        out = "ok"
    elif r["op"] == "put":
        s3.put_object(Bucket=r["bucket"], Key=r["key"], Body=binascii.unhexlify(r["data"]))
        out = "ok"
    elif r["op"] == "get":
        out = binascii.hexlify(s3.get_object(Bucket=r["bucket"], Key=r["key"])["Body"].read()).decode()
    elif r["op"] == "delete":
        s3.delete_object(Bucket=r["bucket"], Key=r["key"])
        out = "ok"
    elif r["op"] == "copy":
        s3.copy_object(Bucket=r["bucket"], Key=r["key"],
            CopySource={"Bucket": r["bucket"], "Key": r["src"]})
        out = "ok"
    elif r["op"] == "check":
        out = {}
        for k in r["keys"]:
            try:
                body = s3.get_object(Bucket=r["bucket"], Key=k)["Body"].read()
                size = s3.head_object(Bucket=r["bucket"], Key=k)["ContentLength"]
                out[k] = [binascii.hexlify(body).decode(), size]
            except ClientError as e:
                out[k] = e.response["Error"]["Code"]
            except Exception as e:
                # A body cut short of its Content-Length, for one.
                out[k] = "broken: " + repr(e)
    print(json.dumps(out), flush=True)
"#;

pub struct Driver {
    child: Child,
    tx: ChildStdin,
    rx: BufReader<ChildStdout>,
}

impl Driver {
    pub fn start(s: &Served) -> Driver {
        let mut child = s
            .python()
            .args(["-c", DRIVER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with boto3 (pip install boto3)");
        Driver {
            tx: child.stdin.take().unwrap(),
            rx: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    fn ask(&mut self, req: serde_json::Value) -> serde_json::Value {
        writeln!(self.tx, "{req}").unwrap();
        let mut line = String::new();
        self.rx.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the boto3 driver died on {req}");
        serde_json::from_str(&line).unwrap()
    }

    pub fn create_bucket(&mut self, bucket: &str) {
        let got = self.ask(serde_json::json!({"op": "bucket", "bucket": bucket}));
        assert_eq!(got, "ok");
    }

    pub fn put(&mut self, bucket: &str, key: &str, body: &[u8]) {
        let req = serde_json::json!({"op": "put", "bucket": bucket, "key": key, "data": hex(body)});
        assert_eq!(self.ask(req), "ok", "PUT {key}");
    }

    pub fn get(&mut self, bucket: &str, key: &str) -> Vec<u8> {
        let got = self.ask(serde_json::json!({"op": "get", "bucket": bucket, "key": key}));
        let hex = got.as_str().unwrap();
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    /// CopyObject of `src` to `key`, both in `bucket`.
    pub fn copy(&mut self, bucket: &str, src: &str, key: &str) {
        let req = serde_json::json!({"op": "copy", "bucket": bucket, "src": src, "key": key});
        assert_eq!(self.ask(req), "ok", "COPY {src} to {key}");
    }

    /// A GET and a HEAD of each of `keys`: by key, `[hex of the body,
    /// ContentLength]`, the S3 error code (`NoSuchKey`), or `broken: ...`
    /// for a body cut short.
    pub fn check(&mut self, bucket: &str, keys: &[&String]) -> serde_json::Value {
        self.ask(serde_json::json!({"op": "check", "bucket": bucket, "keys": keys}))
    }

    pub fn delete(&mut self, bucket: &str, key: &str) {
        let req = serde_json::json!({"op": "delete", "bucket": bucket, "key": key});
        assert_eq!(self.ask(req), "ok", "DELETE {key}");
    }

    /// Ends the process (its stdin closed) and waits for it.
    pub fn stop(self) {
        drop(self.tx);
        let mut child = self.child;
        assert!(child.wait().unwrap().success(), "the boto3 driver failed");
    }
}

/// `b` in lowercase hex, as the driver sends and answers bodies.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The `storage_reads` control request, sent as `docs/control-protocol.md`
/// says: the reads of the metadata, of the chunk index, of containers.
pub fn storage_reads(repo: &Path) -> [u64; 3] {
    let sock = repo.join("run/control.sock");
    // The daemon opens its socket once the mount is up: wait for it.
    let started = std::time::Instant::now();
    let mut conn = loop {
        match std::os::unix::net::UnixStream::connect(&sock) {
            Ok(c) => break c,
            Err(e) if started.elapsed() > std::time::Duration::from_secs(30) => {
                panic!("no control socket at {}: {e}", sock.display())
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    writeln!(
        conn,
        r#"{{"protocol": 1, "request": {{"op": "storage_reads"}}}}"#
    )
    .unwrap();
    let mut last = None;
    for line in BufReader::new(conn).lines() {
        let line = line.unwrap();
        if !line.trim().is_empty() {
            last = Some(line);
        }
    }
    let answer: serde_json::Value = serde_json::from_str(&last.unwrap()).unwrap();
    ["meta", "index", "containers"].map(|k| {
        answer["ok"]["reply"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} count in {answer}"))
    })
}

//! `cairn cluster status` shows the file system's chunkd fingerprint index
//! beside its etcd clusters: none before `chunkd ranges init`; then each
//! range with its owner, and with `--token-file` each owner's health. An
//! owner that does not answer is named and the exit status is 1; once it
//! answers, 0.

mod common;

use std::net::TcpListener;
use std::path::Path;

use common::chunkd::{token_file, Chunkd};
use common::etcd::{cluster_init, Etcd};
use common::{cairn, ok};

fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `cluster status` with `args`: its exit code and stdout.
fn status(url: &str, args: &[&str]) -> (i32, String) {
    let mut all = vec!["cluster", "status", "--cluster", url];
    all.extend(args);
    let out = cairn(Path::new("/nonexistent"), &all);
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn cluster_status_shows_the_chunkd_index_and_its_owners() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let (control, data) = (Etcd::start(), Etcd::start());
    let made = cluster_init(&repo, &control, &[&data], "fs1", &[]);
    let url = made["url"].as_str().unwrap().to_string();

    let (code, out) = status(&url, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no chunkd fingerprint index"), "{out}");

    let token = token_file(base.path());
    let token = token.to_str().unwrap();
    let etcd = control
        .url("x")
        .replace("etcd://", "http://")
        .replace("/x", "");
    let (addr_a, addr_b) = (free_addr(), free_addr());
    let (url_a, url_b) = (format!("http://{addr_a}"), format!("http://{addr_b}"));
    let cluster = ["--etcd", etcd.as_str(), "--fsid", "fs1"];
    let mut init = vec!["chunkd", "ranges", "init"];
    init.extend(cluster);
    init.extend(["--owner", &url_a, "--owner", &url_b]);
    let out = cairn(Path::new("/nonexistent"), &init);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _a = Chunkd::start_with(&base.path().join("a"), token.as_ref(), &addr_a, &cluster);

    let (code, out) = status(&url, &["--token-file", token]);
    assert_eq!(code, 1, "an owner is down: {out}");
    assert!(out.contains("chunkd fingerprint index"), "{out}");
    assert!(
        out.contains(&format!(
            "0000000000000000 7fffffffffffffff {url_a} epoch 1"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("owner {url_a}: ok, holds 0000000000000000@1")),
        "{out}"
    );
    assert!(
        out.contains(&format!("owner {url_b}: not answering")),
        "{out}"
    );

    let (_, json) = status(&url, &["--token-file", token, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["chunkd"]["ranges"][1]["owner"], url_b.as_str());
    let owners = v["chunkd"]["owners"].as_array().unwrap();
    assert_eq!(owners.len(), 2);
    assert!(owners
        .iter()
        .any(|o| o["owner"] == url_b.as_str() && o["ok"] == false));
    assert!(v["clusters"].as_array().is_some_and(|c| c.len() == 1));

    // Without the token nobody is asked: the ranges alone, exit 0.
    let (code, out) = status(&url, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("not answering"), "{out}");

    let _b = Chunkd::start_with(&base.path().join("b"), token.as_ref(), &addr_b, &cluster);
    let (code, out) = status(&url, &["--token-file", token]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("owner {url_b}: ok, holds 8000000000000000@1")),
        "{out}"
    );
}

//! `cairn mount --metrics ADDR`: an ADDR in use is refused before anything
//! is mounted; a mount without the S3 gateway answers an unsigned
//! `GET /metrics` at ADDR (promtool clean, no S3 figures) and 404 to
//! anything else; over a workload through the mount and the CLI, the
//! mount's requests, dirty-bytes admission waits (a file past a small
//! `fs.file_dirty`), the DRAM and redb page caches' hits, the branch's reads and writes
//! and the CLI's requests by kind all rise, none falls, and a snapshot
//! taken is counted among the roots. The
//! repository checks clean after the unmount, the file byte-exact.

mod common;

use std::fs;
use std::process::Command;

use common::metrics::{get, none_fell, promtool_clean, samples, scrape, value};
use common::{edit_config, ok, random, Mount};

/// A loopback port free now (the daemon binds it a moment later).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The HTTP status of `curl ARGS URL`.
fn status(url: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_plain_mount_serves_metrics_when_asked() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    // A file past 1 MiB of dirty bytes waits for admission; files past
    // 1 MiB are read around the page cache, so a second read asks cairn.
    edit_config(
        &repo,
        &[
            ("file_dirty = \"32MiB\"", "file_dirty = \"1MiB\""),
            ("page_cache_max = \"16MiB\"", "page_cache_max = \"1MiB\""),
        ],
    );
    let addr = format!("127.0.0.1:{}", free_port());
    let m = Mount::start_cmd(repo.clone(), dir.clone(), &["mount", "--metrics", &addr]);
    let url = format!("http://{addr}/metrics");

    let (before_text, ctype) = get(&url);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    promtool_clean(&before_text);
    assert!(
        !before_text.contains("cairn_s3_"),
        "no gateway, no S3 figures"
    );
    assert_eq!(status(&format!("http://{addr}/"), &[]), "404");
    assert_eq!(status(&format!("http://{addr}/dashboard"), &[]), "404");
    assert_eq!(status(&url, &["-X", "PUT"]), "404");
    assert_eq!(
        status(&url, &["-H", "Authorization: AWS4-HMAC-SHA256 x"]),
        "404"
    );
    let before = samples(&before_text);

    // The workload: a file written past the file's dirty limit, read
    // twice, and commands through the control socket.
    let data = random(3 << 20, 17);
    fs::write(dir.join("big"), &data).unwrap();
    for _ in 0..2 {
        assert!(fs::read(dir.join("big")).unwrap() == data);
    }
    ok(&repo, &["snapshot", "create", "s1"]);
    let stats: serde_json::Value = serde_json::from_str(&ok(&repo, &["stats", "--json"])).unwrap();
    ok(&repo, &["check"]);
    ok(&repo, &["check"]);

    let (after_text, _) = get(&url);
    promtool_clean(&after_text);
    let after = samples(&after_text);
    none_fell(&before, &after);
    let rose = |key: &str| {
        assert!(
            value(&after, key) > value(&before, key),
            "{key} did not rise:\n{after_text}"
        );
    };
    rose("cairn_fuse_request_duration_seconds_count{op=\"write\"}");
    rose("cairn_admission_wait_seconds_count{limit=\"file\"}");
    rose("cairn_cache_hits_total{cache=\"dram\"}");
    rose("cairn_cache_hits_total{cache=\"metadata\"}");
    rose("cairn_cache_hits_total{cache=\"index\"}");
    rose("cairn_branch_io_duration_seconds_count{branch=\"local\",op=\"write\"}");
    rose("cairn_branch_io_duration_seconds_count{branch=\"local\",op=\"read\"}");
    rose("cairn_branch_io_bytes_total{branch=\"local\",op=\"read\"}");
    assert_eq!(
        value(
            &after,
            "cairn_control_requests_total{kind=\"check\",state=\"done\"}"
        ),
        2.0,
        "{after_text}"
    );
    assert_eq!(
        value(
            &after,
            "cairn_control_requests_total{kind=\"stats\",state=\"done\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "cairn_jobs_finished_total{kind=\"check\",state=\"done\"}"
        ),
        2.0
    );
    assert_eq!(
        value(
            &after,
            "cairn_control_requests_total{kind=\"snapshot_create\",state=\"done\"}"
        ),
        1.0
    );
    assert_eq!(value(&after, "cairn_roots{kind=\"snapshot\"}"), 1.0);
    // Every container the store keeps was written through the branch
    // since the mount (a new repository).
    assert!(
        value(
            &after,
            "cairn_branch_io_bytes_total{branch=\"local\",op=\"write\"}"
        ) >= stats["stored_bytes"].as_f64().unwrap(),
        "{stats}\n{after_text}"
    );
    assert_eq!(
        value(&scrape(&url), "cairn_store_stored_bytes"),
        stats["stored_bytes"].as_f64().unwrap()
    );

    let (repo, dir) = m.unmount();
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "the listener ends with the mount"
    );
    // An address in use is refused before anything is mounted.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let out = common::cairn(
        &repo,
        &["mount", "--metrics", &taken_addr, dir.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&taken_addr), "{said}");
    assert!(!common::is_cairn_mounted(&dir));
    drop(taken);

    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    let m = Mount::start(repo, dir);
    assert!(fs::read(m.path("big")).unwrap() == data);
    m.unmount();
}

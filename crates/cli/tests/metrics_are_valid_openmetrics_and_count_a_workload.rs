//! `/metrics` on `cairn serve`'s port: an unsigned GET answers OpenMetrics
//! text that `promtool check metrics` (Prometheus's own linter) finds
//! clean, with the documented names and types; the counters rise over a
//! workload through the mount and through S3 and never fall; the store's
//! figures agree with `cairn stats --json`; a signed GET of `/metrics` is
//! still S3; every series the shipped Grafana dashboard queries is
//! documented and, but for those a plain repository has none of (branches,
//! the cache tier), scraped.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;

use common::metrics::{get, get_as, none_fell, promtool_clean, samples, types};
use common::random;

#[test]
fn metrics_are_valid_openmetrics_and_count_a_workload() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let s = serve::serve(&repo, &dir);
    let url = format!("{}/metrics", s.endpoint);

    let (before, ctype) = get(&url);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    promtool_clean(&before);

    // A workload through the mount and through S3.
    let data = random(3 << 20, 7);
    fs::create_dir_all(dir.join("bkt/d")).unwrap();
    fs::write(dir.join("bkt/d/one"), &data).unwrap();
    assert!(fs::read(dir.join("bkt/d/one")).unwrap() == data);
    let put = Command::new("python3")
        .args([
            "-c",
            "import boto3, os\n\
             s3 = boto3.client('s3', endpoint_url=os.environ['ENDPOINT'], \
             aws_access_key_id=os.environ['KEY_ID'], aws_secret_access_key=os.environ['SECRET'], \
             region_name='us-east-1')\n\
             s3.put_object(Bucket='bkt', Key='two', Body=b'x' * 100000)\n\
             for _ in range(2):\n    assert s3.get_object(Bucket='bkt', Key='d/one')['ContentLength'] == 3 << 20\n\
             # A signed GET of /metrics is S3: a bucket that does not exist.\n\
             import botocore\n\
             try:\n    s3.list_objects_v2(Bucket='metrics')\n    raise SystemExit('listed a bucket named metrics')\n\
             except botocore.exceptions.ClientError as e:\n    assert e.response['Error']['Code'] == 'NoSuchBucket', e.response",
        ])
        .env("ENDPOINT", &s.endpoint)
        .env("KEY_ID", &s.key_id)
        .env("SECRET", &s.secret)
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    // A command's long operation runs in the daemon as a job.
    common::ok(&repo, &["check"]);

    // What Prometheus asks for: OpenMetrics, ending in its EOF marker, with
    // every documented family (a family with no sample yet is left out).
    let (open, ctype) = get_as(
        &url,
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
    );
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(open.ends_with("# EOF\n"), "no EOF marker");
    let t = types(&open);
    for (name, kind) in [
        ("cairn_fuse_request_duration_seconds", "histogram"),
        ("cairn_s3_request_duration_seconds", "histogram"),
        ("cairn_commit_duration_seconds", "histogram"),
        ("cairn_commit_failures", "counter"),
        ("cairn_files", "gauge"),
        ("cairn_directories", "gauge"),
        ("cairn_store_chunks", "gauge"),
        ("cairn_store_containers", "gauge"),
        ("cairn_store_unique_bytes", "gauge"),
        ("cairn_store_stored_bytes", "gauge"),
        ("cairn_dirty_bytes", "gauge"),
        ("cairn_cache_dram_bytes", "gauge"),
        ("cairn_cache_misses", "counter"),
        ("cairn_store_reads", "counter"),
        ("cairn_jobs_running", "gauge"),
        ("cairn_jobs_finished", "counter"),
        ("cairn_cache_hits", "counter"),
        ("cairn_cache_fetch_joins", "counter"),
        ("cairn_control_requests", "counter"),
        ("cairn_branch_io_duration_seconds", "histogram"),
        ("cairn_branch_io_bytes", "counter"),
        ("cairn_roots", "gauge"),
    ] {
        assert_eq!(
            t.get(name).map(String::as_str),
            Some(kind),
            "{name} in\n{open}"
        );
    }
    let (after, _) = get(&url);
    promtool_clean(&after);
    let (b, a) = (samples(&before), samples(&after));
    // Counters (and histogram counts) never fall.
    none_fell(&b, &a);
    let count = |m: &BTreeMap<String, f64>, key: &str| m.get(key).copied().unwrap_or(0.0);
    assert!(
        count(
            &a,
            "cairn_fuse_request_duration_seconds_count{op=\"write\"}"
        ) > 0.0,
        "{after}"
    );
    assert!(
        count(
            &a,
            "cairn_fuse_request_duration_seconds_count{op=\"lookup\"}"
        ) > 0.0
    );
    assert!(count(&a, "cairn_fuse_bytes_total{direction=\"written\"}") >= data.len() as f64);
    assert!(count(&a, "cairn_fuse_bytes_total{direction=\"read\"}") >= data.len() as f64);
    assert!(
        count(&a, "cairn_s3_request_duration_seconds_count{method=\"PUT\",resource=\"object\",status=\"2xx\"}") >= 1.0,
        "{after}"
    );
    assert!(count(&a, "cairn_s3_request_duration_seconds_count{method=\"GET\",resource=\"bucket\",status=\"4xx\"}") >= 1.0);
    assert!(
        count(&a, "cairn_s3_bytes_total{direction=\"received\"}") >= 100_000.0,
        "{after}"
    );
    assert!(
        count(&a, "cairn_s3_bytes_total{direction=\"sent\"}") >= (3 << 20) as f64,
        "{after}"
    );
    assert!(
        count(&a, "cairn_commit_duration_seconds_count")
            > count(&b, "cairn_commit_duration_seconds_count")
    );
    assert_eq!(count(&a, "cairn_files"), 2.0, "{after}");
    assert_eq!(
        count(
            &a,
            "cairn_jobs_finished_total{kind=\"check\",state=\"done\"}"
        ),
        1.0,
        "{after}"
    );
    assert_eq!(count(&a, "cairn_jobs_running{kind=\"check\"}"), 0.0);
    assert_eq!(
        count(
            &a,
            "cairn_control_requests_total{kind=\"check\",state=\"done\"}"
        ),
        1.0,
        "{after}"
    );
    // The second GET of the same object found its chunks in DRAM.
    assert!(
        count(&a, "cairn_cache_hits_total{cache=\"dram\"}")
            > count(&b, "cairn_cache_hits_total{cache=\"dram\"}"),
        "{after}"
    );
    // The plain layout's one branch is `local`; its writes are the
    // containers the commits stored.
    let written = "cairn_branch_io_duration_seconds_count{branch=\"local\",op=\"write\"}";
    assert!(count(&a, written) > count(&b, written), "{after}");

    // The store's figures are the ones `cairn stats` reports.
    let stats: serde_json::Value =
        serde_json::from_str(&common::ok(&repo, &["stats", "--json"])).unwrap();
    let (now_text, _) = get(&url);
    let now = samples(&now_text);
    // The report `stats` just computed gives the logical figures.
    assert_eq!(
        now["cairn_logical_bytes"],
        stats["logical_bytes"].as_f64().unwrap()
    );
    assert!((now["cairn_dedup_ratio"] - stats["dedup_ratio"].as_f64().unwrap()).abs() < 1e-9);
    for (metric, field) in [
        ("cairn_store_chunks", "chunks"),
        ("cairn_store_containers", "containers"),
        ("cairn_store_unique_bytes", "unique_bytes"),
        ("cairn_store_stored_bytes", "stored_bytes"),
    ] {
        assert_eq!(
            now[metric],
            stats[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} in {stats}")),
            "{metric}"
        );
    }
    dashboard_queries_exported_series(&now_text);
    let (repo, _) = s.mount.unmount();
    let check = common::ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}

/// Every `cairn_*` series `contrib/grafana/cairn-dashboard.json` queries is
/// in `docs/metrics.md`, and in `scrape` unless it is one a plain
/// repository with no job running has none of.
fn dashboard_queries_exported_series(scrape: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dashboard: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(root.join("contrib/grafana/cairn-dashboard.json")).unwrap(),
    )
    .unwrap();
    let docs = fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    for expr in &exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("cairn_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            let family = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            assert!(
                docs.contains(&format!("`{family}`")),
                "{family} (in {expr}) is not documented"
            );
            // Absent here: no branches, no tier, no job running, no write
            // held by admission.
            let sometimes = [
                "cairn_branch_",
                "cairn_cache_tier_",
                "cairn_job_progress_",
                "cairn_admission_",
            ];
            if !sometimes.iter().any(|p| family.starts_with(p)) {
                assert!(
                    scrape.lines().any(|l| l.starts_with(&name)),
                    "{name} (in {expr}) is not scraped"
                );
            }
        }
    }
}

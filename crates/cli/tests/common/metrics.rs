//! Scraping `/metrics` as Prometheus and `promtool` do, for the metrics
//! tests.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

/// The body of an unsigned `GET url` (with `accept` as its Accept
/// header), with its Content-Type.
pub fn get_as(url: &str, accept: &str) -> (String, String) {
    let out = Command::new("curl")
        .args([
            "-sf",
            "-D",
            "/dev/stderr",
            "-H",
            &format!("Accept: {accept}"),
            url,
        ])
        .output()
        .expect("curl");
    assert!(out.status.success(), "GET {url} failed");
    let head = String::from_utf8_lossy(&out.stderr).to_lowercase();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or("")
        .trim()
        .to_string();
    (String::from_utf8(out.stdout).unwrap(), ctype)
}

/// `GET url` as `promtool` and older scrapers ask: Prometheus's text format.
pub fn get(url: &str) -> (String, String) {
    get_as(url, "*/*")
}

/// Every sample: `name{labels}` to its value.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (
                k.to_string(),
                v.parse().unwrap_or_else(|e| panic!("{l}: {e}")),
            )
        })
        .collect()
}

/// Every sample of an unsigned scrape of `url`.
pub fn scrape(url: &str) -> BTreeMap<String, f64> {
    samples(&get(url).0)
}

/// `# TYPE name type` lines.
pub fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        })
        .collect()
}

/// Asserts `promtool check metrics` (Debian `prometheus`) finds `text`
/// clean.
pub fn promtool_clean(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every counter, histogram count and bucket of `before` is in `after`
/// and no smaller.
pub fn none_fell(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) {
    for (k, v) in before {
        if k.contains("_total") || k.contains("_count") || k.contains("_bucket") {
            assert!(
                after.get(k).is_some_and(|x| x >= v),
                "{k} fell: {v} -> {:?}",
                after.get(k)
            );
        }
    }
}

/// The sample `key` of `m`, 0 when absent (a family with no sample yet).
pub fn value(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

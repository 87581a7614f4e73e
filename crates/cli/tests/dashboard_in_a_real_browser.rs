//! The web dashboard in a real browser (headless Chromium driven by
//! Selenium): against a real `cairn serve` of a repository mirrored over
//! two branches, the page's figures are the ones
//! `cairn stats --json` reports (the space each kind of root holds
//! included, with what the default policy can still store); without a key, or with a read-only one,
//! actions are refused; with an operator key a scrub and a snapshot started
//! from the page run and show as done, and the snapshot exists; a gc and a
//! check show their key figures on one line with the whole answer folded
//! below (the page no wider than the window); a snapshot with a bad name
//! shows as refused, and no job as failed. Screenshots
//! of each stage are saved under the test's output directory
//! (`CARGO_TARGET_TMPDIR/dashboard-shots`).

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::fs;
use std::process::Command;

use common::{ok, random};

#[test]
fn dashboard_in_a_real_browser() {
    let base = tempfile::tempdir().unwrap();
    let repo = common::shards::repo_over(base.path(), &["left", "right"], "mirror:2");
    let dir = base.path().join("mnt");
    let s = serve::serve(&repo, &dir);
    // Two copies of one file: dedup shows.
    let data = random(2 << 20, 5);
    fs::create_dir_all(dir.join("docs")).unwrap();
    fs::write(dir.join("docs/a.bin"), &data).unwrap();
    fs::write(dir.join("docs/b.bin"), &data).unwrap();
    fs::write(dir.join("docs/note.txt"), b"hello").unwrap();
    let ro = ok(&repo, &["access-key", "create", "--read-only"]);
    let field = |name: &str| {
        ro.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("no {name} in {ro}"))
            .to_string()
    };
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-shots");
    let _ = fs::remove_dir_all(&shots);
    fs::create_dir_all(&shots).unwrap();
    let stats_before: serde_json::Value =
        serde_json::from_str(&ok(&repo, &["stats", "--json"])).unwrap();

    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/s3_clients/dashboard.py"
        ))
        .env("ENDPOINT", &s.endpoint)
        .env("KEY_ID", &s.key_id)
        .env("SECRET", &s.secret)
        .env("RO_ID", field("aws_access_key_id"))
        .env("RO_SECRET", field("aws_secret_access_key"))
        .env("SHOTS", &shots)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = &seen["shown"];
    let num = |v: &serde_json::Value| v.as_str().unwrap().parse::<f64>().unwrap();
    for (page, stat) in [
        ("logical", "logical_bytes"),
        ("stored", "stored_bytes"),
        ("chunks", "chunks"),
        ("files", "fs_files"),
    ] {
        assert_eq!(
            num(&shown[page]),
            stats_before[stat].as_f64().unwrap(),
            "{page}: {seen} vs {stats_before}"
        );
    }
    assert!(num(&shown["dedup"]) > 1.5, "two copies of one file: {seen}");
    // The space held, by what holds it, and what can still be stored.
    for (page, held) in [
        ("space-live", "live_bytes"),
        ("space-versions", "versions_only_bytes"),
        ("space-other", "other_bytes"),
    ] {
        assert_eq!(
            num(&shown[page]),
            stats_before["held"][held].as_f64().unwrap(),
            "{page}: {seen} vs {stats_before}"
        );
    }
    assert!(num(&shown["space-live"]) >= (2 << 20) as f64, "{seen}");
    assert!(num(&shown["space-available"]) > 0.0, "{seen}");
    let scrub = seen["scrub"].as_str().unwrap();
    let containers = stats_before["containers"].as_u64().unwrap();
    assert!(
        scrub.starts_with(&format!("{containers} of {containers} containers healthy")),
        "{scrub}"
    );
    assert!(
        seen["check"].as_str().unwrap().starts_with("clean: "),
        "{seen}"
    );
    for shot in [
        "1-read-only.png",
        "2-scrub-started.png",
        "3-jobs-done.png",
        "4-results-and-a-refusal.png",
    ] {
        let png = fs::read(shots.join(shot)).unwrap();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{shot}");
        eprintln!("screenshot: {}", shots.join(shot).display());
    }
    let snaps = ok(&repo, &["snapshot", "list"]);
    assert!(snaps.contains("from-browser"), "{snaps}");
    let (repo, _) = s.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}

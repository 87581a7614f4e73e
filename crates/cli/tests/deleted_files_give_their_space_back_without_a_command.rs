//! Space comes back by itself: with no version holding them (versions off
//! here), the data of deleted and overwritten files is collected by the
//! mount's daemon once files gave up `gc.auto_after` bytes, without anyone
//! running `cairn gc`, and what stays reads back exact. With
//! `auto_after = 0` nothing is collected.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{edit_config, ok, plain_container_bytes, random, write_synced, Mount};

/// Writes 6 MiB, keeps 1 MiB, deletes the rest; the container bytes
/// before the delete.
fn write_and_delete(m: &Mount, repo: &Path) -> (u64, Vec<u8>) {
    let kept = random(1 << 20, 1);
    write_synced(&m.path("kept"), &kept).unwrap();
    for i in 0..5 {
        write_synced(&m.path(&format!("doomed-{i}")), &random(1 << 20, 10 + i)).unwrap();
    }
    // An fsync logs the writes; the committer stores them as chunks.
    let started = Instant::now();
    while plain_container_bytes(repo) < 6 << 20 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = plain_container_bytes(repo);
    assert!(before >= 6 << 20, "6 MiB written, {before} B stored");
    for i in 0..5 {
        fs::remove_file(m.path(&format!("doomed-{i}"))).unwrap();
    }
    (before, kept)
}

fn init(base: &Path, after: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let repo = base.join("repo");
    let dir = base.join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    edit_config(
        &repo,
        &[
            ("version_seconds = 30", "version_seconds = 0"),
            ("auto_after = \"8MiB\"", &format!("auto_after = {after}")),
            ("auto_check_seconds = 5", "auto_check_seconds = 1"),
        ],
    );
    (repo, dir)
}

#[test]
fn deleted_data_is_collected_by_the_daemon() {
    let base = tempfile::tempdir().unwrap();
    let (repo, dir) = init(base.path(), "\"2MiB\"");
    let m = Mount::start(repo.clone(), dir);
    let (before, kept) = write_and_delete(&m, &repo);
    // The daemon looks every second; give it a generous while.
    let started = Instant::now();
    let mut now = plain_container_bytes(&repo);
    while now + (4 << 20) > before && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(200));
        now = plain_container_bytes(&repo);
    }
    assert!(
        now + (4 << 20) <= before,
        "containers {before} -> {now}: 5 MiB deleted were not collected"
    );
    assert_eq!(fs::read(m.path("kept")).unwrap(), kept);
    let (repo, dir) = m.unmount();
    ok(&repo, &["check"]);
    let m = Mount::start(repo, dir);
    assert_eq!(fs::read(m.path("kept")).unwrap(), kept);
    m.unmount();
}

#[test]
fn auto_after_zero_leaves_collection_to_a_command() {
    let base = tempfile::tempdir().unwrap();
    let (repo, dir) = init(base.path(), "0");
    let m = Mount::start(repo.clone(), dir);
    let (before, _) = write_and_delete(&m, &repo);
    // What a daemon with collection on would have done by now (it looks
    // every second and collected above within moments): a command's
    // collection below frees the deleted data, so it was still there.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        plain_container_bytes(&repo) >= before,
        "collected without a command"
    );
    ok(&repo, &["gc"]);
    assert!(plain_container_bytes(&repo) + (4 << 20) <= before);
    m.unmount();
}

//! Every container's trailer cut short: `check --repair` recovers every
//! chunk from the region records instead of dropping them, the files read
//! back exactly, and after `gc` rewrote the damaged containers `check` is
//! clean.

mod common;

use std::fs;

use common::{cairn, ok, random, Mount};

#[test]
fn a_cut_trailer_loses_no_chunk() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let files: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            (
                format!("f{i}"),
                random(300_000 + i * 1000, 7 + 2 * i as u64),
            )
        })
        .collect();
    for (name, data) in &files {
        fs::write(m.path(name), data).unwrap();
    }
    let (repo, dir) = m.unmount();

    let damaged = common::plain_containers(&repo);
    assert!(!damaged.is_empty());
    for path in &damaged {
        let len = fs::metadata(path).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(len - 7)
            .unwrap();
    }

    let check = cairn(&repo, &["check"]);
    assert!(!check.status.success(), "check passed with cut trailers");
    let repair = cairn(&repo, &["check", "--repair"]);
    assert!(
        repair.status.success(),
        "{}{}",
        String::from_utf8_lossy(&repair.stdout),
        String::from_utf8_lossy(&repair.stderr)
    );

    let m = Mount::start(repo.clone(), dir);
    for (name, data) in &files {
        assert!(fs::read(m.path(name)).unwrap() == *data, "{name} differs");
    }
    let (repo, dir) = m.unmount();
    ok(&repo, &["gc"]);
    for path in &damaged {
        assert!(!path.exists(), "gc left a damaged container: {path:?}");
    }
    let text = ok(&repo, &["check"]);
    assert!(text.contains("no damage found"), "{text}");
    let m = Mount::start(repo, dir);
    for (name, data) in &files {
        assert!(fs::read(m.path(name)).unwrap() == *data, "{name} differs");
    }
    m.unmount();
}

//! `cairn version` when nothing changed since the newest version neither
//! walks the namespace (no listing stored again) nor writes anything to
//! the store; any change, a write to a file still open included, is
//! versioned at once.

mod common;

use std::fs;
use std::io::Write;

use common::{ok, Mount};
use serde_json::Value;

fn version(m: &Mount) -> Value {
    serde_json::from_str(&ok(&m.repo, &["version", "--json"])).unwrap()
}

fn containers(m: &Mount) -> u64 {
    let stats: Value = serde_json::from_str(&ok(&m.repo, &["stats", "--json"])).unwrap();
    stats["containers"].as_u64().unwrap()
}

#[test]
fn an_unchanged_namespace_is_not_walked_again() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    for d in 0..5 {
        fs::create_dir(m.path(&format!("d{d}"))).unwrap();
        for f in 0..20 {
            fs::write(m.path(&format!("d{d}/f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    let first = version(&m);
    assert_eq!(first["written"], true, "{first}");
    assert_eq!(first["dirs_written"], 6, "{first}");
    let held = containers(&m);

    for _ in 0..3 {
        let again = version(&m);
        assert_eq!(again["label"], first["label"], "{again}");
        assert_eq!(again["written"], false, "{again}");
        assert_eq!(again["dirs_written"], 0, "walked again: {again}");
        assert_eq!(again["new_bytes"], 0, "{again}");
        assert_eq!(again["files"], first["files"], "{again}");
        assert_eq!(again["dirs"], first["dirs"], "{again}");
    }
    assert_eq!(
        containers(&m),
        held,
        "an unchanged version stored something"
    );

    // A change is seen, a chmod as much as new bytes.
    fs::set_permissions(
        m.path("d3/f7"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let chmod = version(&m);
    assert_eq!(chmod["written"], true, "{chmod}");
    assert_ne!(chmod["label"], first["label"], "{chmod}");

    // Bytes written to a file still open are recorded and versioned.
    let mut open = fs::File::create(m.path("d0/open.log")).unwrap();
    open.write_all(b"still open").unwrap();
    let written = version(&m);
    assert_eq!(written["written"], true, "{written}");
    drop(open);
    let settled = version(&m);
    let last = version(&m);
    assert_eq!(last["written"], false, "{last}");
    assert_eq!(last["dirs_written"], 0, "{last}");
    assert_eq!(last["label"], settled["label"], "{last}");

    // What the last version holds is the file as written.
    let out = base.path().join("out");
    fs::create_dir(&out).unwrap();
    let label = last["label"].as_str().unwrap();
    ok(
        &m.repo,
        &[
            "restore",
            label,
            "/d0/open.log",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(fs::read(out.join("open.log")).unwrap(), b"still open");
}

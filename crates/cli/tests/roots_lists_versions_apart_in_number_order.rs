//! `cairn roots` keeps the versions the file system writes on its own
//! apart from the user's labels, in their own section after them, and
//! counts them as numbers: version/2 before version/10. `--json` carries
//! the same order, each root with its kind and when a tree was written.

mod common;

use std::fs;

use common::{ok, Mount};

#[test]
fn versions_come_after_the_users_labels_numbered_in_order() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    for i in 1..=11 {
        fs::write(m.path(&format!("f{i}")), format!("file {i}")).unwrap();
        let v = ok(&m.repo, &["version"]);
        assert!(v.starts_with(&format!("version/{i}:")), "{v}");
    }
    ok(&m.repo, &["snapshot", "create", "kept"]);
    let file = base.path().join("stream");
    fs::write(&file, b"a stored stream").unwrap();
    ok(
        &m.repo,
        &["put", file.to_str().unwrap(), "--name", "zz-mine"],
    );

    let text = ok(&m.repo, &["roots"]);
    let labels: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| !w.starts_with("versions"))
        .collect();
    let versions: Vec<String> = (1..=11).map(|i| format!("version/{i}")).collect();
    let mut expected = vec!["zz-mine", "snapshot/kept"];
    expected.extend(versions.iter().map(String::as_str));
    assert_eq!(labels, expected, "{text}");
    let header = text
        .lines()
        .position(|l| l.starts_with("versions written by the file system"))
        .unwrap_or_else(|| panic!("no versions section:\n{text}"));
    assert!(
        text.lines()
            .nth(header + 1)
            .unwrap()
            .starts_with("version/1 "),
        "{text}"
    );

    let json: serde_json::Value = serde_json::from_str(&ok(&m.repo, &["roots", "--json"])).unwrap();
    let roots = json.as_array().unwrap();
    let labels: Vec<&str> = roots.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, expected, "{json}");
    let kinds: Vec<&str> = roots.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..3], ["stream", "snapshot", "version"], "{json}");
    assert!(roots[0]["created"].is_null(), "{json}");
    assert!(
        roots[2]["created"].as_i64().unwrap() > 1_600_000_000,
        "{json}"
    );
}

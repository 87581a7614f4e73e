//! `cairn doctor` of a client repository with `[shared_index] kind =
//! "chunkd"` shows the index: the range table read from etcd (fsid, each
//! range's owner and epoch) and, asked with the repository's token file,
//! whether each owner answers. With both owners up its chunkd findings
//! are OK; with one killed (`kill -9`) that owner is a WARNING naming it,
//! why, and what to run, and the exit status is doctor's for a warning.

mod common;
mod two_clients_common;

use std::path::Path;
use std::process::Command;

use common::{ok, CAIRN};

/// Checks that look at this repository and its index (a dead mount of
/// another test elsewhere on the machine is not this test's business).
const OURS: [&str; 10] = [
    "repository",
    "permissions",
    "config",
    "key",
    "key_backup",
    "clock",
    "free_space",
    "shared_index",
    "chunkd_token",
    "chunkd_owner",
];

struct Doctor {
    code: i32,
    json: serde_json::Value,
    text: String,
}

fn doctor(repo: &Path) -> Doctor {
    let run = |json: bool| {
        let mut cmd = Command::new(CAIRN);
        // Free space is the machine's, not this test's.
        cmd.arg("--repo")
            .arg(repo)
            .args(["doctor", "--min-free", "0"]);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let (j, t) = (run(true), run(false));
    assert_eq!(j.status.code(), t.status.code());
    Doctor {
        code: j.status.code().unwrap(),
        json: serde_json::from_slice(&j.stdout).unwrap(),
        text: String::from_utf8(t.stdout).unwrap(),
    }
}

impl Doctor {
    fn findings(&self, check: &str) -> Vec<&serde_json::Value> {
        self.json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == check)
            .collect()
    }

    /// The one `chunkd_owner` finding about `url`.
    fn owner(&self, url: &str) -> &serde_json::Value {
        let found: Vec<_> = self
            .findings("chunkd_owner")
            .into_iter()
            .filter(|f| f["subject"] == url)
            .collect();
        assert_eq!(found.len(), 1, "{url}: {}", self.text);
        found[0]
    }

    /// The worst severity among this repository's findings.
    fn worst_of_ours(&self) -> &str {
        let rank = |s: &str| {
            ["ok", "info", "warning", "problem"]
                .iter()
                .position(|x| *x == s)
        };
        self.json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| OURS.contains(&f["check"].as_str().unwrap()))
            .map(|f| f["severity"].as_str().unwrap())
            .max_by_key(|s| rank(s))
            .unwrap()
    }

    /// The exit status doctor gives the worst finding of all.
    fn expected_code(&self) -> i32 {
        match self.json["status"].as_str().unwrap() {
            "ok" | "info" => 0,
            "warning" => 1,
            s => {
                assert_eq!(s, "problem");
                2
            }
        }
    }
}

#[test]
fn doctor_shows_the_chunkd_index_and_its_owners() {
    let c = two_clients_common::cluster_with(two_clients_common::shared_index_toml);
    let mut index = c.chunkd_index();
    let urls = [index.owners[0].url.clone(), index.owners[1].url.clone()];
    // Doctor cannot see a key backup made, only that `key export` ran.
    let backup = c.base.path().join("key.backup");
    ok(&c.b, &["key", "export", backup.to_str().unwrap()]);

    let d = doctor(&c.b);
    assert_eq!(d.code, d.expected_code(), "{}", d.text);
    assert!(["ok", "info"].contains(&d.worst_of_ours()), "{}", d.text);
    let table = &d.json["shared_index"];
    assert_eq!(table["fsid"], "fs1", "{}", d.json);
    assert_eq!(table["etcd"][0], c.etcd.as_str());
    let ranges = table["ranges"].as_array().unwrap();
    assert_eq!(ranges.len(), 2, "{}", d.json);
    for (r, (start, owner)) in ranges.iter().zip([
        ("0000000000000000", &urls[0]),
        ("8000000000000000", &urls[1]),
    ]) {
        assert_eq!(r["start"], start);
        assert_eq!(r["owner"], owner.as_str());
        assert_eq!(r["epoch"], 1);
    }
    assert_eq!(d.findings("chunkd_owner").len(), 2, "{}", d.text);
    for url in &urls {
        assert_eq!(d.owner(url)["severity"], "ok", "{}", d.text);
    }
    for said in [
        format!(
            "OK       chunkd_owner  {} answers, holds 0000000000000000@1",
            urls[0]
        ),
        format!(
            "OK       chunkd_owner  {} answers, holds 8000000000000000@1",
            urls[1]
        ),
        "chunkd index of file system fs1".to_string(),
        format!("0000000000000000 7fffffffffffffff {} epoch 1", urls[0]),
        format!("8000000000000000 ffffffffffffffff {} epoch 1", urls[1]),
    ] {
        assert!(d.text.contains(&said), "{said:?} not in:\n{}", d.text);
    }

    // One owner killed: named as not answering, a warning with its fix.
    index.owners[1].kill();
    let d = doctor(&c.b);
    assert_eq!(d.code, d.expected_code(), "{}", d.text);
    assert_eq!(d.worst_of_ours(), "warning", "{}", d.text);
    if d.json["status"] == "warning" {
        assert_eq!(d.code, 1, "{}", d.text);
    }
    assert_eq!(d.owner(&urls[0])["severity"], "ok", "{}", d.text);
    let down = d.owner(&urls[1]);
    assert_eq!(down["severity"], "warning", "{}", d.text);
    assert!(
        down["message"]
            .as_str()
            .unwrap()
            .contains("does not answer"),
        "{down}"
    );
    let fix = down["fix"].as_str().unwrap();
    assert!(
        fix.contains("cairn chunkd ranges assign") && fix.contains("8000000000000000"),
        "{fix}"
    );
    // The table is still shown: it is etcd's, not the owners'.
    assert_eq!(
        d.json["shared_index"]["ranges"][1]["owner"],
        urls[1].as_str()
    );
    for said in [
        format!("WARNING  chunkd_owner  {} does not answer", urls[1]),
        "summary: healthy, with warnings".to_string(),
    ] {
        if d.json["status"] == "warning" || !said.starts_with("summary") {
            assert!(d.text.contains(&said), "{said:?} not in:\n{}", d.text);
        }
    }
}

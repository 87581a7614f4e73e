//! A container holding a file's recipe is lost. While it is still indexed
//! (its branch could come back) `gc` cannot tell what the file uses from
//! garbage: it reclaims nothing and names the file. Once `check
//! --drop-lost` gave it up, `gc` goes on, naming the file and the version
//! that lost data; deleting them leaves a clean repository in which every
//! other file reads back exactly.

mod common;

use std::fs;

use common::{cairn, ok, random, Mount};

#[test]
fn gc_refuses_while_a_lost_recipe_is_indexed_and_goes_on_once_dropped() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    common::no_versions(&repo);
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = Mount::start(repo.clone(), mnt);
    let victim = random(6 << 20, 3);
    let other = random(1 << 20, 4);
    common::write_synced(&m.path("victim.bin"), &victim).unwrap();
    let victims = common::plain_containers(&m.repo).len();
    common::write_synced(&m.path("other.bin"), &other).unwrap();
    ok(&m.repo, &["version"]);
    let (repo, dir) = m.unmount();

    // The victim's last container holds the end of its data and its recipe.
    let last = common::plain_containers(&repo)[victims - 1].clone();
    fs::remove_file(&last).unwrap();

    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("LOST: file /victim.bin") && l.contains("recipe")),
        "the file whose recipe is lost is not named:\n{text}"
    );
    assert!(!text.contains("/other.bin"), "{text}");

    // Still indexed: nothing reclaimed, the file named.
    let gc = cairn(&repo, &["gc"]);
    let err = String::from_utf8_lossy(&gc.stderr);
    assert!(
        !gc.status.success(),
        "gc swept past an unknown recipe: {err} {}",
        String::from_utf8_lossy(&gc.stdout)
    );
    assert!(
        err.contains("nothing was reclaimed") && err.contains("/victim.bin"),
        "{err}"
    );
    assert!(err.contains("--drop-lost"), "{err}");

    // Given up: gc goes on and names what lost data.
    let out = cairn(&repo, &["check", "--drop-lost"]);
    assert!(!out.status.success());
    let gc = ok(&repo, &["gc", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&gc).unwrap();
    let files: Vec<&str> = report["damaged_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["/victim.bin"], "{report}");
    assert!(
        !report["damaged_roots"].as_array().unwrap().is_empty(),
        "the version holding the file is not named: {report}"
    );

    // Delete the file and the versions that lost it, as check says.
    let m = Mount::start(repo.clone(), dir);
    assert!(fs::read(m.path("other.bin")).unwrap() == other);
    fs::remove_file(m.path("victim.bin")).unwrap();
    let (repo, dir) = m.unmount();
    let out = cairn(&repo, &["check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lost = report["damaged_roots"].as_array().unwrap();
    assert!(!lost.is_empty(), "{report}");
    assert!(report["damaged_files"].as_array().unwrap().is_empty());
    for root in lost {
        ok(&repo, &["rm", root[0].as_str().unwrap()]);
    }
    let text = ok(&repo, &["check"]);
    assert!(text.contains("summary: clean"), "{text}");
    ok(&repo, &["gc"]);
    let m = Mount::start(repo, dir);
    assert!(fs::read(m.path("other.bin")).unwrap() == other);
    m.unmount();
}

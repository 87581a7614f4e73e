//! A flipped byte in a container stored under `single` (no redundancy):
//! `check` names the damaged chunk's file by path, `gc` finishes,
//! `check --drop-lost` rewrites the container without the corrupt chunk
//! (keeping the rest), and writing the file's data again heals it: `check`
//! is clean and every file reads back exactly.

mod common;

use std::fs;
use std::path::Path;

use common::{cairn, ok, random, Mount};

/// `cairn check ARGS`: whether it passed, and what it printed, which is
/// one summary line, last, with no cause said twice on a line.
fn check(repo: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    let out = cairn(repo, &all);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("summary:")).count(),
        1,
        "{text}"
    );
    assert!(lines.last().unwrap().starts_with("summary:"), "{text}");
    for line in &lines {
        let parts: Vec<&str> = line.split(": ").map(str::trim).collect();
        for (i, p) in parts.iter().enumerate() {
            assert!(!parts[i + 1..].contains(p), "a cause is repeated: {line:?}");
        }
    }
    (out.status.success(), text)
}

#[test]
fn a_corrupt_chunk_is_named_dropped_and_healed_by_writing_again() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let victim = random(6 << 20, 7);
    let other = random(1 << 20, 8);
    fs::create_dir(m.path("a")).unwrap();
    fs::create_dir(m.path("b")).unwrap();
    common::write_synced(&m.path("a/victim.bin"), &victim).unwrap();
    common::write_synced(&m.path("b/other.bin"), &other).unwrap();
    let (repo, dir) = m.unmount();

    // The victim's first container holds its data only; a byte in the
    // middle of it flips.
    let first = common::plain_containers(&repo)[0].clone();
    let mut bytes = fs::read(&first).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    fs::write(&first, &bytes).unwrap();

    let (clean, text) = check(&repo, &[]);
    assert!(!clean, "check passed over a flipped byte:\n{text}");
    assert!(text.contains("is corrupt"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("LOST: file /a/victim.bin") && l.contains("corrupt")),
        "the damaged file is not named:\n{text}"
    );
    assert!(!text.contains("/b/other.bin"), "{text}");

    ok(&repo, &["gc"]);

    let (clean, text) = check(&repo, &["--drop-lost"]);
    assert!(!clean, "{text}");
    let id = first.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        text.contains(&format!("dropped damaged container {id}")),
        "{text}"
    );
    assert!(!text.contains("still DAMAGE"), "{text}");
    assert!(text.contains("LOST: file /a/victim.bin"), "{text}");
    assert!(!first.exists(), "the damaged container is still there");

    // The sound chunks were kept: the other file reads back; the victim is
    // an error until its data is written again, which stores the lost
    // chunk anew.
    let m = Mount::start(repo.clone(), dir);
    assert!(fs::read(m.path("b/other.bin")).unwrap() == other);
    let e = fs::read(m.path("a/victim.bin")).expect_err("a corrupt file read back");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    common::write_synced(&m.path("a/victim.bin"), &victim).unwrap();
    assert!(fs::read(m.path("a/victim.bin")).unwrap() == victim);
    let (repo, dir) = m.unmount();

    let (clean, text) = check(&repo, &[]);
    assert!(clean, "{text}");
    assert!(text.contains("summary: clean"), "{text}");
    let m = Mount::start(repo, dir);
    assert!(fs::read(m.path("a/victim.bin")).unwrap() == victim);
    assert!(fs::read(m.path("b/other.bin")).unwrap() == other);
    m.unmount();
}

//! A file whose chunks are gone from the store (a container deleted behind
//! cairn's back): `check` names it by path and fails, `gc` names it and
//! reclaims nothing instead of stopping at an anonymous chunk id, a read
//! gets EIO that the log names, and files that do not use the lost chunks
//! read back.

mod common;

use std::fs;

use common::{cairn, Mount};

#[test]
fn check_and_gc_name_the_file_behind_a_missing_chunk() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::create_dir(m.path("dir")).unwrap();
    fs::write(m.path("dir/big"), &big).unwrap();
    fs::write(m.path("small"), b"kept inline").unwrap();
    let (repo, dir) = m.unmount();

    // Every container goes: the big file's chunks with them.
    let containers = repo.join("branches/local/containers");
    let mut removed = 0;
    for sub in fs::read_dir(&containers).unwrap() {
        for f in fs::read_dir(sub.unwrap().path()).unwrap() {
            fs::remove_file(f.unwrap().path()).unwrap();
            removed += 1;
        }
    }
    assert!(removed > 0);

    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "check passed with containers gone:\n{text}"
    );
    assert!(
        text.contains("file /dir/big"),
        "check does not name the file:\n{text}"
    );
    assert!(!text.contains("file /small"), "{text}");

    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("small")).unwrap(), b"kept inline");
    // A read of the damaged file is EIO, and the daemon's log says which
    // file and why.
    let e = fs::read(m.path("dir/big")).expect_err("a file without its chunks read back");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let log = fs::read_to_string(repo.join("log/cairn.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("I/O error returned to the caller") && l.contains("/dir/big")),
        "the log does not name the EIO:\n{log}"
    );
    let gc = cairn(&repo, &["gc"]);
    let err = String::from_utf8_lossy(&gc.stderr);
    assert!(!gc.status.success(), "gc went on past a damaged file");
    assert!(err.contains("/dir/big"), "gc does not name the file: {err}");
    assert!(err.contains("nothing was reclaimed"), "{err}");
    // The mounted check (through the daemon) names it as well.
    let out = cairn(&repo, &["check", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = json["damaged_files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{json}");
    assert_eq!(files[0]["path"], "/dir/big");
    assert!(m.path("small").exists());
    m.unmount();
}

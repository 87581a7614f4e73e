//! A flipped bit in the metadata is an error, never file content: a small
//! file keeps its bytes in its inode record (and the path index keeps a
//! copy), so one bit flipped inside them in `meta/fs.redb` must make a read
//! fail with EIO, logged, and `cairn check` must name the damage, instead
//! of `cat` printing the wrong byte. Other files read on.

mod common;

use std::fs;
use std::process::Command;

use common::{cairn, ok, random, Mount};

#[test]
fn a_flipped_bit_in_an_inline_file_is_eio_and_check_names_it() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let data = random(5_000, 35);
    fs::write(m.path("small.bin"), &data).unwrap();
    fs::write(m.path("other.txt"), b"untouched").unwrap();
    let (repo, dir) = m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("no damage found"), "{check}");

    // One bit of the file's bytes, wherever the database holds them.
    let db = repo.join("meta/fs.redb");
    let mut bytes = fs::read(&db).unwrap();
    let needle = &data[2400..2440];
    let at: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the file's bytes are not in fs.redb");
    for i in &at {
        bytes[i + 20] ^= 0x10;
    }
    fs::write(&db, &bytes).unwrap();

    let m = Mount::start(repo.clone(), dir);
    let cat = Command::new("cat")
        .arg(m.path("small.bin"))
        .output()
        .unwrap();
    assert!(
        !cat.status.success(),
        "cat of a damaged inline file exited 0 ({} bytes)",
        cat.stdout.len()
    );
    assert!(
        String::from_utf8_lossy(&cat.stderr).contains("Input/output error"),
        "{}",
        String::from_utf8_lossy(&cat.stderr)
    );
    assert_eq!(fs::read(m.path("other.txt")).unwrap(), b"untouched");
    let log = fs::read_to_string(repo.join("log/cairn.log")).unwrap();
    assert!(
        log.contains("small.bin") || log.contains("fails its checksum"),
        "the log names no damage:\n{log}"
    );
    assert!(log.contains("fails its checksum"), "{log}");
    // redb's own page checksums may refuse the database from here on
    // (the unmount then says so): either way it is damage, named.
    let _ = m.kill();
    let check = cairn(&repo, &["check"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(!check.status.success(), "check exited 0: {said}");
    assert!(
        said.contains("fails its checksum") || said.contains("damaged"),
        "{said}"
    );
}

//! A repository that was only ever mounted briefly (never for the 30 s the
//! version timer waits) still has a version: unmount writes one, so losing
//! the metadata engine afterwards loses nothing.

mod common;

use std::fs;

use common::{ok, Mount};

#[test]
fn unmount_writes_a_version_that_recover_rebuilds_from() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/small"), b"inline bytes").unwrap();
    let big: Vec<u8> = (0..400_000u32)
        .map(|i| (i.wrapping_mul(40503) >> 7) as u8)
        .collect();
    fs::write(m.path("d/big"), &big).unwrap();
    let (repo, dir) = m.unmount();
    let roots = ok(&repo, &["roots"]);
    assert!(
        roots.contains("version/1"),
        "no version after unmount:\n{roots}"
    );

    // An unchanged tree adds no version at the next unmount.
    let m = Mount::start(repo.clone(), dir);
    let (repo, dir) = m.unmount();
    let roots = ok(&repo, &["roots"]);
    assert!(!roots.contains("version/2"), "{roots}");

    fs::remove_file(repo.join("meta/fs.redb")).unwrap();
    ok(&repo, &["recover"]);
    let m = Mount::start(repo, dir);
    assert_eq!(fs::read(m.path("d/small")).unwrap(), b"inline bytes");
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    m.unmount();
}

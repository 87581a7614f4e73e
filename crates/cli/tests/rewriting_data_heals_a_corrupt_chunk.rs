//! A flipped byte in a container: the file reads EIO; copying the original
//! back in under a new name stores a good copy instead of deduplicating
//! against the corrupt one, so both names read exactly (the old one heals,
//! in the running mount); `gc` then reclaims the corrupt copy and `check`
//! is clean.

mod common;

use std::fs;

use common::{ok, random, Mount};

#[test]
fn copying_the_original_back_heals_both_names() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let data = random(600_000, 11);
    let other = random(200_000, 13);
    fs::write(m.path("a"), &data).unwrap();
    fs::write(m.path("other"), &other).unwrap();
    let (repo, dir) = m.unmount();

    // The biggest container holds `a`'s data (random bytes are stored raw,
    // so its middle is chunk payload).
    let path = common::plain_containers(&repo)
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    fs::write(&path, &bytes).unwrap();

    let m = Mount::start(repo, dir);
    let e = fs::read(m.path("a")).expect_err("a corrupt chunk was served");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    fs::write(m.path("b"), &data).unwrap();
    assert!(
        fs::read(m.path("b")).unwrap() == data,
        "the new copy differs"
    );
    assert!(
        fs::read(m.path("a")).unwrap() == data,
        "the old name did not heal"
    );
    let (repo, dir) = m.unmount();

    ok(&repo, &["gc"]);
    assert!(
        !path.exists(),
        "gc kept the container with the corrupt copy"
    );
    let text = ok(&repo, &["check"]);
    assert!(text.contains("no damage found"), "{text}");
    let m = Mount::start(repo, dir);
    assert!(fs::read(m.path("a")).unwrap() == data);
    assert!(fs::read(m.path("b")).unwrap() == data);
    assert!(fs::read(m.path("other")).unwrap() == other);
    m.unmount();
}

//! A file chunked in fixed 64 KiB blocks (its `user.cairn.chunking` xattr,
//! inherited from its directory): aligned overwrites through the mount
//! store exactly the blocks they cover, counted in `stats --json`, and the
//! file reads back byte-exact after a remount; `check` stays clean.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{ok, random, write_synced, xattrs, Mount};

const BLOCK: u64 = 64 << 10;

fn stats(repo: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap()
}

fn count(s: &serde_json::Value, key: &str) -> u64 {
    s[key].as_u64().unwrap_or_else(|| panic!("no {key} in {s}"))
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and a buffer of the length given.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn aligned_overwrites_of_a_fixed_chunk_file_restore_only_those_blocks() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    // No versions: only the file's own chunks and recipe change.
    common::no_versions(&repo);

    let m = Mount::start(repo.clone(), dir);
    fs::create_dir(m.path("vm")).unwrap();
    let e = set_xattr(&m.path("vm"), "user.cairn.chunking", b"fixed:3K").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EINVAL),
        "a bad block size is refused"
    );
    set_xattr(&m.path("vm"), "user.cairn.chunking", b"fixed:64K").unwrap();
    let path = m.path("vm/disk");
    let mut model = random(64 * BLOCK as usize, 1);
    // Synced, so that none of the first content is still being stored
    // when the count starts (under load it once was: 11 "new" chunks).
    write_synced(&path, &model).unwrap();
    assert_eq!(
        xattrs(&path)
            .get(&b"user.cairn.chunking"[..])
            .map(Vec::as_slice),
        Some(&b"fixed:64K"[..]),
        "inherited from the directory"
    );
    let before = stats(&repo);

    // Five single blocks and one run of three, each new content.
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let writes = [(3u64, 1u64), (10, 1), (11, 1), (40, 3), (63, 1)];
    for (i, &(at, n)) in writes.iter().enumerate() {
        let data = random((n * BLOCK) as usize, 1000 + 2 * i as u64);
        f.write_all_at(&data, at * BLOCK).unwrap();
        let from = (at * BLOCK) as usize;
        model[from..from + data.len()].copy_from_slice(&data);
    }
    f.sync_all().unwrap();
    drop(f);
    let after = stats(&repo);

    let blocks = 7;
    let new_chunks = count(&after, "chunks") - count(&before, "chunks");
    let new_bytes = count(&after, "unique_bytes") - count(&before, "unique_bytes");
    // The recipe's nodes are re-stored too: a few small chunks, well under
    // one block in all for 64 extents.
    assert!(
        (blocks..blocks + 4).contains(&new_chunks),
        "{new_chunks} chunks stored for {blocks} blocks overwritten"
    );
    assert!(
        (blocks * BLOCK..(blocks + 1) * BLOCK).contains(&new_bytes),
        "{new_bytes} bytes stored for {blocks} blocks of {BLOCK}"
    );
    assert_eq!(fs::read(&path).unwrap(), model);

    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    assert!(
        fs::read(m.path("vm/disk")).unwrap() == model,
        "differs after a remount"
    );
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}

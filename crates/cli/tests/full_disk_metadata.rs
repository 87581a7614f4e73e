//! A disk filled by something else than cairn, under its metadata engine:
//! operations that grow the namespace get ENOSPC (never EIO, never a wedged
//! engine), `rm` and truncate still work, and once space is back writes go
//! on without a remount; everything fsynced survives.

mod common;

use std::fs;
use std::io::Write;

use common::{is_enospc, mount_on_tmpfs, ok, random, write_synced, Mount};

#[test]
fn metadata_on_a_disk_filled_from_outside() {
    let base = tempfile::tempdir().unwrap();
    let (_disk, m) = mount_on_tmpfs(base.path(), 64);
    for i in 0..20 {
        write_synced(&m.path(&format!("f{i}")), &random(3000, i)).unwrap();
    }
    let big = random(200_000, 99);
    write_synced(&m.path("big"), &big).unwrap();

    // Something else fills the disk to the last byte.
    let filler = base.path().join("disk/filler");
    let mut f = fs::File::create(&filler).unwrap();
    let block = vec![0u8; 1 << 20];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..4096]).is_ok() {}
    drop(f);

    let mut refused = 0;
    for i in 0..200 {
        match write_synced(&m.path(&format!("g{i}")), &random(3000, 1000 + i)) {
            Ok(()) => {}
            Err(e) if is_enospc(&e) => refused += 1,
            Err(e) => panic!("creating g{i} on a full disk: {e} (want ENOSPC)"),
        }
    }
    assert!(refused > 0, "no create was refused on a full disk");
    let e = fs::create_dir(m.path("newdir")).expect_err("mkdir on a full disk");
    assert!(is_enospc(&e), "mkdir: {e}");
    // Space can be freed from inside: rm and truncate work.
    fs::remove_file(m.path("f0")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.path("f1"))
        .unwrap();

    // Space returns: the engine writes again, no remount needed.
    fs::remove_file(&filler).unwrap();
    let after = random(50_000, 7);
    write_synced(&m.path("after"), &after).unwrap();
    fs::create_dir(m.path("newdir")).unwrap();
    let (repo, dir) = m.unmount();

    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("after")).unwrap(), after);
    assert_eq!(fs::read(m.path("big")).unwrap(), big);
    for i in 2..20 {
        assert_eq!(fs::read(m.path(&format!("f{i}"))).unwrap(), random(3000, i));
    }
    assert!(m.path("newdir").is_dir());
    assert!(!m.path("f0").exists());
    m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("no damage found"), "{check}");
}

//! A disk that fills up under a mounted file system: writers get ENOSPC
//! (never EIO), `df` shows the disk's real size, deleting and `gc` give the
//! space back without a remount, and everything fsynced survives.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{is_enospc, mount_on_tmpfs, ok, random, write_synced, Mount};

fn statvfs(path: &Path) -> (u64, u64) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    (
        st.f_blocks * st.f_frsize as u64,
        st.f_bavail * st.f_frsize as u64,
    )
}

#[test]
fn fill_enospc_delete_gc_write_again_remount() {
    let base = tempfile::tempdir().unwrap();
    let (_disk, m) = mount_on_tmpfs(base.path(), 64);
    let (repo, mnt) = (m.repo.clone(), m.dir.clone());

    // df shows the disk, not petabytes.
    let (total, avail) = statvfs(&mnt);
    assert!(total <= 64 << 20, "df total {total}");
    assert!(avail > 32 << 20 && avail < 64 << 20, "df avail {avail}");

    let keep = random(100_000, 1);
    write_synced(&m.path("keep"), &keep).unwrap();

    // 80 MB into a 64 MiB disk: ENOSPC at write, close or fsync.
    let big = random(80_000_000, 2);
    let err = write_synced(&m.path("big"), &big).expect_err("80 MB fit in 64 MiB");
    assert!(is_enospc(&err), "expected ENOSPC, got {err}");
    // A tool that never fsyncs hears it too (at close).
    fs::write(base.path().join("src"), random(30_000_000, 3)).unwrap();
    let cp = Command::new("cp")
        .arg(base.path().join("src"))
        .arg(m.path("big2"))
        .output()
        .unwrap();
    assert!(!cp.status.success(), "cp into a full disk exited 0");
    assert!(
        String::from_utf8_lossy(&cp.stderr).contains("No space left"),
        "{}",
        String::from_utf8_lossy(&cp.stderr)
    );
    let (_, avail) = statvfs(&mnt);
    assert!(
        avail < 4 << 20,
        "df still shows {avail} free on a full disk"
    );

    // The namespace still works: the files that did not fit are removed.
    fs::remove_file(m.path("big")).unwrap();
    fs::remove_file(m.path("big2")).unwrap();
    fs::create_dir(m.path("dir")).unwrap();
    ok(&repo, &["gc"]);

    // Writes resume once the space is back, without a remount: the data
    // that waited in memory is stored first, then new data.
    let again = random(5_000_000, 4);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match write_synced(&m.path("again"), &again) {
            Ok(()) => break,
            Err(e) if is_enospc(&e) && Instant::now() < deadline => {
                // The waiting containers are stored; collect what they freed.
                ok(&repo, &["gc"]);
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("writing after gc freed space: {e}"),
        }
    }
    let (repo, dir) = m.unmount();
    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("keep")).unwrap(), keep);
    assert_eq!(fs::read(m.path("again")).unwrap(), again);
    assert!(m.path("dir").is_dir());
    assert!(!m.path("big").exists());
    m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("no damage found"), "{check}");
    let log = fs::read_to_string(repo.join("log/cairn.log")).unwrap();
    assert!(log.contains("ENOSPC"), "the log names no ENOSPC:\n{log}");
}

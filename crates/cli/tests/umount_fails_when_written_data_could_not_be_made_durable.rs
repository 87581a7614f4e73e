//! `cairn umount` exits non-zero, naming what went wrong and the files
//! whose newer writes were lost, when the daemon could not make everything
//! written durable at unmount (here: data written to a full disk and never
//! stored), and zero after a clean one.

mod common;

use std::fs;
use std::io::Write;
use std::process::Command;

use common::{random, Mount, CAIRN};

#[test]
fn umount_says_when_written_data_was_not_stored() {
    let base = tempfile::tempdir().unwrap();
    let (_disk, repo, mnt) = common::repo_on_tmpfs(base.path(), 48);

    // A clean unmount first: the outcome recorded is "ok".
    let m = Mount::start(repo.clone(), mnt.clone());
    fs::write(m.path("small"), b"kept").unwrap();
    let (repo, mnt) = m.unmount();
    assert_eq!(repo::last_unmount(&repo), repo::Unmounted::Clean);

    // Then more than the disk holds, without fsync: the writes are taken,
    // and the close or a later write says ENOSPC.
    let mut m = Mount::start(repo.clone(), mnt.clone());
    let mut full = false;
    for i in 0..40 {
        let written = fs::File::create(m.path(&format!("f{i}")))
            .and_then(|mut f| f.write_all(&random(2 << 20, i)));
        if let Err(e) = written {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            full = true;
            break;
        }
    }
    assert!(full, "48 MiB took 80 MiB of random data");
    let out = Command::new(CAIRN)
        .args(["umount", mnt.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "umount exited 0: {err}");
    assert!(
        err.contains("could not make everything written durable"),
        "{err}"
    );
    // It names the files whose newer writes were lost.
    assert!(
        err.contains("keep their last durable content") && err.contains("/f"),
        "{err}"
    );
    assert!(matches!(
        repo::last_unmount(&repo),
        repo::Unmounted::Failed(_)
    ));
    let status = m.take_child().wait().unwrap();
    assert!(
        !status.success(),
        "the daemon exited 0 after failing to store data"
    );
}

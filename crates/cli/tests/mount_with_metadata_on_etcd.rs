//! `cairn mount --meta etcd://HOST:PORT/FSID`: the namespace in a real
//! etcd, the data in the repository. Files written through the mount read
//! back byte-exact after a remount; the repository records where its
//! metadata is, so commands that would read the (empty) local namespace
//! while it is unmounted are refused, and `cairn check` through the mount
//! is clean.

mod common;

use std::fs;

use common::{cairn, ok, random, Mount};

#[test]
fn a_mount_keeps_its_namespace_in_etcd_and_its_data_in_the_repository() {
    let etcd = common::etcd::Etcd::start();
    let url = etcd.url("home");
    let base = tempfile::tempdir().unwrap();
    let (repo, dir) = (base.path().join("repo"), base.path().join("mnt"));
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);

    let m = Mount::start_cmd(repo.clone(), dir.clone(), &["mount", "--meta", &url]);
    let big = random(600_000, 18);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/small"), b"inline bytes").unwrap();
    fs::write(m.path("d/big"), &big).unwrap();
    std::os::unix::fs::symlink("small", m.path("d/link")).unwrap();
    fs::rename(m.path("d/small"), m.path("d/renamed")).unwrap();
    fs::create_dir(m.path("e")).unwrap();
    fs::remove_dir(m.path("e")).unwrap();
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    // Written data is stored when it is synced (or at unmount): check
    // through the mount after that.
    fs::File::open(m.path("d/big")).unwrap().sync_all().unwrap();
    ok(&repo, &["check"]);
    let (repo, dir) = m.unmount();

    assert_eq!(
        fs::read_to_string(repo.join("meta/remote")).unwrap().trim(),
        url
    );
    // Unmounted, the local namespace is not the file system: a gc that
    // read it would collect every chunk of d/big.
    for args in [&["gc"][..], &["mount", dir.to_str().unwrap()]] {
        let out = cairn(&repo, args);
        assert!(!out.status.success(), "cairn {args:?} must be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--meta"), "{args:?}: {err}");
    }

    let m = Mount::start_cmd(repo.clone(), dir, &["mount", "--meta", &url]);
    let mut names: Vec<_> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "link", "renamed"]);
    assert_eq!(fs::read(m.path("d/renamed")).unwrap(), b"inline bytes");
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    assert_eq!(
        fs::read_link(m.path("d/link")).unwrap().to_str(),
        Some("small")
    );
    assert!(!m.path("e").exists());
    ok(&repo, &["check"]);
    m.unmount();
}

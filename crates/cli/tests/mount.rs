//! The file system through a real FUSE mount started by `cairn mount`.
//!
//! These tests need /dev/fuse and fusermount3 (Debian package fuse3, which
//! `.ci/run` installs). Where they are missing the tests fail and say what to
//! install: a file system test that silently skips proves nothing.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

mod common;
use common::{cached_pages, with_shared_map, Mount, CAIRN};

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("the call should have failed")
        .raw_os_error()
        .unwrap()
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    // SAFETY: valid NUL-terminated paths; AT_FDCWD.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cstr(from).as_ptr(),
            libc::AT_FDCWD,
            cstr(to).as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn posix_operations_and_their_errors() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());

    // Files: create, write, read, append, errors.
    fs::write(m.path("a.txt"), b"hello").unwrap();
    assert_eq!(fs::read(m.path("a.txt")).unwrap(), b"hello");
    OpenOptions::new()
        .append(true)
        .open(m.path("a.txt"))
        .unwrap()
        .write_all(b" world")
        .unwrap();
    assert_eq!(fs::read_to_string(m.path("a.txt")).unwrap(), "hello world");
    assert_eq!(errno(fs::read(m.path("missing"))), libc::ENOENT);
    assert_eq!(
        errno(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.path("a.txt"))
        ),
        libc::EEXIST
    );
    let long = "x".repeat(256);
    assert_eq!(errno(fs::write(m.path(&long), b"")), libc::ENAMETOOLONG);
    fs::write(m.path(&"y".repeat(255)), b"ok").unwrap();

    // Directories.
    fs::create_dir(m.path("d")).unwrap();
    assert_eq!(errno(fs::create_dir(m.path("d"))), libc::EEXIST);
    fs::write(m.path("d/f"), b"x").unwrap();
    assert_eq!(errno(fs::remove_dir(m.path("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_file(m.path("d"))), libc::EISDIR);
    assert_eq!(errno(fs::create_dir(m.path("a.txt/sub"))), libc::ENOTDIR);
    assert_eq!(errno(fs::remove_dir(m.path("a.txt"))), libc::ENOTDIR);
    let root_links = fs::metadata(&m.dir).unwrap().nlink();
    fs::create_dir(m.path("d/e")).unwrap();
    assert_eq!(fs::metadata(m.path("d")).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(&m.dir).unwrap().nlink(), root_links);
    let mut names: Vec<String> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["e", "f"]);

    // Rename, with RENAME_NOREPLACE and RENAME_EXCHANGE.
    fs::write(m.path("r1"), b"one").unwrap();
    fs::write(m.path("r2"), b"two").unwrap();
    assert_eq!(
        errno(renameat2(
            &m.path("r1"),
            &m.path("r2"),
            libc::RENAME_NOREPLACE
        )),
        libc::EEXIST
    );
    renameat2(&m.path("r1"), &m.path("r2"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(m.path("r1")).unwrap(), b"two");
    assert_eq!(fs::read(m.path("r2")).unwrap(), b"one");
    fs::rename(m.path("r1"), m.path("d/moved")).unwrap();
    assert_eq!(fs::read(m.path("d/moved")).unwrap(), b"two");
    assert_eq!(
        errno(fs::rename(m.path("d"), m.path("d/e/inside"))),
        libc::EINVAL
    );

    // Hard links share one inode; symlinks.
    fs::hard_link(m.path("r2"), m.path("r2-link")).unwrap();
    let (a, b) = (
        fs::metadata(m.path("r2")).unwrap(),
        fs::metadata(m.path("r2-link")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    fs::remove_file(m.path("r2")).unwrap();
    assert_eq!(fs::metadata(m.path("r2-link")).unwrap().nlink(), 1);
    std::os::unix::fs::symlink("a.txt", m.path("sym")).unwrap();
    assert_eq!(fs::read_link(m.path("sym")).unwrap(), Path::new("a.txt"));
    assert_eq!(fs::read_to_string(m.path("sym")).unwrap(), "hello world");

    // Truncate shrinks and grows; holes read as zeros.
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("a.txt"))
        .unwrap();
    f.set_len(3).unwrap();
    f.set_len(10).unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("a.txt")).unwrap(), b"hel\0\0\0\0\0\0\0");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("sparse"))
        .unwrap();
    f.seek(SeekFrom::Start(5 << 20)).unwrap();
    f.write_all(b"end").unwrap();
    drop(f);
    let sparse = fs::read(m.path("sparse")).unwrap();
    assert_eq!(sparse.len(), (5 << 20) + 3);
    assert!(sparse[..5 << 20].iter().all(|&x| x == 0) && &sparse[5 << 20..] == b"end");

    // Attributes: mode, times with UTIME_OMIT and UTIME_NOW, setgid cleared by chown.
    fs::set_permissions(m.path("r2-link"), fs::Permissions::from_mode(0o2755)).unwrap();
    assert_eq!(
        fs::metadata(m.path("r2-link")).unwrap().mode() & 0o7777,
        0o2755
    );
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    let before = fs::metadata(m.path("r2-link")).unwrap();
    // SAFETY: valid path and two timespecs.
    assert_eq!(
        unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                cstr(&m.path("r2-link")).as_ptr(),
                times.as_ptr(),
                0,
            )
        },
        0
    );
    let after = fs::metadata(m.path("r2-link")).unwrap();
    assert_eq!(after.atime(), 1_000_000);
    assert_eq!(after.mtime(), before.mtime(), "UTIME_OMIT keeps mtime");
    std::os::unix::fs::chown(m.path("r2-link"), Some(1234), Some(1234)).unwrap();
    let owned = fs::metadata(m.path("r2-link")).unwrap();
    assert_eq!((owned.uid(), owned.gid()), (1234, 1234));
    assert_eq!(owned.mode() & 0o6000, 0, "chown clears set-id bits");

    // Extended attributes.
    let set = |name: &str, value: &[u8], flags: i32| -> i32 {
        let n = CString::new(name).unwrap();
        // SAFETY: valid path, name and buffer.
        unsafe {
            libc::setxattr(
                cstr(&m.path("a.txt")).as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        }
    };
    assert_eq!(set("user.color", b"blue", 0), 0);
    assert_eq!(set("user.color", b"red", libc::XATTR_CREATE), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EEXIST)
    );
    let mut buf = [0u8; 64];
    let n = CString::new("user.color").unwrap();
    // SAFETY: valid path, name and buffer.
    let len = unsafe {
        libc::getxattr(
            cstr(&m.path("a.txt")).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(&buf[..len as usize], b"blue");
    // SAFETY: as above.
    let len = unsafe {
        libc::listxattr(
            cstr(&m.path("a.txt")).as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(&buf[..len as usize], b"user.color\0");
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::removexattr(cstr(&m.path("a.txt")).as_ptr(), n.as_ptr()) },
        0
    );
    // SAFETY: as above.
    let gone = unsafe {
        libc::getxattr(
            cstr(&m.path("a.txt")).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(gone, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENODATA)
    );

    // statfs names the 255-byte limit.
    // SAFETY: valid path and out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(cstr(&m.dir).as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_namemax, 255);

    // Everything survives a remount, with the same inode numbers.
    let ino = fs::metadata(m.path("d/moved")).unwrap().ino();
    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    assert_eq!(fs::metadata(m.path("d/moved")).unwrap().ino(), ino);
    assert_eq!(fs::read(m.path("d/moved")).unwrap(), b"two");
    assert_eq!(fs::read(m.path("a.txt")).unwrap(), b"hel\0\0\0\0\0\0\0");
    m.unmount();
}

/// Applies the same random operations to the mount and to a plain
/// directory and compares the trees after every step.
#[test]
fn random_operations_match_a_plain_directory() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let plain = base.path().join("plain");
    fs::create_dir(&plain).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let names = ["a", "b", "c", "d"];
    for step in 0..300 {
        let name = names[rng.gen_range(0..names.len())];
        let other = names[rng.gen_range(0..names.len())];
        let op = rng.gen_range(0..6);
        let on = |root: &Path| -> std::io::Result<()> {
            match op {
                0 | 1 => {
                    let mut f = OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(root.join(name))?;
                    let mut r = StdRng::seed_from_u64(step);
                    let off = r.gen_range(0..300_000u64);
                    let mut data = vec![0u8; r.gen_range(1..100_000)];
                    r.fill_bytes(&mut data);
                    f.seek(SeekFrom::Start(off))?;
                    f.write_all(&data)
                }
                2 => {
                    let len = StdRng::seed_from_u64(step).gen_range(0..400_000u64);
                    OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(root.join(name))?
                        .set_len(len)
                }
                3 => fs::rename(root.join(name), root.join(other)),
                4 => fs::hard_link(root.join(name), root.join(format!("{other}-link"))),
                _ => fs::remove_file(root.join(name)),
            }
        };
        let a = on(&m.dir).map_err(|e| e.raw_os_error());
        let b = on(&plain).map_err(|e| e.raw_os_error());
        assert_eq!(a, b, "step {step}: op {op} on {name}/{other}");
        compare_trees(&m.dir, &plain);
    }
    m.unmount();
}

fn compare_trees(a: &Path, b: &Path) {
    let list = |p: &Path| {
        let mut v: Vec<String> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(a), list(b));
    for name in list(a) {
        let (x, y) = (
            fs::read(a.join(&name)).unwrap(),
            fs::read(b.join(&name)).unwrap(),
        );
        assert!(x == y, "{name} differs ({} vs {} bytes)", x.len(), y.len());
        assert_eq!(
            fs::metadata(a.join(&name)).unwrap().nlink(),
            fs::metadata(b.join(&name)).unwrap().nlink()
        );
    }
}

/// A deterministic byte stream for big files.
fn pattern(seed: u64, len: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut left = len;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let n = left.min(1 << 20);
        left -= n;
        let mut buf = vec![0u8; n];
        rng.fill_bytes(&mut buf);
        Some(buf)
    })
}

#[test]
fn a_one_gib_file_reads_back_bit_exact() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut f = File::create(m.path("big")).unwrap();
    for block in pattern(11, 1 << 30) {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let mut f = File::open(m.path("big")).unwrap();
    let mut got = vec![0u8; 1 << 20];
    for (i, want) in pattern(11, 1 << 30).enumerate() {
        f.read_exact(&mut got).unwrap();
        assert!(got == want, "MiB {i} differs");
    }
    assert_eq!(f.read(&mut got).unwrap(), 0);
    drop(f);
    m.unmount();
}

#[test]
fn concurrent_writers() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    fs::create_dir(m.path("shared")).unwrap();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let dir = m.path("shared");
            std::thread::spawn(move || {
                for i in 0..20u64 {
                    let data: Vec<u8> = pattern(t * 100 + i, 100_000 + (i as usize) * 1000)
                        .flatten()
                        .collect();
                    fs::write(dir.join(format!("{t}-{i}")), &data).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..8u64 {
        for i in 0..20u64 {
            let want: Vec<u8> = pattern(t * 100 + i, 100_000 + (i as usize) * 1000)
                .flatten()
                .collect();
            assert!(fs::read(m.path(&format!("shared/{t}-{i}"))).unwrap() == want);
        }
    }
    assert_eq!(fs::read_dir(m.path("shared")).unwrap().count(), 160);
    m.unmount();
}

#[test]
fn fsynced_data_survives_kill_dash_nine() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut expected = Vec::new();
    for i in 0..5u64 {
        let data: Vec<u8> = pattern(i, 3_000_000 + i as usize * 77_777)
            .flatten()
            .collect();
        let path = m.path(&format!("f{i}"));
        let mut f = File::create(&path).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        expected.push(data);
    }
    fs::write(m.path("small"), b"tiny but fsynced").unwrap();
    File::open(m.path("small")).unwrap().sync_all().unwrap();
    // Unsynced writes in flight when the daemon dies.
    let mut f = File::create(m.path("unsynced")).unwrap();
    f.write_all(&vec![7u8; 5 << 20]).unwrap();
    let (repo, dir) = m.kill();
    drop(f);
    let m = Mount::start(repo, dir);
    for (i, data) in expected.iter().enumerate() {
        assert!(
            fs::read(m.path(&format!("f{i}"))).unwrap() == *data,
            "f{i} lost fsynced data"
        );
    }
    assert_eq!(fs::read(m.path("small")).unwrap(), b"tiny but fsynced");
    m.unmount();
}

#[test]
fn memory_stays_bounded_under_a_write_flood() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let init = Command::new(CAIRN)
        .args(["--repo", repo.to_str().unwrap(), "init"])
        .output()
        .unwrap();
    assert!(init.status.success());
    let config = repo.join("cairn.toml");
    let text = fs::read_to_string(&config)
        .unwrap()
        .replace("budget = \"256MiB\"", "budget = \"64MiB\"")
        .replace("file_dirty = \"32MiB\"", "file_dirty = \"16MiB\"")
        .replace("total_dirty = \"256MiB\"", "total_dirty = \"64MiB\"")
        .replace("cache = \"256MiB\"", "cache = \"32MiB\"");
    fs::write(&config, text).unwrap();
    fs::create_dir_all(base.path().join("mnt")).unwrap();
    let m = Mount::start(repo, base.path().join("mnt"));
    let pid = m.child.as_ref().unwrap().id();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let path = m.path(&format!("flood{t}"));
            std::thread::spawn(move || {
                let mut f = File::create(path).unwrap();
                for block in pattern(t, 512 << 20) {
                    f.write_all(&block).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    // The budgets: 64 MiB of sealed containers in flight, 64 MiB of dirty
    // file data and a 32 MiB cache; per writer one open 4 MiB container and
    // the 16 MiB region its unsealed chunks share; together about 300 MiB,
    // plus the binary, index and allocator (mimalloc keeps freed pages a
    // while). 2 GiB were written: a leak or an unbounded queue would hold
    // far more than this bound.
    assert!(
        hwm_kib < 640 * 1024,
        "daemon peak RSS {hwm_kib} KiB after a 2 GiB flood"
    );
    m.unmount();
}

#[test]
fn a_write_or_truncate_by_another_user_clears_set_id_bits() {
    use std::os::unix::process::CommandExt;
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    // The mount point's parents must let another user through.
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let as_user = |script: &str| {
        let out = Command::new("sh")
            .args(["-c", script])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for (name, how) in [("w", "printf x >> "), ("t", "truncate -s 1 ")] {
        let p = m.path(name);
        fs::write(&p, b"abc").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o6777)).unwrap();
        as_user(&format!("{how}{}", p.display()));
        let mode = fs::metadata(&p).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o0777, "{name}: {mode:o}");
    }
    // Root keeps them, as with CAP_FSETID.
    let p = m.path("root");
    fs::write(&p, b"abc").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o6777)).unwrap();
    OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(b"d")
        .unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o6777);
    m.unmount();
}

#[test]
fn big_and_write_only_handles_bypass_the_page_cache_and_stay_coherent() {
    use std::os::unix::fs::FileExt;
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    // Written through a write-only handle: nothing lands in the page cache.
    let len = 24 << 20;
    let mut want: Vec<u8> = pattern(5, len).flatten().collect();
    fs::write(m.path("big"), &want).unwrap();
    assert_eq!(
        cached_pages(&m.path("big")),
        0,
        "a write-only handle cached"
    );
    // Read through a read-only handle: over 16 MiB, so read around the cache.
    assert!(fs::read(m.path("big")).unwrap() == want);
    assert_eq!(cached_pages(&m.path("big")), 0, "a big file's read cached");
    // A small file read that way stays cached, for the next reader.
    fs::write(m.path("small"), &want[..1 << 20]).unwrap();
    assert!(fs::read(m.path("small")).unwrap() == want[..1 << 20]);
    assert!(
        cached_pages(&m.path("small")) > 0,
        "a small file's read not cached"
    );

    // A read-write handle caches what it reads; a direct write over it must
    // drop those pages, and a direct read must see a cached handle's write.
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("big"))
        .unwrap();
    let mut got = vec![0u8; 1 << 20];
    rw.read_exact_at(&mut got, 8 << 20).unwrap();
    assert!(got == want[8 << 20..9 << 20]);
    assert!(cached_pages(&m.path("big")) > 0);
    let patch = vec![0xab; 100_000];
    let wo = OpenOptions::new().write(true).open(m.path("big")).unwrap();
    wo.write_all_at(&patch, (8 << 20) + 5000).unwrap();
    want[(8 << 20) + 5000..(8 << 20) + 105_000].copy_from_slice(&patch);
    rw.read_exact_at(&mut got, 8 << 20).unwrap();
    assert!(
        got == want[8 << 20..9 << 20],
        "a cached handle read stale pages"
    );
    rw.write_all_at(b"cached write", 20 << 20).unwrap();
    want[20 << 20..(20 << 20) + 12].copy_from_slice(b"cached write");
    assert!(fs::read(m.path("big")).unwrap() == want);

    // A shared mapping of a big file works and shows the file as it is.
    let ro = File::open(m.path("big")).unwrap();
    with_shared_map(&ro, len, |mapped, _| assert!(mapped == &want[..]));
    drop((rw, wo, ro));
    m.unmount();
}

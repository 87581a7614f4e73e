//! A real `cairn mount` for integration tests, shared by the test files.
#![allow(dead_code)]

pub mod chunkd;
pub mod coord;
pub mod etcd;
pub mod metrics;
pub mod s3;
pub mod shards;
pub mod tier;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

/// `cairn --repo REPO -q ARGS...`, waited for.
pub fn cairn(repo: &Path, args: &[&str]) -> Output {
    Command::new(CAIRN)
        .arg("--repo")
        .arg(repo)
        .arg("-q")
        .args(args)
        .output()
        .unwrap()
}

/// Like [`cairn`], asserting success; its standard output.
pub fn ok(repo: &Path, args: &[&str]) -> String {
    let out = cairn(repo, args);
    assert!(
        out.status.success(),
        "cairn {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub struct Mount {
    pub repo: PathBuf,
    pub dir: PathBuf,
    pub child: Option<Child>,
}

pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need FUSE"
    );
    let found = Command::new("sh")
        .args(["-c", "command -v fusermount3"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "fusermount3 not found: apt-get install -y fuse3");
}

pub fn is_mounted(dir: &Path) -> bool {
    let canon = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(canon.to_str().unwrap()))
}

/// Whether a cairn file system is mounted at `dir` (another mount there,
/// below it, does not count).
pub fn is_cairn_mounted(dir: &Path) -> bool {
    let canon = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(" - "))
        .any(|(left, right)| {
            left.split(' ').nth(4) == Some(canon.to_str().unwrap())
                && (right.starts_with("fuse.cairn ")
                    || right.starts_with("fuse cairn ")
                    || right.starts_with("fuse cairn:"))
        })
}

impl Mount {
    pub fn new(base: &Path) -> Mount {
        let repo = base.join("repo");
        let dir = base.join("mnt");
        fs::create_dir_all(&dir).unwrap();
        let init = Command::new(CAIRN)
            .args(["--repo", repo.to_str().unwrap(), "init"])
            .output()
            .unwrap();
        assert!(init.status.success());
        Mount::start(repo, dir)
    }

    pub fn start(repo: PathBuf, dir: PathBuf) -> Mount {
        Mount::start_cmd(repo, dir, &["mount"])
    }

    /// `cairn --repo REPO -q COMMAND... DIR` (`mount --nonempty`, `serve`),
    /// waited for until DIR is mounted.
    pub fn start_cmd(repo: PathBuf, dir: PathBuf, command: &[&str]) -> Mount {
        require_fuse();
        let child = Command::new(CAIRN)
            .args(["--repo", repo.to_str().unwrap(), "-q"])
            .args(command)
            .arg(&dir)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut m = Mount {
            repo,
            dir,
            child: Some(child),
        };
        let started = Instant::now();
        // A dead mount left there answers nothing: wait for a live one.
        while !(is_cairn_mounted(&m.dir) && fs::metadata(&m.dir).is_ok()) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("cairn mount exited with {status} before mounting");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "mount did not appear"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Unmounts the way a user does and waits for the daemon to finish.
    pub fn unmount(mut self) -> (PathBuf, PathBuf) {
        let out = Command::new(CAIRN)
            .args(["umount", self.dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status = self.child.take().unwrap().wait().unwrap();
        assert!(status.success(), "cairn mount exited with {status}");
        (self.repo.clone(), self.dir.clone())
    }

    /// The daemon's process, for a test that unmounts by itself and looks
    /// at how it exited (dropping the mount then leaves it alone).
    pub fn take_child(&mut self) -> std::process::Child {
        self.child.take().expect("the daemon is still this mount's")
    }

    /// `kill -9` the daemon and clear the dead mount.
    pub fn kill(mut self) -> (PathBuf, PathBuf) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.dir)
            .output();
        (self.repo.clone(), self.dir.clone())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir)
                .output();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Edits `repo`'s cairn.toml: each `(from, to)` replaces text that must
/// be there (a line of the default file, say).
pub fn edit_config(repo: &Path, edits: &[(&str, &str)]) {
    let path = repo.join("cairn.toml");
    let mut text = fs::read_to_string(&path).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "no {from:?} in {}", path.display());
        text = text.replace(from, to);
    }
    fs::write(&path, text).unwrap();
}

/// The value of `name = value` in the lines cairn gives for
/// `~/.aws/credentials` (`aws_access_key_id`, `aws_secret_access_key`).
pub fn key_field(lines: &[String], name: &str) -> String {
    let prefix = format!("{name} = ");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
        .to_string()
}

/// `sh -c SCRIPT`, asserting success; its standard output.
pub fn sh(script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every extended attribute of `path` itself (a symlink's own), by name.
pub fn xattrs(path: &Path) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: a valid path and a buffer of the length given.
    let len = unsafe { libc::llistxattr(p.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        len >= 0,
        "llistxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    names.truncate(len as usize);
    let mut out = std::collections::BTreeMap::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let n = std::ffi::CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        // SAFETY: as above.
        let len = unsafe {
            libc::lgetxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(
            len >= 0,
            "lgetxattr {} {}: {}",
            path.display(),
            String::from_utf8_lossy(name),
            std::io::Error::last_os_error()
        );
        value.truncate(len as usize);
        out.insert(name.to_vec(), value);
    }
    out
}

/// A tmpfs of `mib` MiB at `dir`, unmounted when dropped.
pub struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    pub fn new(dir: &Path, mib: u64) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "this test needs root to mount a tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

pub fn random(len: usize, seed: u64) -> Vec<u8> {
    // Spread first: `seed | 1` alone gave seeds 2k and 2k+1 the same bytes.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}

/// Writes `data` to `path` and fsyncs it; the first error, if any.
pub fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut f = fs::File::create(path)?;
    use std::io::Write as _;
    f.write_all(data)?;
    f.sync_all()
}

/// A fresh repository on a tmpfs of `mib` MiB under `base/disk`, and an
/// empty mount point `base/mnt`: `(disk, repo, mnt)`. Keep the tmpfs until
/// every mount of the repository is gone.
pub fn repo_on_tmpfs(base: &Path, mib: u64) -> (Tmpfs, PathBuf, PathBuf) {
    let disk = Tmpfs::new(&base.join("disk"), mib);
    let repo = base.join("disk/repo");
    let mnt = base.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    ok(&repo, &["init"]);
    (disk, repo, mnt)
}

/// [`repo_on_tmpfs`], mounted.
pub fn mount_on_tmpfs(base: &Path, mib: u64) -> (Tmpfs, Mount) {
    let (disk, repo, mnt) = repo_on_tmpfs(base, mib);
    (disk, Mount::start(repo, mnt))
}

/// The bytes of every container blob of a plain repository.
pub fn plain_container_bytes(repo: &Path) -> u64 {
    plain_containers(repo)
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Every container blob of a plain repository (one local branch), sorted.
pub fn plain_containers(repo: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(subs) = fs::read_dir(repo.join("branches/local/containers")) else {
        return out; // none stored yet
    };
    for sub in subs {
        for f in fs::read_dir(sub.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

/// Turns off the version timer in `repo`'s cairn.toml, so that nothing a
/// test counts changes when a version would have been written.
#[allow(dead_code)]
pub fn no_versions(repo: &Path) {
    let toml = repo.join("cairn.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    assert!(
        text.contains("version_seconds = 30"),
        "cairn.toml has no version_seconds = 30"
    );
    std::fs::write(
        &toml,
        text.replace("version_seconds = 30", "version_seconds = 0"),
    )
    .unwrap();
}

/// Maps the first `len` bytes of `f` shared and read-only, hands the
/// mapping to `look`, and unmaps it.
pub fn with_shared_map<T>(
    f: &std::fs::File,
    len: usize,
    look: impl FnOnce(&[u8], *mut libc::c_void) -> T,
) -> T {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh mapping of a file held open for the call; the slice
    // and address do not outlive it, and it is unmapped before returning.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED, "shared mapping of {len} bytes");
        let out = look(std::slice::from_raw_parts(addr as *const u8, len), addr);
        libc::munmap(addr, len);
        out
    }
}

/// Pages of `path` in the kernel's page cache, seen through a read-write
/// handle (which keeps the page cache, so mapping it drops nothing).
pub fn cached_pages(path: &Path) -> usize {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let mut vec = vec![0u8; len.div_ceil(4096)];
    // SAFETY: mincore only reports on the live mapping it is given.
    with_shared_map(&f, len, |_, addr| unsafe {
        assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
    });
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

/// A repository, initialised, on a disk whose power a test cuts
/// (`testkit::powercut`), with a mount point beside it.
#[allow(dead_code)]
pub struct PowerCutRepo {
    /// From `CAIRN_POWERCUT_SEED` (to replay one), else the process id.
    pub seed: u64,
    pub disks: testkit::powercut::Disks,
    /// Holds the mount point.
    pub base: tempfile::TempDir,
    pub repo: PathBuf,
    pub mnt: PathBuf,
}

#[allow(dead_code)]
pub fn powercut_repo(disk_bytes: u64) -> PowerCutRepo {
    let seed = match std::env::var("CAIRN_POWERCUT_SEED") {
        Ok(s) => s.parse().expect("CAIRN_POWERCUT_SEED is a number"),
        Err(_) => std::process::id() as u64,
    };
    eprintln!("CAIRN_POWERCUT_SEED={seed}");
    let disks = testkit::powercut::Disks::new(1, disk_bytes);
    let base = tempfile::tempdir().unwrap();
    let repo = disks.path(0).join("repo");
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    ok(&repo, &["init"]);
    PowerCutRepo {
        seed,
        disks,
        base,
        repo,
        mnt,
    }
}

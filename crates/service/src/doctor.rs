//! `doctor`: what stands between this machine and a healthy cairn, each
//! finding with its severity and what to do.
//!
//! It only looks: it takes no lock, opens no database and writes nothing,
//! so it runs beside a mount, on a repository no command can open, and
//! where there is no repository at all (FUSE and the mounts are still
//! checked).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::unistd::AccessFlags;
use repo::{Config, Location, Repo};
use serde::{Deserialize, Serialize};

use crate::human_bytes;

/// How bad a finding is. Ordered: the report's status is its worst one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Checked and fine.
    Ok,
    /// Worth knowing; nothing to do.
    Info,
    /// Works now, but needs attention (space running low, a key with no
    /// backup recorded, a file readable by others).
    Warning,
    /// Something does not work, or data is at risk, until it is fixed.
    Problem,
}

/// One thing `doctor` looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Which check: `fuse_device`, `fuse_package`, `repository`,
    /// `permissions`, `config`, `key`, `key_backup`, `gateway_keys`,
    /// `free_space`, `clock`, `mount`.
    pub check: String,
    pub severity: Severity,
    /// What it is about when a check looks at several things (a branch
    /// name, a mount point, a path).
    pub subject: Option<String>,
    /// What was found.
    pub message: String,
    /// What to do about it (`None` when nothing needs doing).
    pub fix: Option<String>,
}

/// Everything `doctor` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorReport {
    pub repository: PathBuf,
    /// The worst severity among the findings.
    pub status: Severity,
    pub findings: Vec<Finding>,
}

/// What the FUSE side of the machine looks like, gathered by the caller:
/// the mount table is read the way the FUSE adapter reads it, and
/// `service` sits below that adapter.
#[derive(Debug, Clone)]
pub struct FuseFacts {
    /// Where `fusermount3` is, if it is installed.
    pub fusermount: Option<PathBuf>,
    /// Every cairn mount on the machine, or why the mount table could not
    /// be read.
    pub mounts: Result<Vec<CairnMount>, String>,
}

/// A directory where a cairn file system is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CairnMount {
    pub point: PathBuf,
    /// Its daemon is gone: every access fails with ENOTCONN.
    pub dead: bool,
}

/// What `doctor` checks against.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// A branch (or the metadata's disk) with less free space than this
    /// share of its file system is a warning.
    pub min_free_percent: f64,
    /// Where the S3 gateway keeps its access keys (the `gateway` crate
    /// says where), if it is to be checked.
    pub gateway_keys: Option<PathBuf>,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            min_free_percent: 10.0,
            gateway_keys: None,
        }
    }
}

/// The file `record_key_export` writes: the key's check value when it was
/// last exported, so `doctor` can tell that a backup was made of this key.
const KEY_EXPORTED: &str = "key.exported";
/// Files newer than now by more than this mean the clock went back.
const CLOCK_SLACK: Duration = Duration::from_secs(120);
/// No machine that runs this cairn has a clock before 2024-01-01.
const EARLIEST_SANE: u64 = 1_704_067_200;
/// Directories of a branch looked at for the clock check, at most.
const CLOCK_DIRS_MAX: usize = 4096;

/// Notes that the repository key at `root` was just exported (by `cairn
/// key export`), for `doctor`'s backup check.
pub fn record_key_export(root: &Path) -> crate::Result<()> {
    let check = check_value(&repo::keyfile::export(root)?);
    let path = root.join(KEY_EXPORTED);
    let secs = now_secs();
    let text = format!("# `cairn key export` ran at this time (Unix seconds) for this key.\nexported_at = {secs}\nkey_check = {check:?}\n");
    std::fs::write(&path, text).map_err(crate::ServiceError::io("write", &path))
}

/// Looks at everything listed in [`Finding::check`] for the repository
/// at `root`, with what the caller found of FUSE in `fuse`.
pub fn doctor(root: &Path, opts: &DoctorOptions, fuse: &FuseFacts) -> DoctorReport {
    let mut f = Findings(Vec::new());
    fuse_checks(&mut f, fuse);
    mounts(&mut f, root, fuse);
    if Repo::exists(root) {
        f.ok(
            "repository",
            None,
            format!("a cairn repository is at {}", root.display()),
        );
        permissions(&mut f, root);
        let config = config(&mut f, root);
        key(&mut f, root);
        gateway_keys(&mut f, opts);
        free_space(&mut f, root, config.as_ref(), opts);
        clock(&mut f, root, config.as_ref());
    } else {
        f.push(
            "repository",
            Severity::Problem,
            None,
            format!("no cairn repository at {}", root.display()),
            Some(
                "create one with `cairn init` (or `cairn serve`), or name yours with --repo DIR \
                 or CAIRN_REPO"
                    .into(),
            ),
        );
    }
    let findings = f.0;
    let status = findings
        .iter()
        .map(|x| x.severity)
        .max()
        .unwrap_or(Severity::Ok);
    for x in findings.iter().filter(|x| x.severity >= Severity::Warning) {
        tracing::info!(check = %x.check, subject = ?x.subject, "doctor: {}", x.message);
    }
    DoctorReport {
        repository: root.to_path_buf(),
        status,
        findings,
    }
}

struct Findings(Vec<Finding>);

impl Findings {
    fn push(
        &mut self,
        check: &str,
        severity: Severity,
        subject: Option<String>,
        message: String,
        fix: Option<String>,
    ) {
        self.0.push(Finding {
            check: check.into(),
            severity,
            subject,
            message,
            fix,
        });
    }

    fn ok(&mut self, check: &str, subject: Option<String>, message: String) {
        self.push(check, Severity::Ok, subject, message, None);
    }
}

/// The check value of an exported key's text (what the repository's
/// record keeps to recognise its key).
fn check_value(text: &str) -> String {
    cas::RepoKey::from_hex(text).map_or_else(String::new, |k| repo::record::key_check(&k))
}

fn euid() -> u32 {
    // SAFETY: a plain getter.
    unsafe { libc::geteuid() }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn fuse_checks(f: &mut Findings, fuse: &FuseFacts) {
    use std::os::unix::fs::FileTypeExt;
    let dev = Path::new("/dev/fuse");
    match std::fs::metadata(dev) {
        Ok(m) if m.file_type().is_char_device() => {
            // Root opens it itself; anyone else goes through fusermount3.
            let usable = euid() != 0
                || std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dev)
                    .is_ok();
            if usable {
                f.ok("fuse_device", None, "/dev/fuse is there".into());
            } else {
                f.push(
                    "fuse_device",
                    Severity::Problem,
                    None,
                    "/dev/fuse is there but cannot be opened".into(),
                    Some("in a container, start it with --device /dev/fuse".into()),
                );
            }
        }
        _ => f.push(
            "fuse_device",
            Severity::Problem,
            None,
            "/dev/fuse is missing: nothing can be mounted".into(),
            Some(
                "load the module (`modprobe fuse`); in a container, start it with \
                 --device /dev/fuse"
                    .into(),
            ),
        ),
    }
    match &fuse.fusermount {
        Some(p) => f.ok(
            "fuse_package",
            None,
            format!("{} is installed", p.display()),
        ),
        None => f.push(
            "fuse_package",
            Severity::Problem,
            None,
            "fusermount3 is not installed: mounts and unmounts need it".into(),
            Some("apt-get install fuse3".into()),
        ),
    }
}

fn mounts(f: &mut Findings, root: &Path, fuse: &FuseFacts) {
    let ours = repo::holder_of(root).and_then(|h| h.mountpoint.map(|m| (h.pid, m)));
    let table = match &fuse.mounts {
        Ok(t) => t,
        Err(e) => {
            f.push(
                "mount",
                Severity::Warning,
                None,
                format!("cannot read the kernel's mount table: {e}"),
                None,
            );
            return;
        }
    };
    for CairnMount { point, dead } in table {
        let subject = Some(point.display().to_string());
        match dead {
            true => f.push(
                "mount",
                Severity::Problem,
                subject,
                format!(
                    "a dead cairn mount is at {} (\"Transport endpoint is not connected\"): its \
                     daemon ended without unmounting, and every access there fails",
                    point.display()
                ),
                Some(format!(
                    "`cairn umount {}` detaches it; then mount again and run `cairn check`",
                    point.display()
                )),
            ),
            false => {
                let whose = match &ours {
                    Some((pid, m)) if m == point => format!(" (this repository, pid {pid})"),
                    _ => String::new(),
                };
                f.ok(
                    "mount",
                    subject,
                    format!("cairn is mounted at {}{whose}", point.display()),
                );
            }
        }
    }
    if table.is_empty() {
        f.ok("mount", None, "no cairn mount, and none dead".into());
    }
}

/// Whether this process may read and write `path` (and enter it, for a
/// directory).
fn may_use(path: &Path, dir: bool) -> nix::Result<()> {
    let mut flags = AccessFlags::R_OK | AccessFlags::W_OK;
    if dir {
        flags |= AccessFlags::X_OK;
    }
    nix::unistd::access(path, flags)
}

fn permissions(f: &mut Findings, root: &Path) {
    let uid = euid();
    let mut paths = vec![(root.to_path_buf(), true), (root.join("cairn.toml"), false)];
    for dir in ["meta", "run", "log", "branches"] {
        paths.push((root.join(dir), true));
    }
    if let Ok(entries) = std::fs::read_dir(root.join("meta")) {
        for e in entries.flatten().take(64) {
            paths.push((e.path(), e.path().is_dir()));
        }
    }
    let mut bad = 0;
    for (path, dir) in paths.iter().filter(|(p, _)| p.exists()) {
        if let Err(e) = may_use(path, *dir) {
            bad += 1;
            f.push(
                "permissions",
                Severity::Problem,
                Some(path.display().to_string()),
                format!(
                    "{} cannot be read and written by uid {uid}: {e}",
                    path.display()
                ),
                Some(format!(
                    "run cairn as the repository's owner, or `chown -R` {} to the user that runs it",
                    root.display()
                )),
            );
        }
    }
    if let Ok(m) = std::fs::metadata(root) {
        if m.permissions().mode() & 0o002 != 0 {
            bad += 1;
            f.push(
                "permissions",
                Severity::Warning,
                Some(root.display().to_string()),
                format!("{} is writable by every user", root.display()),
                Some(format!("chmod o-w {}", root.display())),
            );
        }
    }
    if bad == 0 {
        f.ok(
            "permissions",
            None,
            format!("uid {uid} can read and write the repository"),
        );
    }
}

fn config(f: &mut Findings, root: &Path) -> Option<Config> {
    let path = root.join("cairn.toml");
    let (config, text) = match Config::load_with_text(&path) {
        Ok(c) => c,
        Err(e) => {
            f.push(
                "config",
                Severity::Problem,
                Some(path.display().to_string()),
                e.to_string(),
                Some(
                    "fix the line named, or write back the last accepted file with \
                     `cairn config recover --force`"
                        .into(),
                ),
            );
            return None;
        }
    };
    let branches = config.redundancy.as_ref().map_or(0, |r| r.branches.len());
    let recorded = repo::record::Record::load(root).ok().flatten();
    match recorded {
        Some(r) if r.config_text() != text => f.push(
            "config",
            Severity::Info,
            Some(path.display().to_string()),
            "cairn.toml parses and validates, but differs from the last file the repository \
             accepted: the next command checks it against the repository's record"
                .into(),
            Some("`cairn policy reload` applies it (a mounted file system at once)".into()),
        ),
        _ => f.ok(
            "config",
            Some(path.display().to_string()),
            format!("cairn.toml parses and validates ({branches} configured branches)"),
        ),
    }
    Some(config)
}

fn key(f: &mut Findings, root: &Path) {
    let path = Repo::key_path(root);
    let subject = Some(path.display().to_string());
    let check = match repo::keyfile::export(root) {
        Ok(text) => check_value(&text),
        Err(e) => {
            f.push(
                "key",
                Severity::Problem,
                subject,
                e.to_string(),
                Some(
                    "restore it from your backup with `cairn key import FILE`; without it \
                     nothing stored can be read"
                        .into(),
                ),
            );
            return;
        }
    };
    let mode = std::fs::metadata(&path).map_or(0, |m| m.mode()) & 0o777;
    if mode & 0o077 != 0 {
        f.push(
            "key",
            Severity::Warning,
            subject.clone(),
            format!("the key file is readable by others (mode {mode:o}): anyone who can read it and the data reads everything"),
            Some(format!("chmod 600 {}", path.display())),
        );
    } else {
        f.ok(
            "key",
            subject.clone(),
            "the key is present, is this repository's, and only its owner can read it".into(),
        );
    }
    let exported = std::fs::read_to_string(root.join(KEY_EXPORTED)).unwrap_or_default();
    let backed_up = exported
        .lines()
        .any(|l| l.trim() == format!("key_check = {check:?}"));
    if backed_up {
        f.ok(
            "key_backup",
            subject,
            "`cairn key export` was run for this key; keep that copy away from this machine".into(),
        );
    } else {
        f.push(
            "key_backup",
            Severity::Warning,
            subject,
            "no backup of the key is recorded: if this disk is lost, so is everything stored"
                .into(),
            Some(
                "`cairn key export FILE` and keep FILE somewhere else (a password manager, \
                 another machine)"
                    .into(),
            ),
        );
    }
}

fn gateway_keys(f: &mut Findings, opts: &DoctorOptions) {
    let Some(path) = &opts.gateway_keys else {
        return;
    };
    let subject = Some(path.display().to_string());
    match std::fs::metadata(path) {
        Err(_) => f.push(
            "gateway_keys",
            Severity::Info,
            subject,
            "the S3 gateway has no access keys yet".into(),
            Some("`cairn serve` makes one at its first start; or `cairn access-key create`".into()),
        ),
        Ok(m) if m.mode() & 0o077 != 0 => f.push(
            "gateway_keys",
            Severity::Warning,
            subject,
            format!(
                "the gateway's access keys are readable by others (mode {:o})",
                m.mode() & 0o777
            ),
            Some(format!("chmod 600 {}", path.display())),
        ),
        Ok(_) => f.ok(
            "gateway_keys",
            subject,
            "the gateway's access keys are readable by their owner only".into(),
        ),
    }
}

/// Every local directory the repository writes to, by what it is: the
/// metadata, and each local branch.
fn places(root: &Path, config: Option<&Config>) -> Vec<(String, PathBuf)> {
    let mut out = vec![("metadata".to_string(), root.join("meta"))];
    match config.and_then(|c| c.redundancy.as_ref()) {
        None => out.push(("branch local".into(), root.join("branches/local"))),
        Some(r) => {
            for b in &r.branches {
                if let Location::Local(p) = &b.location {
                    out.push((format!("branch {}", b.name), root.join(p)));
                }
            }
        }
    }
    out
}

fn free_space(f: &mut Findings, root: &Path, config: Option<&Config>, opts: &DoctorOptions) {
    // A branch that cannot take two more containers is full for a writer.
    let full_below = config.map_or(8 << 20, |c| 2 * c.store.container_size as u64);
    for (what, path) in places(root, config) {
        let subject = Some(what.clone());
        let st = match nix::sys::statvfs::statvfs(&path) {
            Ok(st) => st,
            Err(e) => {
                f.push(
                    "free_space",
                    Severity::Problem,
                    subject,
                    format!("cannot look at {} ({what}): {e}", path.display()),
                    Some("mount the disk it is on, or fix the path in cairn.toml".into()),
                );
                continue;
            }
        };
        let frsize = st.fragment_size() as u64;
        let free = st.blocks_available() as u64 * frsize;
        let total = st.blocks() as u64 * frsize;
        let percent = if total == 0 {
            100.0
        } else {
            free as f64 * 100.0 / total as f64
        };
        let said = format!(
            "{what} at {}: {} free of {} ({percent:.1}%)",
            path.display(),
            human_bytes(free),
            human_bytes(total)
        );
        let fix = "free space on that disk, `cairn gc` (after `cairn snapshot delete` of \
                   what you no longer need), or move the branch with `cairn branch add` + \
                   `cairn branch replace`";
        if free < full_below {
            f.push(
                "free_space",
                Severity::Problem,
                subject,
                format!("{said}: full, writes fail with ENOSPC"),
                Some(fix.into()),
            );
        } else if percent < opts.min_free_percent {
            f.push(
                "free_space",
                Severity::Warning,
                subject,
                format!("{said}: below {}%", opts.min_free_percent),
                Some(fix.into()),
            );
        } else {
            f.ok("free_space", subject, said);
        }
    }
    if let Some(r) = config.and_then(|c| c.redundancy.as_ref()) {
        for b in r
            .branches
            .iter()
            .filter(|b| matches!(b.location, Location::S3(_)))
        {
            f.push(
                "free_space",
                Severity::Info,
                Some(format!("branch {}", b.name)),
                format!(
                    "branch {} is an S3 bucket: its space is the provider's",
                    b.name
                ),
                None,
            );
        }
    }
}

/// The newest modification time among what the repository wrote: its
/// top files, its metadata, and the directories its containers go into.
fn newest_write(root: &Path, config: Option<&Config>) -> Option<(SystemTime, PathBuf)> {
    let mut dirs = vec![root.to_path_buf(), root.join("meta"), root.join("run")];
    for (_, branch) in places(root, config).into_iter().skip(1) {
        let containers = branch.join("containers");
        if let Ok(entries) = std::fs::read_dir(&containers) {
            dirs.extend(entries.flatten().take(CLOCK_DIRS_MAX).map(|e| e.path()));
        }
        dirs.push(containers);
    }
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    let mut consider = |path: PathBuf| {
        if let Ok(t) = std::fs::symlink_metadata(&path).and_then(|m| m.modified()) {
            if newest.as_ref().is_none_or(|(n, _)| t > *n) {
                newest = Some((t, path));
            }
        }
    };
    for dir in dirs {
        if dir == root || dir.ends_with("meta") || dir.ends_with("run") {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten().take(256) {
                    consider(e.path());
                }
            }
        }
        consider(dir);
    }
    newest
}

fn clock(f: &mut Findings, root: &Path, config: Option<&Config>) {
    let now = SystemTime::now();
    let secs = now_secs();
    if secs < EARLIEST_SANE {
        f.push(
            "clock",
            Severity::Problem,
            None,
            format!("the system clock says {secs} s after 1970, before 2024: it was never set"),
            Some("set the clock (timedatectl set-ntp true, or ntpdate)".into()),
        );
        return;
    }
    match newest_write(root, config) {
        Some((t, path)) if t > now + CLOCK_SLACK => {
            let ahead = t.duration_since(now).unwrap_or_default().as_secs();
            f.push(
                "clock",
                Severity::Problem,
                Some(path.display().to_string()),
                format!(
                    "the system clock is {ahead} s behind the newest thing the repository \
                     wrote ({}): the clock went back, and versions, retention and snapshots \
                     would be ordered wrongly",
                    path.display()
                ),
                Some(
                    "fix the clock (timedatectl set-ntp true) before writing more; nothing \
                     needs repairing"
                        .into(),
                ),
            );
        }
        _ => f.ok(
            "clock",
            None,
            "the system clock is after everything the repository wrote".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> FuseFacts {
        FuseFacts {
            fusermount: Some("/usr/bin/fusermount3".into()),
            mounts: Ok(Vec::new()),
        }
    }

    fn by_check<'a>(r: &'a DoctorReport, check: &str) -> Vec<&'a Finding> {
        r.findings.iter().filter(|f| f.check == check).collect()
    }

    #[test]
    fn no_repository_is_a_problem_that_names_init() {
        let dir = tempfile::tempdir().unwrap();
        let r = doctor(&dir.path().join("none"), &DoctorOptions::default(), &none());
        assert_eq!(r.status, Severity::Problem);
        let repo = by_check(&r, "repository");
        assert_eq!(repo.len(), 1);
        assert!(repo[0].fix.as_deref().unwrap().contains("cairn init"));
    }

    #[test]
    fn a_fresh_repository_warns_only_of_its_key_backup_until_exported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        Repo::init(&root).unwrap();
        let r = doctor(&root, &DoctorOptions::default(), &none());
        let backup = by_check(&r, "key_backup");
        assert_eq!(backup[0].severity, Severity::Warning, "{r:#?}");
        for check in ["config", "key", "permissions", "clock"] {
            assert!(
                by_check(&r, check)
                    .iter()
                    .all(|x| x.severity == Severity::Ok),
                "{check}: {r:#?}"
            );
        }
        record_key_export(&root).unwrap();
        let r = doctor(&root, &DoctorOptions::default(), &none());
        assert_eq!(by_check(&r, "key_backup")[0].severity, Severity::Ok);
    }

    #[test]
    fn a_dead_mount_and_no_fusermount_are_problems_with_their_fixes() {
        let dir = tempfile::tempdir().unwrap();
        let facts = FuseFacts {
            fusermount: None,
            mounts: Ok(vec![
                CairnMount {
                    point: "/mnt/dead".into(),
                    dead: true,
                },
                CairnMount {
                    point: "/mnt/live".into(),
                    dead: false,
                },
            ]),
        };
        let r = doctor(dir.path(), &DoctorOptions::default(), &facts);
        let package = by_check(&r, "fuse_package");
        assert_eq!(package[0].severity, Severity::Problem);
        assert!(package[0].fix.as_deref().unwrap().contains("fuse3"));
        let mounts = by_check(&r, "mount");
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].severity, Severity::Problem);
        assert_eq!(mounts[0].subject.as_deref(), Some("/mnt/dead"));
        assert!(mounts[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("cairn umount /mnt/dead"));
        assert_eq!(mounts[1].severity, Severity::Ok);
    }

    #[test]
    fn a_file_from_the_future_is_a_clock_problem() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        Repo::init(&root).unwrap();
        let later = SystemTime::now() + Duration::from_secs(3600);
        let file = std::fs::File::options()
            .write(true)
            .open(root.join("cairn.toml"))
            .unwrap();
        file.set_modified(later).unwrap();
        let r = doctor(&root, &DoctorOptions::default(), &none());
        let clock = by_check(&r, "clock");
        assert_eq!(clock[0].severity, Severity::Problem, "{r:#?}");
        assert!(clock[0].subject.as_deref().unwrap().ends_with("cairn.toml"));
    }

    #[test]
    fn a_broken_config_and_a_missing_key_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        Repo::init(&root).unwrap();
        std::fs::write(root.join("cairn.toml"), "[chunking\n").unwrap();
        std::fs::remove_file(Repo::key_path(&root)).unwrap();
        let r = doctor(&root, &DoctorOptions::default(), &none());
        assert_eq!(by_check(&r, "config")[0].severity, Severity::Problem);
        let key = by_check(&r, "key");
        assert_eq!(key[0].severity, Severity::Problem);
        assert!(key[0].fix.as_deref().unwrap().contains("cairn key import"));
    }
}

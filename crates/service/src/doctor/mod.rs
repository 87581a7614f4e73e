//! `doctor`: what stands between this machine and a healthy cairn, each
//! finding with its severity and what to do.
//!
//! It only looks: it takes no lock, opens no database and writes nothing,
//! so it runs beside a mount, on a repository no command can open, and
//! where there is no repository at all (FUSE and the mounts are still
//! checked). The one thing it asks over the network, a chunkd index's
//! range table and owners, is bounded by timeouts.

mod access;
mod index;
mod machine;
mod space;

pub use index::IndexTable;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use repo::Repo;
use serde::{Deserialize, Serialize};

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
    /// `free_space`, `clock`, `mount`, and for a repository with a chunkd
    /// index `shared_index`, `chunkd_token`, `chunkd_owner` (one per
    /// owner).
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
    /// The chunkd index's range table, when the repository names one
    /// (`[shared_index] kind = "chunkd"`) and etcd gave it.
    pub shared_index: Option<IndexTable>,
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
    let mut shared_index = None;
    machine::fuse_checks(&mut f, fuse);
    machine::mounts(&mut f, root, fuse);
    if Repo::exists(root) {
        f.ok(
            "repository",
            None,
            format!("a cairn repository is at {}", root.display()),
        );
        access::permissions(&mut f, root);
        let config = access::config(&mut f, root);
        access::key(&mut f, root);
        access::gateway_keys(&mut f, opts);
        space::free_space(&mut f, root, config.as_ref(), opts);
        space::clock(&mut f, root, config.as_ref());
        shared_index = index::shared_index(&mut f, root, config.as_ref());
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
        shared_index,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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

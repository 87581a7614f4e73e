//! Who may use the repository, and what it needs to be read: its
//! permissions, its config, its key (and the key's backup), and the S3
//! gateway's access keys.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::unistd::AccessFlags;
use repo::{Config, Repo};

use super::{check_value, euid, DoctorOptions, Findings, Severity, KEY_EXPORTED};

/// Whether this process may read and write `path` (and enter it, for a
/// directory).
fn may_use(path: &Path, dir: bool) -> nix::Result<()> {
    let mut flags = AccessFlags::R_OK | AccessFlags::W_OK;
    if dir {
        flags |= AccessFlags::X_OK;
    }
    nix::unistd::access(path, flags)
}

pub(super) fn permissions(f: &mut Findings, root: &Path) {
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

pub(super) fn config(f: &mut Findings, root: &Path) -> Option<Config> {
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

pub(super) fn key(f: &mut Findings, root: &Path) {
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

pub(super) fn gateway_keys(f: &mut Findings, opts: &DoctorOptions) {
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

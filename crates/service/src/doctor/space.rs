//! Room and time: free space where the repository writes, and a clock
//! that has not gone back past what it wrote.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use repo::{Config, Location};

use super::{now_secs, DoctorOptions, Findings, Severity};
use crate::human_bytes;

/// Files newer than now by more than this mean the clock went back.
const CLOCK_SLACK: Duration = Duration::from_secs(120);
/// No machine that runs this cairn has a clock before 2024-01-01.
const EARLIEST_SANE: u64 = 1_704_067_200;
/// Directories of a branch looked at for the clock check, at most.
const CLOCK_DIRS_MAX: usize = 4096;

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

pub(super) fn free_space(
    f: &mut Findings,
    root: &Path,
    config: Option<&Config>,
    opts: &DoctorOptions,
) {
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

pub(super) fn clock(f: &mut Findings, root: &Path, config: Option<&Config>) {
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

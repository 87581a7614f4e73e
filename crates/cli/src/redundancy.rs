//! `cairn policy show`, `status` and `scrub`: the redundancy layer seen
//! from the command line, printed.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use service::Request;

use crate::ops;
use crate::ui::{self, out};

pub fn policy_cmd(root: &Path, path: String, json: bool, quiet: bool) -> Result<ExitCode> {
    let show = ops::run(root, &Request::PolicyShow { path }, quiet)?.into_policy_show()?;
    if json {
        out!("{}", ui::json(&show)?);
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{}: {} over [{}], from {}",
        show.path,
        show.policy,
        show.branches.join(", "),
        show.source
    );
    if show.inline {
        out!("  its bytes live in its inode (small file): no container, no shards");
    }
    for c in &show.containers {
        let shards: Vec<String> = c
            .shards
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if b.is_empty() {
                    format!("s{i}: LOST")
                } else {
                    format!("s{i}: {}", b.join("+"))
                }
            })
            .collect();
        out!(
            "  container {} ({}): {}",
            c.container,
            c.policy,
            shards.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn status_cmd(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let lines = ops::run(root, &Request::Status, quiet)?.into_status()?;
    if json {
        out!("{}", ui::json(&lines)?);
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{:<16} {:<9} {:>8} {:>11} {:>10} {:>8} {:>7}",
        "BRANCH",
        "HEALTH",
        "SHARDS",
        "USED",
        "DELAY",
        "READS",
        "FAULTS"
    );
    for b in &lines {
        out!(
            "{:<16} {:<9} {:>8} {:>11} {:>10} {:>8} {:>7}",
            b.name,
            match (b.retired, b.degraded) {
                (true, _) => "retired",
                (false, true) => "degraded",
                (false, false) => "ok",
            },
            b.shards,
            ui::bytes(b.bytes),
            b.delay_ms.map_or("-".to_string(), |d| format!("{d:.2} ms")),
            b.reads,
            b.faults
        );
        if let Some(e) = &b.last_error {
            out!("  last error: {e}");
        }
        if b.plain {
            out!(
                "  the one plain branch (no [[branch]] in cairn.toml): every container stored once"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn scrub_cmd(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let out = ops::run(root, &Request::Scrub, quiet)?.into_scrub()?;
    if json {
        out!("{}", ui::json(&out)?);
    } else if out.plain {
        out!(
            "{} containers on one plain branch (local): no redundancy to heal from, nothing \
             scrubbed; `cairn check` verifies every chunk",
            out.containers
        );
    } else {
        out!(
            "{} containers: {} healthy, {} repaired, {} readable but not restored, {} lost",
            out.containers,
            out.healthy,
            out.repaired.len(),
            out.degraded.len(),
            out.lost.len()
        );
        for r in &out.repaired {
            out!("repaired {r}");
        }
        for r in &out.degraded {
            out!("NOT RESTORED {r}");
        }
        for r in &out.lost {
            out!("LOST {r}");
        }
        for f in &out.affected_files {
            out!("lost data in file: {f}");
        }
        if !out.degraded.is_empty() {
            out!(
                "every file still reads back; bring the branch named above back (or \
                 `cairn branch replace` it) and run `cairn scrub` again"
            );
        }
        if !out.lost.is_empty() && out.affected_files.is_empty() {
            out!(
                "no file in the live tree has data in the lost bytes; `cairn check` tells \
                 what else (snapshots, versions) does"
            );
        } else if !out.lost.is_empty() {
            out!(
                "restore the files named above from a backup, or delete them; \
                 `cairn check` then tells what is left to drop"
            );
        }
    }
    Ok(if out.lost.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

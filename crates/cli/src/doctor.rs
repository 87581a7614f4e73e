//! `cairn doctor`, `completions` and `man`: the operator's tools. The
//! checks are the service's; completions and pages are made from the clap
//! definition in `args`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::CommandFactory;
use service::{DoctorOptions, Severity};

use crate::args::Cli;
use crate::ui::{self, out};

pub fn doctor(root: &Path, json: bool, min_free: f64) -> Result<ExitCode> {
    let opts = DoctorOptions {
        min_free_percent: min_free,
        gateway_keys: Some(gateway::keys::path(root)),
    };
    let facts = service::FuseFacts {
        fusermount: fuse::fusermount_bin(),
        mounts: fuse::cairn_mounts()
            .map(|all| {
                all.into_iter()
                    .map(|(point, state)| service::CairnMount {
                        point,
                        dead: matches!(state, fuse::MountState::Dead(_)),
                    })
                    .collect()
            })
            .map_err(|e| e.to_string()),
    };
    let report = service::doctor(root, &opts, &facts);
    if json {
        out!("{}", ui::json(&report)?);
    } else {
        for f in &report.findings {
            let mark = match f.severity {
                Severity::Ok => "OK",
                Severity::Info => "INFO",
                Severity::Warning => "WARNING",
                Severity::Problem => "PROBLEM",
            };
            out!("{mark:<8} {:<13} {}", f.check, f.message);
            if let Some(fix) = &f.fix {
                out!("{:<22} -> {fix}", "");
            }
        }
        if let Some(index) = &report.shared_index {
            out!(
                "chunkd index of file system {} (etcd {}):",
                index.fsid,
                index.etcd.join(",")
            );
            crate::chunkd::print_ranges(&index.ranges);
        }
        let verdict = match report.status {
            Severity::Ok | Severity::Info => "healthy",
            Severity::Warning => "healthy, with warnings",
            Severity::Problem => "PROBLEMS found",
        };
        out!("summary: {verdict} ({})", report.repository.display());
    }
    Ok(match report.status {
        Severity::Ok | Severity::Info => ExitCode::SUCCESS,
        Severity::Warning => ExitCode::from(1),
        Severity::Problem => ExitCode::from(2),
    })
}

pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "cairn", &mut script);
    out!("{}", String::from_utf8_lossy(&script).trim_end());
    Ok(ExitCode::SUCCESS)
}

pub fn man(dir: Option<&Path>) -> Result<ExitCode> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Built, the subcommands carry the global options (--repo ...) and
    // their full names (cairn-snapshot-create).
    cmd.build();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .context("cannot render the manual page")?;
        out!("{}", String::from_utf8_lossy(&page).trim_end());
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_pages(cmd, dir)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the page of `cmd` and of every subcommand below it (each named
/// by its display name, `cairn-snapshot-create.1`), walking the tree
/// without recursion.
fn write_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    let mut todo = vec![cmd];
    while let Some(cmd) = todo.pop() {
        todo.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let path = clap_mangen::Man::new(cmd)
            .generate_to(dir)
            .with_context(|| format!("cannot write a manual page into {}", dir.display()))?;
        out!("{}", path.display());
    }
    Ok(())
}

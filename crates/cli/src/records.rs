//! `cairn config recover` and `cairn key export|import`: bringing back the
//! repository's own files (cairn.toml, key) from its record or a backup.
//! The work is the `repo` crate's; this parses, calls and prints.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use repo::keyfile::{self, Imported};

use crate::args::{ConfigCommand, KeyCommand};
use crate::ui::out;

pub fn config_cmd(root: &Path, cmd: ConfigCommand, quiet: bool) -> Result<ExitCode> {
    let ConfigCommand::Recover { force, json } = cmd;
    let done = repo::recover_config(root, force)?;
    tracing::info!(repo = %root.display(), "cairn.toml recovered from the record");
    if json {
        out!(
            "{}",
            serde_json::json!({
                "path": done.path,
                "kept": done.kept,
                "branches": done.branches,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let (Some(kept), false) = (&done.kept, quiet) {
        say!("cairn: kept the replaced file as {}", kept.display());
    }
    out!(
        "wrote {} from the repository's record ({})",
        done.path.display(),
        match done.branches.len() {
            0 => "no branches: one plain local branch".to_string(),
            _ => format!("branches {}", done.branches.join(", ")),
        }
    );
    if !quiet {
        say!("cairn: run `cairn check` to verify the repository");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn key_cmd(root: &Path, cmd: KeyCommand, quiet: bool) -> Result<ExitCode> {
    match cmd {
        KeyCommand::Export { file } => {
            let text = keyfile::export(root)?;
            match &file {
                Some(path) => {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)
                        .with_context(|| format!("cannot create {}", path.display()))?;
                    f.write_all(text.as_bytes())
                        .and_then(|()| f.sync_all())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                }
                None => out!("{}", text.trim_end()),
            }
            // What `cairn doctor` counts as a backup made.
            if let Err(e) = service::record_key_export(root) {
                tracing::warn!(error = %e, "cannot record that the key was exported");
            }
            if !quiet {
                say!(
                    "cairn: this is the repository's secret key: anyone with it and the data can \
                     read everything. Keep the copy safe and away from the repository; \
                     `cairn key import` restores it"
                );
            }
        }
        KeyCommand::Import { file } => {
            let mut text = String::new();
            if file == Path::new("-") {
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("cannot read standard input")?;
            } else {
                text = std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
            }
            match keyfile::import(root, &text, &file)? {
                Imported::AlreadyInPlace => {
                    if !quiet {
                        say!("cairn: the repository already has this key; nothing changed");
                    }
                }
                Imported::Restored { replaced } => {
                    if !quiet {
                        if let Some(aside) = replaced {
                            say!("cairn: kept the replaced key file as {}", aside.display());
                        }
                        say!(
                            "cairn: restored the key of {} (it matches the repository's check value)",
                            root.display()
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

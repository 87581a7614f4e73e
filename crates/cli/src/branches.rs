//! `cairn branch add/remove/replace` and `policy reload`: the edit of
//! cairn.toml made here, the change run by the service (in the daemon when
//! mounted), and what it did printed.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use service::{MoveOut, NewBranch, NewPlace, Request};

use crate::args::BranchCommand;
use crate::ops;

const CONFIG: &str = "cairn.toml";

pub fn run(root: &Path, cmd: BranchCommand, quiet: bool) -> Result<ExitCode> {
    let path = root.join(CONFIG);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    match cmd {
        BranchCommand::Add {
            name,
            path: dir,
            s3_endpoint,
            s3_bucket,
            s3_region,
            s3_access_key_id,
            s3_secret_access_key,
            label,
        } => {
            let place = match (dir, s3_endpoint, s3_bucket) {
                (Some(dir), None, None) => NewPlace::Local(dir),
                (None, Some(endpoint), Some(bucket)) => NewPlace::S3 {
                    endpoint,
                    bucket,
                    region: s3_region,
                    access_key_id: s3_access_key_id.unwrap_or_default(),
                    secret_access_key: s3_secret_access_key.unwrap_or_default(),
                },
                _ => refuse!("give either --path DIR or both --s3-endpoint and --s3-bucket"),
            };
            let branch = NewBranch {
                name: name.clone(),
                place,
                labels: label,
            };
            let new = service::config_with_branch(&text, &branch)?;
            // The holder of the repository's lock (the daemon, or this
            // process) writes the file and opens the branch.
            ops::run(
                root,
                &Request::BranchAdd {
                    name: name.clone(),
                    base: text,
                    config: new,
                },
                quiet,
            )?
            .into_branch_add()?;
            if !quiet {
                say!("added branch {name:?}");
            }
        }
        BranchCommand::Remove { name, json } => {
            let new = service::config_without_branch(&text, &name, None)?;
            service::parse_config(&new).context(format!("branch {name:?} cannot be removed"))?;
            let out = ops::run(
                root,
                &Request::BranchDrain {
                    name: name.clone(),
                    config: new,
                },
                quiet,
            )?
            .into_branch_drain()?;
            let code = report(&out, json, quiet)?;
            if !quiet {
                say!("removed branch {name:?} from cairn.toml; its directory or bucket is left as it was");
            }
            return Ok(code);
        }
        BranchCommand::Replace { old, new: to, json } => {
            if old == to {
                refuse!(
                    "a branch cannot replace itself ({old:?}); name the branch to rebuild onto"
                );
            }
            let new = service::config_without_branch(&text, &old, Some(&to))?;
            service::parse_config(&new)
                .context(format!("branch {old:?} cannot be replaced by {to:?}"))?;
            let out = ops::run(
                root,
                &Request::BranchReplace {
                    old: old.clone(),
                    new: to.clone(),
                    config: new,
                },
                quiet,
            )?
            .into_branch_replace()?;
            let code = report(&out, json, quiet)?;
            if !quiet {
                say!("replaced branch {old:?} by {to:?}");
            }
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cairn policy reload`.
pub fn reload_cmd(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let applied = ops::run(root, &Request::Reload, quiet)?.into_reload()?;
    if json {
        crate::ui::out!("{}", crate::ui::json(&applied)?);
    } else if !quiet {
        for (what, names) in [
            ("added", &applied.added),
            ("reinstated", &applied.reinstated),
        ] {
            if !names.is_empty() {
                say!("{what} branch(es) {}", names.join(", "));
            }
        }
        say!("applied {CONFIG}: new files follow its rules");
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what a move did; fails when shards could not be moved (the move
/// can be run again). Lost containers do not stop it: they are listed,
/// with their files, and make the exit status 1.
fn report(out: &MoveOut, json: bool, quiet: bool) -> Result<ExitCode> {
    if json {
        crate::ui::out!("{}", crate::ui::json(out)?);
    } else if !quiet {
        say!(
            "{} shards written, {} already in place",
            out.rebuilt,
            out.already_present
        );
    }
    if !out.failed.is_empty() {
        bail!(
            "{} shards could not be moved (cairn.toml is unchanged; run the command again after fixing):\n{}",
            out.failed.len(),
            out.failed.join("\n")
        );
    }
    if out.lost.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "{} container(s) are lost beyond their policy and were not rebuilt:",
        out.lost.len()
    );
    for l in &out.lost {
        say!("LOST {l}");
    }
    for f in &out.lost_files {
        say!("lost data in file: {f}");
    }
    say!(
        "everything else was rebuilt; restore the files named above from a backup, or delete \
         them, and run `cairn check`"
    );
    Ok(ExitCode::from(1))
}

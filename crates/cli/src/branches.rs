//! `cairn branch add/remove/replace`: changing the `[[branch]]` entries of
//! cairn.toml, moving data first where needed.
//!
//! The file is edited as text so that comments stay; every edit is checked
//! by parsing the result before it replaces the file (atomically).
//!
//! A change reaches a mounted file system at once, through its daemon: an
//! added branch is opened and takes new shards; a branch being removed or
//! replaced is retired first (new shards go to its successor, or to the
//! other branches), its shards are moved off, and only then is cairn.toml
//! rewritten. Interrupted, cairn.toml still lists the branch and the command
//! can be run again; a daemon keeps the branch retired until then or until
//! the next mount.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use fs::Fs;
use serde::{Deserialize, Serialize};

use crate::args::BranchCommand;
use crate::ops::{self, Request};
use crate::redundancy::MoveOut;

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
            let mut block = format!("\n[[branch]]\nname = {}\n", quote(&name));
            match (dir, s3_endpoint, s3_bucket) {
                (Some(dir), None, None) => {
                    block += &format!(
                        "kind = \"local\"\npath = {}\n",
                        quote(&dir.to_string_lossy())
                    );
                }
                (None, Some(endpoint), Some(bucket)) => {
                    block += &format!(
                        "kind = \"s3\"\nendpoint = {}\nbucket = {}\nregion = {}\naccess_key_id = {}\nsecret_access_key = {}\n",
                        quote(&endpoint),
                        quote(&bucket),
                        quote(&s3_region),
                        quote(&s3_access_key_id.unwrap_or_default()),
                        quote(&s3_secret_access_key.unwrap_or_default())
                    );
                }
                _ => bail!("give either --path DIR or both --s3-endpoint and --s3-bucket"),
            }
            if !label.is_empty() {
                let labels: Vec<String> = label.iter().map(|l| quote(l)).collect();
                block += &format!("labels = [{}]\n", labels.join(", "));
            }
            let new = format!("{}{block}", text.trim_end_matches('\n').to_owned() + "\n");
            check(&new)?;
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
            )?;
            if !quiet {
                say!("added branch {name:?}");
            }
        }
        BranchCommand::Remove { name } => {
            let new = without_branch(&text, &name, None)?;
            check(&new).context(format!("branch {name:?} cannot be removed"))?;
            let v = ops::run(
                root,
                &Request::BranchDrain {
                    name: name.clone(),
                    config: new,
                },
                quiet,
            )?;
            let out: MoveOut = serde_json::from_value(v)?;
            let code = report(&out, quiet)?;
            if !quiet {
                say!("removed branch {name:?} from cairn.toml; its directory or bucket is left as it was");
            }
            return Ok(code);
        }
        BranchCommand::Replace { old, new: to } => {
            if old == to {
                bail!("a branch cannot replace itself ({old:?}); name the branch to rebuild onto");
            }
            let new = without_branch(&text, &old, Some(&to))?;
            check(&new).context(format!("branch {old:?} cannot be replaced by {to:?}"))?;
            let v = ops::run(
                root,
                &Request::BranchReplace {
                    old: old.clone(),
                    new: to.clone(),
                    config: new,
                },
                quiet,
            )?;
            let out: MoveOut = serde_json::from_value(v)?;
            let code = report(&out, quiet)?;
            if !quiet {
                say!("replaced branch {old:?} by {to:?}");
            }
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What [`reconfigure`] changed in a running store.
#[derive(Debug, Serialize, Deserialize)]
pub struct Applied {
    pub added: Vec<String>,
    pub reinstated: Vec<String>,
    pub retired: Vec<String>,
}

/// Makes `fs`'s branches and rules those of `text` (a cairn.toml).
fn apply(root: &Path, fs: &Fs, text: &str, successors: &[(String, String)]) -> Result<Applied> {
    let config = repo::Config::parse(text).map_err(|e| anyhow::anyhow!("{CONFIG}: {e}"))?;
    let done = repo::reconfigure(root, fs.store(), &config, text, successors)?;
    fs.set_rules(done.rules)?;
    Ok(Applied {
        added: done.added,
        reinstated: done.reinstated,
        retired: done.retired,
    })
}

/// `branch add` under the repository's lock: makes `config` cairn.toml if
/// the file is still `base`, and opens the new branch (in the running file
/// system, or just to check it when none runs); puts `base` back if the
/// branch cannot be opened.
pub fn add(t: &ops::Target<'_>, name: &str, base: &str, config: &str) -> Result<Applied> {
    let path = t.root.join(CONFIG);
    let now = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if now != base {
        bail!("{CONFIG} changed while `branch add` ran; run it again");
    }
    let parsed = repo::Config::parse(config).map_err(|e| anyhow::anyhow!("{CONFIG}: {e}"))?;
    write_checked(t.root, config)?;
    let done = match (t.fs, t.repo) {
        (Some(fs), _) => apply(t.root, fs, config, &[]),
        (None, Some(repo)) => repo
            .validate(&parsed)
            .map(|()| Applied {
                added: vec![name.to_string()],
                reinstated: Vec::new(),
                retired: Vec::new(),
            })
            .map_err(anyhow::Error::from),
        (None, None) => Err(anyhow::anyhow!("no file system or repository to add to")),
    };
    if let Err(e) = done {
        write_checked(t.root, base)?;
        return Err(e).context(format!("branch {name:?} was not added"));
    }
    done
}

/// Applies cairn.toml as it is on disk to a running file system.
pub fn reconfigure(root: &Path, fs: &Fs) -> Result<Applied> {
    let path = root.join(CONFIG);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    apply(root, fs, &text, &[])
}

/// Applies cairn.toml as edited by hand. A branch the store uses but the
/// file no longer lists is refused rather than retired: its shards would be
/// unreachable after the next mount, and `branch remove` moves them off.
pub fn reload(root: &Path, fs: &Fs) -> Result<Applied> {
    let path = root.join(CONFIG);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let config = repo::Config::parse(&text).map_err(|e| anyhow::anyhow!("{CONFIG}: {e}"))?;
    let layer = fs.store().layer();
    if let (false, Some(listed)) = (layer.is_plain(), &config.redundancy) {
        let dropped: Vec<String> = layer
            .branch_ids()
            .into_iter()
            .filter_map(|id| layer.branch_name(id))
            .filter(|name| !listed.branches.iter().any(|b| &b.name == name))
            .collect();
        if !dropped.is_empty() {
            bail!(
                "{CONFIG} no longer lists branch(es) {}, which hold data: put them back and \
                 run `cairn branch remove NAME` (or `branch replace`) to move the data off first",
                dropped.join(", ")
            );
        }
    }
    apply(root, fs, &text, &[])
}

/// Retires the branches `config` no longer lists, runs `mover` to move
/// their shards off, and then writes `config` as cairn.toml. When shards
/// could not all be moved, cairn.toml is left as it was and its branches
/// are reinstated.
pub fn move_off(
    root: &Path,
    fs: &Fs,
    config: &str,
    successors: &[(String, String)],
    mover: impl FnOnce() -> Result<MoveOut>,
) -> Result<MoveOut> {
    apply(root, fs, config, successors)?;
    let moved = mover();
    match &moved {
        Ok(out) if out.failed.is_empty() => write_checked(root, config)?,
        _ => {
            if let Err(e) = reconfigure(root, fs) {
                say!("cairn: cannot reinstate the branches of {CONFIG} after a failed move: {e:#}");
            }
        }
    }
    moved
}

/// `cairn policy reload`.
pub fn reload_cmd(root: &Path, quiet: bool) -> Result<ExitCode> {
    let v = ops::run(root, &Request::Reload, quiet)?;
    let applied: Applied = serde_json::from_value(v)?;
    if !quiet {
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
fn report(out: &MoveOut, quiet: bool) -> Result<ExitCode> {
    if !quiet {
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

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn check(text: &str) -> Result<()> {
    repo::Config::parse(text).map_err(|e| anyhow::anyhow!("{CONFIG}: {e}"))?;
    Ok(())
}

/// Replaces cairn.toml with `text` (atomically) and records it as the
/// repository's configuration.
fn write_checked(root: &Path, text: &str) -> Result<()> {
    check(text)?;
    Ok(repo::write_config(root, text)?)
}

/// The configuration without the `[[branch]]` block named `name`; with
/// `successor`, rules and the default rule that named it name the successor
/// instead.
fn without_branch(text: &str, name: &str, successor: Option<&str>) -> Result<String> {
    let mut blocks: Vec<Vec<&str>> = vec![Vec::new()];
    for line in text.lines() {
        if line.trim_start().starts_with('[') {
            blocks.push(Vec::new());
        }
        blocks.last_mut().expect("one block at least").push(line);
    }
    let named = |block: &[&str]| {
        block.first().is_some_and(|l| l.trim() == "[[branch]]")
            && block.iter().any(|l| {
                l.split_once('=').is_some_and(|(k, v)| {
                    k.trim() == "name"
                        && toml::from_str::<toml::Value>(&format!("v = {}", v.trim()))
                            .ok()
                            .and_then(|t| t.get("v").and_then(|v| v.as_str().map(str::to_string)))
                            .as_deref()
                            == Some(name)
                })
            })
    };
    let before = blocks.len();
    blocks.retain(|b| !named(b));
    if blocks.len() == before {
        bail!("no [[branch]] named {name:?} in {CONFIG}");
    }
    let quoted = quote(name);
    let mut out = String::new();
    for line in blocks.concat() {
        let is_list = line.trim_start().starts_with("branches");
        match successor {
            Some(s) if is_list => out += &line.replace(&quoted, &quote(s)),
            _ => out += line,
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[fs]\ncache = \"64MiB\"\n\n[[branch]]\nname = \"a\"\nkind = \"local\"\npath = \"a\"\n\n[[branch]]\nname = \"b\" # old disk\nkind = \"local\"\npath = \"b\"\n\n[[rule]]\npolicy = \"single\"\nbranches = [\"b\"]\n";

    #[test]
    fn a_branch_block_goes_and_rules_follow_its_successor() {
        let out = without_branch(TEXT, "b", Some("a")).unwrap();
        assert!(!out.contains("path = \"b\""), "{out}");
        assert!(out.contains("branches = [\"a\"]"), "{out}");
        assert!(out.contains("cache = \"64MiB\""), "{out}");
        check(&out).unwrap();
        let e = without_branch(TEXT, "zz", None).unwrap_err().to_string();
        assert!(e.contains("zz"), "{e}");
        let dropped = without_branch(TEXT, "b", None).unwrap();
        let e = check(&dropped).unwrap_err().to_string();
        assert!(e.contains("unknown branch or label \"b\""), "{e}");
    }
}

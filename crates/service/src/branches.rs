//! Changing the `[[branch]]` entries of cairn.toml, moving data first
//! where needed (`branch add`, `remove`, `replace`), and applying it as
//! edited by hand (`policy reload`).
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

use std::path::{Path, PathBuf};

use fs::Fs;
use serde::{Deserialize, Serialize};

use crate::error::CONFIG;
use crate::redundancy::MoveOut;
use crate::{Result, ServiceError, Target};

/// Where a new branch keeps its shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewPlace {
    Local(PathBuf),
    S3 {
        endpoint: String,
        bucket: String,
        region: String,
        access_key_id: String,
        secret_access_key: String,
    },
}

/// A branch `branch add` appends to cairn.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBranch {
    pub name: String,
    pub place: NewPlace,
    pub labels: Vec<String>,
}

/// The configuration `text` with a `[[branch]]` block for `branch`
/// appended, checked to parse.
pub fn config_with_branch(text: &str, branch: &NewBranch) -> Result<String> {
    let mut block = format!("\n[[branch]]\nname = {}\n", quote(&branch.name));
    match &branch.place {
        NewPlace::Local(dir) => {
            block += &format!(
                "kind = \"local\"\npath = {}\n",
                quote(&dir.to_string_lossy())
            );
        }
        NewPlace::S3 {
            endpoint,
            bucket,
            region,
            access_key_id,
            secret_access_key,
        } => {
            block += &format!(
                "kind = \"s3\"\nendpoint = {}\nbucket = {}\nregion = {}\naccess_key_id = {}\nsecret_access_key = {}\n",
                quote(endpoint),
                quote(bucket),
                quote(region),
                quote(access_key_id),
                quote(secret_access_key)
            );
        }
    }
    if !branch.labels.is_empty() {
        let labels: Vec<String> = branch.labels.iter().map(|l| quote(l)).collect();
        block += &format!("labels = [{}]\n", labels.join(", "));
    }
    let new = format!("{}{block}", text.trim_end_matches('\n').to_owned() + "\n");
    parse_config(&new)?;
    Ok(new)
}

/// What [`reconfigure`] changed in a running store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    pub added: Vec<String>,
    pub reinstated: Vec<String>,
    pub retired: Vec<String>,
}

/// Makes `fs`'s branches and rules those of `text` (a cairn.toml).
fn apply(root: &Path, fs: &Fs, text: &str, successors: &[(String, String)]) -> Result<Applied> {
    let config = parse_config(text)?;
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
///
/// Without a running file system the branch is checked before the file
/// is written: writing records the branch as holding data, and a recorded
/// branch that does not answer is opened anyway (with a warning), so a
/// bucket that was never reachable would pass the check.
pub(crate) fn add(t: &Target<'_>, name: &str, base: &str, config: &str) -> Result<Applied> {
    let path = t.root.join(CONFIG);
    let now = std::fs::read_to_string(&path).map_err(ServiceError::io("read", &path))?;
    if now != base {
        return Err(ServiceError::ConfigChanged);
    }
    let parsed = parse_config(config)?;
    let not_added = |e: ServiceError| ServiceError::NotAdded {
        name: name.to_string(),
        source: Box::new(e),
    };
    match (t.fs, t.repo) {
        (Some(fs), _) => {
            write_checked(t.root, config)?;
            let done = apply(t.root, fs, config, &[]);
            if let Err(e) = done {
                write_checked(t.root, base)?;
                return Err(not_added(e));
            }
            done
        }
        (None, Some(repo)) => {
            repo.validate(&parsed)
                .map_err(|e| not_added(ServiceError::from(e)))?;
            write_checked(t.root, config)?;
            Ok(Applied {
                added: vec![name.to_string()],
                reinstated: Vec::new(),
                retired: Vec::new(),
            })
        }
        (None, None) => Err(ServiceError::NoRepository),
    }
}

/// Applies cairn.toml as it is on disk to a running file system.
pub(crate) fn reconfigure(root: &Path, fs: &Fs) -> Result<Applied> {
    let path = root.join(CONFIG);
    let text = std::fs::read_to_string(&path).map_err(ServiceError::io("read", &path))?;
    apply(root, fs, &text, &[])
}

/// Applies cairn.toml as edited by hand. A branch the store uses but the
/// file no longer lists is refused rather than retired: its shards would be
/// unreachable after the next mount, and `branch remove` moves them off.
pub(crate) fn reload(root: &Path, fs: &Fs) -> Result<Applied> {
    let path = root.join(CONFIG);
    let text = std::fs::read_to_string(&path).map_err(ServiceError::io("read", &path))?;
    let config = parse_config(&text)?;
    let layer = fs.store().layer();
    if let (false, Some(listed)) = (layer.is_plain(), &config.redundancy) {
        let dropped: Vec<String> = layer
            .branch_ids()
            .into_iter()
            .filter_map(|id| layer.branch_name(id))
            .filter(|name| !listed.branches.iter().any(|b| &b.name == name))
            .collect();
        if !dropped.is_empty() {
            return Err(ServiceError::BranchesLeftOut(dropped));
        }
    }
    apply(root, fs, &text, &[])
}

/// Retires the branches `config` no longer lists, runs `mover` to move
/// their shards off, and then writes `config` as cairn.toml. When shards
/// could not all be moved, cairn.toml is left as it was and its branches
/// are reinstated.
pub(crate) fn move_off(
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
                tracing::error!(error = %e.chain(), "cannot reinstate the branches of {CONFIG} after a failed move");
            }
        }
    }
    moved
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `text` parsed as a cairn.toml.
pub fn parse_config(text: &str) -> Result<repo::Config> {
    repo::Config::parse(text).map_err(ServiceError::BadConfig)
}

/// Replaces cairn.toml with `text` (atomically) and records it as the
/// repository's configuration.
fn write_checked(root: &Path, text: &str) -> Result<()> {
    parse_config(text)?;
    Ok(repo::write_config(root, text)?)
}

/// The configuration without the `[[branch]]` block named `name`; with
/// `successor`, rules and the default rule that named it name the successor
/// instead.
pub fn config_without_branch(text: &str, name: &str, successor: Option<&str>) -> Result<String> {
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
        return Err(ServiceError::NotInConfig(name.to_string()));
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
        let out = config_without_branch(TEXT, "b", Some("a")).unwrap();
        assert!(!out.contains("path = \"b\""), "{out}");
        assert!(out.contains("branches = [\"a\"]"), "{out}");
        assert!(out.contains("cache = \"64MiB\""), "{out}");
        parse_config(&out).unwrap();
        let e = config_without_branch(TEXT, "zz", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("zz"), "{e}");
        let dropped = config_without_branch(TEXT, "b", None).unwrap();
        let e = parse_config(&dropped).unwrap_err().to_string();
        assert!(e.contains("unknown branch or label \"b\""), "{e}");
    }
}

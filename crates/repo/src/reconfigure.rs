//! Applying a changed `[[branch]]` list to a store in use (a mounted file
//! system), so `cairn branch add|remove|replace` take effect at once.
//!
//! Branches newly listed are opened and added to the redundancy layer;
//! branches no longer listed are retired (no new shards go to them; their
//! shards stay readable until moved off); the rules are compiled anew over
//! the result. A branch still listed keeps its open store: a changed path
//! or endpoint takes effect at the next mount.
//!
//! A new branch whose marker says it belongs to another repository, or is
//! another branch of this one, is refused before it is added; once the
//! change is made, new branches are marked and the repository's record
//! learns them (see [`crate::record`]).

use std::path::Path;

use ::fs::rules::Rules;
use cas::{Protection, Store};

use crate::config::Config;
use crate::layout::{compile_rules, open_branch, refused, RepoError};
use crate::record::{self, Record};

/// What [`reconfigure`] changed, and the rules to hand the file system.
pub struct Reconfigured {
    pub rules: Rules,
    pub added: Vec<String>,
    pub reinstated: Vec<String>,
    pub retired: Vec<String>,
}

/// Brings `store`'s branches in line with `config` (parsed from `text`).
/// `successors` pairs a branch leaving with the one taking its place
/// (`branch replace`): writes that still name the old one go to its
/// successor.
///
/// Every new branch is opened and checked before anything changes, so a
/// branch that cannot be reached, or is marked as another repository's,
/// leaves the store as it was.
pub fn reconfigure(
    root: &Path,
    store: &Store,
    config: &Config,
    text: &str,
    successors: &[(String, String)],
) -> Result<Reconfigured, RepoError> {
    let layer = store.layer();
    let (layer, redundancy) = match (layer.is_plain(), &config.redundancy) {
        (true, None) => {
            return Ok(Reconfigured {
                rules: Rules::new(Vec::new(), Protection::plain()),
                added: Vec::new(),
                reinstated: Vec::new(),
                retired: Vec::new(),
            })
        }
        (false, Some(r)) => (layer, r),
        (true, Some(_)) => {
            return Err(refused(
                root,
                "[[branch]] entries were added to a repository opened without them; \
                 converting a plain repository is not supported"
                    .into(),
            ))
        }
        (false, None) => {
            return Err(refused(
                root,
                "no [[branch]] entry is left; a repository with branches keeps at least one".into(),
            ))
        }
    };
    let recorded = Record::load(root)?;
    let mut opened = Vec::new();
    let mut reinstate = Vec::new();
    for spec in &redundancy.branches {
        match layer.branch_id(&spec.name) {
            Some(id) if layer.is_retired(id) => reinstate.push((id, spec.name.clone())),
            Some(_) => {}
            None => {
                let branch = open_branch(root, spec)?.0;
                record::check_added(root, recorded.as_ref(), spec, branch.as_ref())?;
                opened.push((spec.name.clone(), branch));
            }
        }
    }
    let mut out = Reconfigured {
        rules: Rules::new(Vec::new(), Protection::plain()),
        added: Vec::new(),
        reinstated: Vec::new(),
        retired: Vec::new(),
    };
    for (name, branch) in opened {
        if let Some(r) = &recorded {
            record::mark(branch.as_ref(), &name, r.key_check());
        }
        layer
            .add_branch(branch)
            .map_err(|e| refused(root, e.to_string()))?;
        out.added.push(name);
    }
    for (id, name) in reinstate {
        layer.reinstate(id);
        out.reinstated.push(name);
    }
    let rules = compile_rules(root, layer, redundancy)?;
    for id in layer.branch_ids() {
        let name = layer.branch_name(id).expect("an id the layer gave");
        if redundancy.branches.iter().any(|b| b.name == name) {
            continue;
        }
        let successor = successors
            .iter()
            .find(|(old, _)| *old == name)
            .and_then(|(_, new)| layer.branch_id(new));
        layer
            .retire(id, successor)
            .map_err(|e| refused(root, e.to_string()))?;
        out.retired.push(name);
    }
    out.rules = rules;
    // Members are never removed: a branch retired above is still one.
    record::record_reconfigured(root, config, text, &|name| layer.branch_id(name).is_some())?;
    Ok(out)
}

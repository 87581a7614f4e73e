//! What the repository records of its own configuration, so that a
//! damaged or mistaken `cairn.toml` is recognised rather than obeyed.
//!
//! Two records, both written only once a configuration has been found to
//! agree with them:
//! - `meta/repository.toml` ([`Record`]): the key's check value, every
//!   branch (name, location, labels) and the accepted `cairn.toml`
//!   verbatim, rules and comments included, from which `cairn config
//!   recover` writes the file back.
//! - a marker blob `cairn-branch` on each branch, naming the repository (by
//!   its key check value) and the branch, so that a directory or bucket is
//!   recognised as this repository's branch wherever the config points.
//!
//! Both are needed: the record alone cannot tell a branch moved on purpose
//! from a typo, nor see that a directory belongs to another repository;
//! markers alone cannot see a branch that the config stopped naming
//! (nothing points at it any more), nor bring the rules back.
//!
//! A branch's identity is its repository and its name: `branch replace`
//! and `branch remove` never rename one, so a marker stays true for the
//! branch's whole life.

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use branch::{BlobKey, Branch, BranchError, LocalDir};
use cas::RepoKey;
use serde::{Deserialize, Serialize};

use crate::config::{BranchSpec, Config, Location};
use crate::layout::{io, RepoError, CONFIG};

/// The record, relative to the repository root.
pub const RECORD: &str = "meta/repository.toml";
/// The blob naming its branch, on every branch.
pub const MARKER: &str = "cairn-branch";
/// What the key check value is a keyed hash of.
const KEY_CHECK_INPUT: &[u8] = b"cairn key check value, version 1";
const RECORD_HEADER: &str =
    "# Written by cairn: what this repository knows of its branches and its\n\
# cairn.toml. Do not edit. `cairn config recover` writes cairn.toml from it.\n\n";
const MARKER_HEADER: &str = "# This directory or bucket is a branch of a cairn repository.\n\n";

type Result<T> = std::result::Result<T, RepoError>;

/// A keyed BLAKE3 of a fixed string: it tells whether a key is this
/// repository's, and tells nothing of the key.
pub fn key_check(key: &RepoKey) -> String {
    key.chunk_id(KEY_CHECK_INPUT).to_hex()
}

/// The repository's record of itself (`meta/repository.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The key check value ([`key_check`]): also the repository's identity
    /// in branch markers.
    repository: String,
    /// The last accepted cairn.toml, verbatim.
    config: String,
    #[serde(default, rename = "branch")]
    branches: Vec<RecordedBranch>,
}

/// A branch as the record knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedBranch {
    pub name: String,
    /// Where it is: an absolute directory, or `s3 ENDPOINT/BUCKET`.
    pub location: String,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// The content of a branch's marker blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Marker {
    repository: String,
    branch: String,
}

/// One way a `cairn.toml` disagrees with what the repository recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum Disagreement {
    /// The record lists branches; the config lists none.
    NoBranches { recorded: Vec<String> },
    /// A recorded branch (which may hold shards) is no longer configured.
    Missing { branch: String, location: String },
    /// A branch is configured elsewhere than recorded, and nothing there
    /// says it is this branch.
    Moved {
        branch: String,
        recorded: String,
        configured: String,
    },
    /// The configured location is a branch of another repository (or the
    /// key file is not this repository's).
    Foreign { branch: String, location: String },
    /// The configured location is another branch of this repository.
    OtherBranch {
        branch: String,
        location: String,
        marked_as: String,
    },
    /// The configured location holds a marker that cannot be read.
    BadMarker {
        branch: String,
        location: String,
        reason: String,
    },
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Disagreement::NoBranches { recorded } => write!(
                f,
                "it configures no [[branch]], but the repository keeps its data on branches {}",
                recorded.join(", ")
            ),
            Disagreement::Missing { branch, location } => write!(
                f,
                "branch {branch:?} ({location}) is missing from it, but the repository keeps \
                 data on it"
            ),
            Disagreement::Moved {
                branch,
                recorded,
                configured,
            } => write!(
                f,
                "branch {branch:?} is at {recorded}, but it says {configured}, which is not \
                 marked as that branch"
            ),
            Disagreement::Foreign { branch, location } => write!(
                f,
                "branch {branch:?}: {location} belongs to another cairn repository (or the key \
                 file is not this repository's)"
            ),
            Disagreement::OtherBranch {
                branch,
                location,
                marked_as,
            } => write!(
                f,
                "branch {branch:?}: {location} is this repository's branch {marked_as:?}"
            ),
            Disagreement::BadMarker {
                branch,
                location,
                reason,
            } => write!(
                f,
                "branch {branch:?}: the marker {MARKER} at {location} cannot be read ({reason})"
            ),
        }
    }
}

/// The lines of a [`RepoError::Disagrees`] message.
pub(crate) fn list(differences: &[Disagreement]) -> String {
    differences.iter().map(|d| format!("\n  - {d}")).collect()
}

/// Where a configured branch is, as the record writes it.
pub(crate) fn location(root: &Path, spec: &BranchSpec) -> String {
    match &spec.location {
        Location::Local(path) => root.join(path).display().to_string(),
        Location::S3(s) => format!("s3 {}/{}", s.endpoint.trim_end_matches('/'), s.bucket),
        Location::Chunkd(c) => format!("chunkd {}", c.url.trim_end_matches('/')),
    }
}

fn marker_key() -> BlobKey {
    BlobKey::new(MARKER).expect("a valid blob key")
}

impl Record {
    /// The record of `root`, `None` if it has none (a repository last
    /// opened by a cairn that kept none).
    pub fn load(root: &Path) -> Result<Option<Record>> {
        let path = root.join(RECORD);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
        };
        toml::from_str(&text)
            .map(Some)
            .map_err(|e| RepoError::RecordDamaged {
                path,
                reason: e.to_string().trim_end().to_string(),
            })
    }

    /// The record of `config` (whose text is `text`) for the repository
    /// whose key check value is `check`.
    pub(crate) fn of(root: &Path, check: &str, config: &Config, text: &str) -> Record {
        let branches = config
            .redundancy
            .iter()
            .flat_map(|r| &r.branches)
            .map(|spec| RecordedBranch {
                name: spec.name.clone(),
                location: location(root, spec),
                labels: spec.labels.clone(),
            })
            .collect();
        Record {
            repository: check.to_string(),
            config: text.to_string(),
            branches,
        }
    }

    /// `self` with each branch `old` records kept at its recorded
    /// location: a location edited without an open that checks it (a
    /// store in use keeps its open branches) is checked at the next open.
    fn keeping_locations(mut self, old: &Record) -> Record {
        for b in &mut self.branches {
            if let Some(was) = old.branch(&b.name) {
                b.location = was.location.clone();
            }
        }
        self
    }

    pub fn key_check(&self) -> &str {
        &self.repository
    }

    /// The last accepted cairn.toml.
    pub fn config_text(&self) -> &str {
        &self.config
    }

    pub fn branches(&self) -> &[RecordedBranch] {
        &self.branches
    }

    fn branch(&self, name: &str) -> Option<&RecordedBranch> {
        self.branches.iter().find(|b| b.name == name)
    }

    /// Writes the record atomically (readable by its owner only: the
    /// config it holds may hold S3 credentials).
    pub(crate) fn save(&self, root: &Path) -> Result<()> {
        let text = toml::to_string(self).expect("a record is plain data");
        write_atomic(
            &root.join(RECORD),
            (RECORD_HEADER.to_string() + &text).as_bytes(),
        )
    }

    /// Saves `self` unless `old` is the same.
    pub(crate) fn save_if_changed(&self, root: &Path, old: Option<&Record>) -> Result<()> {
        if old == Some(self) {
            return Ok(());
        }
        self.save(root)
    }
}

/// Writes `data` to `path` through a synced temporary file and a rename,
/// so `path` is always whole; owner-only.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{}.new", name.unwrap_or_default()));
    fs::create_dir_all(dir).map_err(io("create directory", dir))?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    f.write_all(data).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("sync", &tmp))?;
    fs::rename(&tmp, path).map_err(io("replace", path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))
}

/// A configured branch, looked at before anything is written to it.
pub(crate) struct Probed {
    pub spec: BranchSpec,
    /// The branch, when looking meant opening it (an S3 bucket: opening
    /// only lists it); local directories are opened later.
    pub opened: Option<std::sync::Arc<dyn Branch>>,
    /// Its marker: none, or what it says, or why it cannot be read.
    marker: std::result::Result<Option<Marker>, MarkerProblem>,
    /// Why a bucket the record holds at this location did not answer: it
    /// is opened all the same (see [`probe`]).
    pub unreachable: Option<String>,
}

impl Probed {
    pub fn has_marker(&self) -> bool {
        matches!(self.marker, Ok(Some(_)))
    }
}

/// Why a branch's marker cannot be read.
#[derive(Debug, thiserror::Error)]
enum MarkerProblem {
    #[error("not text")]
    NotText,
    #[error("{}", .0.to_string().trim_end())]
    Toml(#[from] toml::de::Error),
}

fn parse_marker(data: Option<Vec<u8>>) -> std::result::Result<Option<Marker>, MarkerProblem> {
    let Some(data) = data else {
        return Ok(None);
    };
    let text = String::from_utf8(data).map_err(|_| MarkerProblem::NotText)?;
    Ok(Some(toml::from_str(&text)?))
}

/// Reads `spec`'s marker without writing anything: a local directory is
/// only read (not created, its leftovers not discarded); a bucket is
/// opened, which lists it.
///
/// A bucket `record` holds at this very location that cannot be reached
/// (server down, bucket gone) is opened all the same, with a warning: its
/// shards are then missing to reads, which use the other branches' copies
/// and parity, and `branch replace` can rebuild them elsewhere. Refusing
/// instead would lock the user out of every file, including those the
/// policy protects. A bucket new to the record must answer.
pub(crate) fn probe(root: &Path, record: Option<&Record>, spec: &BranchSpec) -> Result<Probed> {
    let recorded_here = record
        .and_then(|r| r.branch(&spec.name))
        .is_some_and(|b| b.location == location(root, spec));
    let (opened, data, unreachable) = match &spec.location {
        Location::Local(path) => (None, LocalDir::peek(&root.join(path), &marker_key())?, None),
        Location::S3(_) | Location::Chunkd(_) => match crate::layout::open_branch(root, spec) {
            Ok((branch, _)) => {
                let data = read_marker(branch.as_ref())?;
                (Some(branch), data, None)
            }
            Err(RepoError::Branch(
                e @ (BranchError::Unreachable { .. } | BranchError::ChunkdUnreachable { .. }),
            )) if recorded_here => {
                tracing::warn!(
                    branch = %spec.name,
                    error = %e,
                    "a branch holding data cannot be reached; opened without it: reads use \
                     the other branches, writes that need it fail (`cairn branch replace` \
                     rebuilds its shards elsewhere)"
                );
                let branch = crate::layout::open_unreachable(root, spec)?;
                (branch, None, Some(e.to_string()))
            }
            Err(e) => return Err(e),
        },
    };
    Ok(Probed {
        spec: spec.clone(),
        opened,
        marker: parse_marker(data),
        unreachable,
    })
}

fn read_marker(branch: &dyn Branch) -> Result<Option<Vec<u8>>> {
    match branch.get(&marker_key()) {
        Ok(data) => Ok(Some(data)),
        Err(BranchError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What is wrong with configuring `spec` at its location, given what the
/// repository (identified by `check`) recorded and what the location's
/// marker says.
fn judge(
    root: &Path,
    record: Option<&Record>,
    check: &str,
    spec: &BranchSpec,
    marker: &std::result::Result<Option<Marker>, MarkerProblem>,
) -> Option<Disagreement> {
    let branch = spec.name.clone();
    let here = location(root, spec);
    let recorded_here = record
        .and_then(|r| r.branch(&spec.name))
        .is_some_and(|b| b.location == here);
    match marker {
        // The record already ties this location to this branch, so a
        // damaged marker says nothing the record does not; shards there
        // are verified block by block anyway.
        Err(reason) if recorded_here => {
            tracing::warn!(
                branch,
                %reason,
                "the branch's marker is damaged; the record vouches for it"
            );
            None
        }
        Err(reason) => Some(Disagreement::BadMarker {
            branch,
            location: here,
            reason: reason.to_string(),
        }),
        Ok(Some(m)) if m.repository != check => Some(Disagreement::Foreign {
            branch,
            location: here,
        }),
        Ok(Some(m)) if m.branch != spec.name => Some(Disagreement::OtherBranch {
            branch,
            location: here,
            marked_as: m.branch.clone(),
        }),
        Ok(Some(_)) => None,
        // Unmarked: a new branch, or one whose marker was never written;
        // either is fine where the record has it (or does not have it).
        Ok(None) => match record.and_then(|r| r.branch(&spec.name)) {
            Some(b) if b.location != here => Some(Disagreement::Moved {
                branch,
                recorded: b.location.clone(),
                configured: here,
            }),
            _ => None,
        },
    }
}

/// Every way the configured branches (`None`: a plain repository),
/// probed, disagree with `record`.
pub(crate) fn disagreements(
    root: &Path,
    record: Option<&Record>,
    check: &str,
    configured: Option<&[BranchSpec]>,
    probed: &[Probed],
) -> Vec<Disagreement> {
    let mut out = Vec::new();
    let recorded = record.map_or(&[][..], |r| r.branches());
    match configured {
        None if !recorded.is_empty() => out.push(Disagreement::NoBranches {
            recorded: recorded.iter().map(|b| b.name.clone()).collect(),
        }),
        None => {}
        Some(specs) => {
            for b in recorded {
                if !specs.iter().any(|s| s.name == b.name) {
                    out.push(Disagreement::Missing {
                        branch: b.name.clone(),
                        location: b.location.clone(),
                    });
                }
            }
        }
    }
    out.extend(
        probed
            .iter()
            .filter_map(|p| judge(root, record, check, &p.spec, &p.marker)),
    );
    out
}

/// `Err` naming every disagreement, if there is any.
pub(crate) fn refuse(root: &Path, differences: Vec<Disagreement>) -> Result<()> {
    if differences.is_empty() {
        return Ok(());
    }
    Err(RepoError::Disagrees {
        config: root.join(CONFIG),
        differences,
    })
}

/// Checks a branch newly added to a store in use: refused if its marker
/// says it is another repository's or another branch.
pub(crate) fn check_added(
    root: &Path,
    record: Option<&Record>,
    spec: &BranchSpec,
    branch: &dyn Branch,
) -> Result<()> {
    let Some(r) = record else {
        return Ok(());
    };
    let marker = parse_marker(read_marker(branch)?);
    refuse(
        root,
        judge(root, record, r.key_check(), spec, &marker)
            .into_iter()
            .collect(),
    )
}

/// Writes the marker naming `name` of the repository `check` on `branch`.
/// A marker that cannot be written is logged, not fatal: it protects
/// against a wrong config later, and the data is fine without it.
pub(crate) fn mark(branch: &dyn Branch, name: &str, check: &str) {
    let marker = Marker {
        repository: check.to_string(),
        branch: name.to_string(),
    };
    let text = MARKER_HEADER.to_string() + &toml::to_string(&marker).expect("plain data");
    match branch.put(&marker_key(), text.as_bytes()) {
        Ok(()) | Err(BranchError::Exists { .. }) => {}
        Err(e) => tracing::warn!(branch = name, error = %e, "cannot write the branch marker"),
    }
}

/// Writes `text` as cairn.toml and records it, for the supported commands
/// that edit the file (`branch add|remove|replace`); the caller holds the
/// repository's lock and has moved the data off every branch `text` no
/// longer lists.
///
/// Crash-safe in both directions: the record first forgets the branches
/// leaving, then the file is replaced, then the record learns the branches
/// arriving. Cut short anywhere, the next open finds each branch either
/// recorded and configured, or configured and new.
pub fn write_config(root: &Path, text: &str) -> Result<()> {
    let path = root.join(CONFIG);
    let config = Config::parse(text).map_err(|problem| crate::ConfigError::Refused {
        path: path.clone(),
        problem: Box::new(problem),
    })?;
    let old = Record::load(root)?;
    let check = match &old {
        Some(r) => r.key_check().to_string(),
        None => key_check(&crate::keyfile::read(root)?),
    };
    let mut new = Record::of(root, &check, &config, text);
    if let Some(old) = &old {
        new = new.keeping_locations(old);
        let mut leaving = old.clone();
        leaving
            .branches
            .retain(|b| new.branches.iter().any(|n| n.name == b.name));
        leaving.save_if_changed(root, Some(old))?;
    }
    write_atomic(&path, text.as_bytes())?;
    new.save_if_changed(root, old.as_ref())
}

/// Records the branches a store in use now has: `config`'s, and the
/// recorded ones it still holds (`is_member`: retired while their shards
/// move off). The text is recorded only when it lists every recorded
/// branch, so that `config recover` never writes a file that drops one.
pub(crate) fn record_reconfigured(
    root: &Path,
    config: &Config,
    text: &str,
    is_member: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let Some(old) = Record::load(root)? else {
        return Ok(());
    };
    let mut new = Record::of(root, old.key_check(), config, text).keeping_locations(&old);
    let kept: Vec<RecordedBranch> = old
        .branches
        .iter()
        .filter(|b| !new.branches.iter().any(|n| n.name == b.name))
        .filter(|b| is_member(&b.name))
        .cloned()
        .collect();
    if !kept.is_empty() {
        new.config = old.config.clone();
        new.branches.extend(kept);
    }
    new.save_if_changed(root, Some(&old))
}

/// What [`recover_config`] did.
#[derive(Debug)]
pub struct RecoveredConfig {
    pub path: PathBuf,
    /// The branches the written file lists.
    pub branches: Vec<String>,
    /// Where the file it replaced was kept (`--force`).
    pub kept: Option<PathBuf>,
}

/// Writes cairn.toml back from the record. An existing cairn.toml is
/// replaced only with `force`, and kept beside as `cairn.toml.old`.
pub fn recover_config(root: &Path, force: bool) -> Result<RecoveredConfig> {
    let record = Record::load(root)?.ok_or_else(|| RepoError::NoRecord(root.join(RECORD)))?;
    let _lock = crate::lock::RepoLock::acquire(root)?;
    let path = root.join(CONFIG);
    let mut kept = None;
    if path.exists() {
        if !force {
            return Err(RepoError::ConfigExists(path));
        }
        let old = root.join("cairn.toml.old");
        fs::rename(&path, &old).map_err(io("keep the old config as", &old))?;
        kept = Some(old);
    }
    write_atomic(&path, record.config_text().as_bytes())?;
    Ok(RecoveredConfig {
        path,
        branches: record.branches.iter().map(|b| b.name.clone()).collect(),
        kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, path: &str) -> BranchSpec {
        BranchSpec {
            name: name.into(),
            location: Location::Local(path.into()),
            labels: Vec::new(),
        }
    }

    fn probed(spec: BranchSpec, marker: Option<(&str, &str)>) -> Probed {
        Probed {
            spec,
            opened: None,
            marker: Ok(marker.map(|(r, b)| Marker {
                repository: r.into(),
                branch: b.into(),
            })),
            unreachable: None,
        }
    }

    fn record(branches: &[(&str, &str)]) -> Record {
        Record {
            repository: "me".into(),
            config: String::new(),
            branches: branches
                .iter()
                .map(|(n, p)| RecordedBranch {
                    name: n.to_string(),
                    location: Path::new("/r").join(p).display().to_string(),
                    labels: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn each_disagreement_is_found_and_agreement_is_quiet() {
        let root = Path::new("/r");
        let rec = record(&[("a", "a"), ("b", "b")]);
        let r = Some(&rec);
        let specs = [spec("a", "a"), spec("b", "b")];
        let agree = [
            probed(specs[0].clone(), Some(("me", "a"))),
            probed(specs[1].clone(), None),
        ];
        assert!(disagreements(root, r, "me", Some(&specs), &agree).is_empty());

        let plain = disagreements(root, r, "me", None, &[]);
        assert!(
            matches!(&plain[..], [Disagreement::NoBranches { recorded }] if recorded == &["a", "b"])
        );

        let only_a = disagreements(root, r, "me", Some(&specs[..1]), &agree[..1]);
        assert!(matches!(&only_a[..], [Disagreement::Missing { branch, .. }] if branch == "b"));

        let cases = [
            (probed(spec("b", "elsewhere"), None), "is at /r/b"),
            (probed(spec("b", "b"), Some(("you", "b"))), "another cairn"),
            (
                probed(spec("b", "b"), Some(("me", "a"))),
                "this repository's branch \"a\"",
            ),
        ];
        for (p, want) in cases {
            let d = disagreements(root, r, "me", Some(&specs), &[p]);
            assert_eq!(d.len(), 1, "{d:?}");
            assert!(d[0].to_string().contains(want), "{}", d[0]);
        }
        // A branch moved on purpose carries its marker along.
        let moved = [
            probed(spec("a", "a"), None),
            probed(spec("b", "new"), Some(("me", "b"))),
        ];
        let specs = [spec("a", "a"), spec("b", "new")];
        assert!(disagreements(root, r, "me", Some(&specs), &moved).is_empty());
        // New branches and a repository without a record are fine.
        let c = [probed(spec("c", "c"), None)];
        assert!(disagreements(root, None, "me", Some(&[spec("c", "c")]), &c).is_empty());
    }

    #[test]
    fn write_config_records_new_branches_and_keeps_recorded_locations() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        crate::Repo::init(&root).unwrap();
        let one = "[[branch]]\nname = \"a\"\nkind = \"local\"\npath = \"br/a\"\n";
        write_config(&root, one).unwrap();
        let edited = one.replace("br/a", "br/elsewhere")
            + "[[branch]]\nname = \"b\"\nkind = \"local\"\npath = \"br/b\"\n";
        write_config(&root, &edited).unwrap();
        assert_eq!(fs::read_to_string(root.join(CONFIG)).unwrap(), edited);
        let r = Record::load(&root).unwrap().unwrap();
        assert_eq!(r.config_text(), edited);
        let at: Vec<(&str, String)> = r
            .branches()
            .iter()
            .map(|b| (b.name.as_str(), b.location.clone()))
            .collect();
        let loc = |p: &str| root.join(p).display().to_string();
        assert_eq!(at, [("a", loc("br/a")), ("b", loc("br/b"))]);
        // The next open checks the edited location: nothing marks it as a.
        let e = crate::Repo::open(&root).err().unwrap();
        assert!(matches!(e, RepoError::Disagrees { .. }), "{e}");
        write_config(&root, "").unwrap();
        assert!(Record::load(&root).unwrap().unwrap().branches().is_empty());
    }

    #[test]
    fn a_record_survives_its_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::parse(
            "[[branch]]\nname = \"a\"\nkind = \"local\"\npath = \"br/a\"\nlabels = [\"x\"]\n",
        )
        .unwrap();
        let text = "# a comment\n[[branch]]\nname = \"a\"\nkind = \"local\"\npath = \"br/a\"\nlabels = [\"x\"]\n";
        let r = Record::of(dir.path(), "check", &config, text);
        r.save(dir.path()).unwrap();
        let back = Record::load(dir.path()).unwrap().unwrap();
        assert_eq!(back, r);
        assert_eq!(back.config_text(), text);
        assert_eq!(back.branches()[0].labels, ["x"]);
        fs::write(dir.path().join(RECORD), "garbage = [").unwrap();
        assert!(matches!(
            Record::load(dir.path()),
            Err(RepoError::RecordDamaged { .. })
        ));
    }
}

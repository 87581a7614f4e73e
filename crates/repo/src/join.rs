//! Client repositories: a second (third, ...) repository of one file
//! system, for another `cairn mount` of it (see `docs/cluster.md`).
//!
//! A client repository has the first one's key and `cairn.toml` (so the
//! same branches and rules), and its own index, caches, lock and record.
//! Its client number, given at join (or the lowest one not registered)
//! and kept in `meta/client`, puts its container ids in a range no other
//! client uses and its roots under its own prefix on the branches; it is
//! registered on the branches (`clients/<n>/client`), which is how every
//! client knows the file system has more than one (garbage collection then
//! runs across clients: `gc`'s `peers`).
//!
//! The claim is a check then a put that replaces nothing: an S3 branch
//! puts with `If-None-Match: *`, so of two joins claiming one number at
//! once on a store that honours it, one's put fails: it leaves nothing
//! behind, and a join that picks its own number takes the next one. A
//! store that ignores the header (S3Proxy on files) lets both puts
//! succeed, the later replacing the earlier. So the registration carries
//! a claim unique to its join, kept in the repository (`meta/client-claim`),
//! and is read back: by the join after its put, and at every open of the
//! repository after. A repository whose claim is not the one registered
//! lost the race and is refused ([`RepoError::ClientClaimedElsewhere`])
//! before it writes anything: two repositories with one number would each
//! take the other's containers for their own (and collect them as
//! orphans).
//!
//! Only S3 branches can be shared: a local directory is opened by each
//! client as its own (opening it discards the partial blobs another
//! client may be writing), and a relative path would name another
//! directory in each client.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use branch::Branch;
use cas::{CasError, ClientNo};

use crate::config::{Config, Location};
use crate::layout::{io, Repo, RepoError, CONFIG, KEY};
use crate::lock::RepoLock;

/// Where a client repository keeps its client number.
pub(crate) const CLIENT_FILE: &str = "meta/client";
/// Where it keeps the claim its registration carries.
const CLAIM_FILE: &str = "meta/client-claim";
/// How a registration names its claim.
const CLAIM_LINE: &str = "claim ";

/// Most numbers a join that picks its own tries, each lost to another
/// join claiming it at the same moment.
const MAX_PICKS: usize = 16;

/// Why a repository cannot be joined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinProblem {
    #[error("it has no [[branch]] entries: its data is on its own plain branch, which no other client can reach")]
    Plain,
    #[error(
        "its branch {0:?} is a local directory: only S3 buckets and disks served by `cairn chunkd` can be shared by clients \
         (each client would discard the blobs the other is writing there)"
    )]
    LocalBranch(String),
    #[error(
        "client number 0 is the first repository's; give 1 to {}",
        ClientNo::MAX
    )]
    ClientZero,
    #[error("every client number, 1 to {}, is registered already", ClientNo::MAX)]
    NoFreeClient,
}

/// Reads the client number of the repository at `root` (0 when it has
/// none: the first client, or a repository never shared).
pub(crate) fn client_of(root: &Path) -> Result<ClientNo, RepoError> {
    let path = root.join(CLIENT_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<u16>()
            .map(ClientNo::new)
            .map_err(|e| RepoError::Io {
                op: "read the client number in",
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClientNo::default()),
        Err(e) => Err(io("read", &path)(e)),
    }
}

impl Repo {
    /// Makes `root` client repository number `client` of the file system
    /// whose repository is `other` (its key and `cairn.toml` copied; `other`
    /// is only read and may be mounted), and registers the client on the
    /// branches. Without `client`, the lowest number not registered on the
    /// branches is taken (another, up to [`MAX_PICKS`] times, when a join
    /// elsewhere registers it first). Returns the number. Refused, with
    /// nothing written, when `root` is a repository or holds data, or
    /// `other` cannot be shared ([`JoinProblem`]); a client number
    /// registered already is [`cas::CasError::ClientTaken`], and the
    /// half-made repository is removed again (its config first).
    pub fn join(
        root: &Path,
        other: &Path,
        client: Option<ClientNo>,
    ) -> Result<ClientNo, RepoError> {
        if let Some(client) = client {
            return Self::join_as(root, other, client).map(|()| client);
        }
        let (config, _) = shareable(other)?;
        let mut lost = Vec::new();
        for _ in 0..MAX_PICKS {
            let taken = registered(other, &config)?;
            let client = (1..=ClientNo::MAX)
                .map(ClientNo::new)
                .find(|n| !taken.contains(n) && !lost.contains(n))
                .ok_or_else(|| refused_join(other, JoinProblem::NoFreeClient))?;
            match Self::join_as(root, other, client) {
                Err(RepoError::Store(CasError::ClientTaken(_))) => lost.push(client),
                // A branch that refuses to replace a blob fails the put of
                // a number another join registered since the check (or,
                // after an unknown outcome, ours: that number stays unused).
                Err(e @ RepoError::Store(_)) => {
                    if !registered(other, &config).is_ok_and(|taken| taken.contains(&client)) {
                        return Err(e);
                    }
                    lost.push(client);
                }
                done => return done.map(|()| client),
            }
        }
        Err(RepoError::Store(CasError::ClientTaken(
            *lost.last().expect("MAX_PICKS is not 0"),
        )))
    }

    fn join_as(root: &Path, other: &Path, client: ClientNo) -> Result<(), RepoError> {
        if client == ClientNo::default() {
            return Err(refused_join(other, JoinProblem::ClientZero));
        }
        let (config, text) = shareable(other)?;
        let key = crate::keyfile::read(other)?;
        if Self::exists(root) {
            return Err(RepoError::AlreadyExists(root.to_path_buf()));
        }
        if Self::holds_data(root) {
            return Err(RepoError::ConfigMissing(root.to_path_buf()));
        }
        // Read before anything is written: a missing token refuses the join.
        let token = index_token(&config, other)?;
        if let Some(dir) = token
            .as_ref()
            .and_then(|(p, _)| root.join(p).parent().map(Path::to_path_buf))
        {
            fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
        }
        fs::create_dir_all(root.join("meta")).map_err(io("create directory", root))?;
        let claim = new_claim(root);
        {
            let _lock = RepoLock::acquire(root)?;
            if Self::exists(root) {
                return Err(RepoError::AlreadyExists(root.to_path_buf()));
            }
            write_new(&root.join(KEY), &format!("{}\n", key.to_hex()), 0o600)?;
            write_new(&root.join(CLIENT_FILE), &format!("{client}\n"), 0o644)?;
            write_new(&root.join(CLAIM_FILE), &format!("{claim}\n"), 0o644)?;
            if let Some((path, token)) = &token {
                write_new(&root.join(path), token, 0o600)?;
            }
            // Last: its presence is what makes `root` a repository.
            write_new(&root.join(CONFIG), &text, 0o600)?;
            sync_dir(root)?;
        }
        // Opening checks the registration's claim: another's there means
        // the number is taken.
        let opened = Repo::open(root).map_err(|e| match e {
            RepoError::ClientClaimedElsewhere { client, .. } => {
                RepoError::Store(CasError::ClientTaken(client))
            }
            e => e,
        });
        let registered = opened.and_then(|repo| {
            let note = format!(
                "client {client} at {}\n{CLAIM_LINE}{claim}\n",
                root.display()
            );
            repo.store.register_client(&note)?;
            // Another join's put may have replaced ours (a store that
            // ignores If-None-Match): the number is then theirs.
            match registered_claim(&repo.store, client)? {
                Some(c) if c == claim => Ok(()),
                _ => Err(RepoError::Store(CasError::ClientTaken(client))),
            }
        });
        if let Err(e) = registered {
            // Config first: without it, `root` is no repository.
            let _ = fs::remove_file(root.join(CONFIG));
            let _ = fs::remove_file(root.join(KEY));
            let _ = fs::remove_dir_all(root.join("meta"));
            return Err(e);
        }
        Ok(())
    }
}

/// A claim no other join makes: this repository's path, this process and
/// this instant.
fn new_claim(root: &Path) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}@{}:{nanos}", root.display(), std::process::id())
}

/// The claim client `client`'s registration carries: `None` when it is
/// not registered or registered before claims existed (no claim line).
fn registered_claim(store: &cas::Store, client: ClientNo) -> Result<Option<String>, RepoError> {
    let Some(note) = store.client_note(client)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&note);
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(CLAIM_LINE))
        .map(str::to_string))
}

/// Refuses a client repository whose number another repository's join
/// registered over its own (see the module doc). A repository joined
/// before claims existed, or not registered yet (its join is under way),
/// passes.
pub(crate) fn verify_claim(root: &Path, store: &cas::Store) -> Result<(), RepoError> {
    let client = store.client();
    if client == ClientNo::default() {
        return Ok(());
    }
    let path = root.join(CLAIM_FILE);
    let ours = match fs::read_to_string(&path) {
        Ok(text) => text.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("read", &path)(e)),
    };
    match registered_claim(store, client)? {
        Some(theirs) if theirs != ours => {
            tracing::error!(%client, ours, theirs, "this repository's client number is registered to another repository");
            Err(RepoError::ClientClaimedElsewhere {
                client,
                holder: theirs,
            })
        }
        _ => Ok(()),
    }
}

fn refused_join(other: &Path, problem: JoinProblem) -> RepoError {
    RepoError::JoinRefused {
        other: other.to_path_buf(),
        problem,
    }
}

/// The config (and its text) of `other`, a repository whose file system
/// clients may share: its branches are all remote.
fn shareable(other: &Path) -> Result<(Config, String), RepoError> {
    if !Repo::exists(other) {
        return Err(RepoError::NotARepo(other.to_path_buf()));
    }
    let (config, text) = Config::load_with_text(&other.join(CONFIG))?;
    let Some(redundancy) = &config.redundancy else {
        return Err(refused_join(other, JoinProblem::Plain));
    };
    if let Some(local) = redundancy
        .branches
        .iter()
        .find(|b| matches!(b.location, Location::Local(_)))
    {
        return Err(refused_join(
            other,
            JoinProblem::LocalBranch(local.name.clone()),
        ));
    }
    Ok((config, text))
}

/// The client numbers registered on the branches of `config` (a
/// shareable repository's), 0 included. Only the `clients/`
/// registrations are listed, not the containers.
fn registered(other: &Path, config: &Config) -> Result<Vec<ClientNo>, RepoError> {
    let specs = config.redundancy.iter().flat_map(|r| &r.branches);
    let branches = specs
        .map(|spec| crate::layout::open_branch(other, spec).map(|(b, _)| b))
        .collect::<Result<Vec<Arc<dyn Branch>>, _>>()?;
    let layer = redundancy::Redundant::new(branches)
        .map_err(|e| crate::layout::refused(other, e.to_string()))?;
    Ok(cas::registered_clients(&layer)?)
}

/// A `[shared_index]` token file named by a relative path is the first
/// repository's: the client gets its own copy at the same path (so the
/// copied `cairn.toml` names it), and this is that path and the token.
/// An absolute path (or one leaving the repository) is left to the user.
fn index_token(config: &Config, other: &Path) -> Result<Option<(PathBuf, String)>, RepoError> {
    let Some(index) = &config.shared_index else {
        return Ok(None);
    };
    let inside = |c: std::path::Component| matches!(c, std::path::Component::Normal(_));
    if !index.token_file.components().all(inside) {
        return Ok(None);
    }
    let from = other.join(&index.token_file);
    let token = fs::read_to_string(&from).map_err(io("read", &from))?;
    Ok(Some((index.token_file.clone(), token)))
}

/// Writes a new file durably; an existing one is an error.
fn write_new(path: &PathBuf, text: &str, mode: u32) -> Result<(), RepoError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io("create", path))?;
    f.write_all(text.as_bytes()).map_err(io("write", path))?;
    f.sync_all().map_err(io("sync", path))
}

fn sync_dir(dir: &Path) -> Result<(), RepoError> {
    for d in [dir.to_path_buf(), dir.join("meta")] {
        fs::File::open(&d)
            .and_then(|f| f.sync_all())
            .map_err(io("sync", &d))?;
    }
    Ok(())
}

//! Opening a repository in this process, waiting for the lock while
//! another command holds it.

use std::path::Path;
use std::time::{Duration, Instant};

use repo::{IndexSetAside, Repo, RepoError};

use crate::Result;

/// How often a waiting command tries the lock again.
pub(crate) const LOCK_POLL: Duration = Duration::from_millis(50);

/// Runs `open` until it is not turned away by a command holding the lock,
/// or `wait` has passed. A mounted repository is refused at once, with
/// where it is mounted.
fn wait_for_lock<T>(wait: Duration, open: impl Fn() -> Result<T, RepoError>) -> Result<T> {
    let deadline = Instant::now() + wait;
    loop {
        match open() {
            Err(RepoError::Locked {
                holder: Some(h), ..
            }) if h.mountpoint.is_none() && Instant::now() < deadline => {}
            Err(RepoError::Locked { holder: None, .. }) if Instant::now() < deadline => {}
            other => return Ok(other?),
        }
        std::thread::sleep(LOCK_POLL);
    }
}

/// Opens the repository at `root`, waiting up to `wait` for its lock.
pub fn open(root: &Path, wait: Duration) -> Result<Repo> {
    wait_for_lock(wait, || Repo::open(root))
}

/// Creates a repository at `root`, waiting up to `wait` for its lock.
pub fn init(root: &Path, wait: Duration) -> Result<()> {
    wait_for_lock(wait, || Repo::init(root))
}

/// Makes `root` client repository `client` (without one, the lowest
/// number free) of the file system whose repository is `other` (see
/// [`Repo::join`] and `docs/cluster.md`); returns the number.
pub fn join(root: &Path, other: &Path, client: Option<u16>, wait: Duration) -> Result<u16> {
    let client = client.map(cas::ClientNo::new);
    wait_for_lock(wait, || Repo::join(root, other, client)).map(|n| n.get())
}

/// Opens a repository whose index may not match the store: what `check`
/// reports is not refused at open.
pub fn open_to_check(root: &Path, wait: Duration) -> Result<Repo> {
    wait_for_lock(wait, || Repo::open_to_check(root))
}

/// Opens a repository whose index may be unreadable: a damaged index file
/// is moved aside (it is derived data, and only under the repository's
/// lock) so that a fresh one can be rebuilt; what was moved is returned.
pub fn open_for_rebuild(root: &Path, wait: Duration) -> Result<(Repo, Option<IndexSetAside>)> {
    wait_for_lock(wait, || Repo::open_for_rebuild(root))
}

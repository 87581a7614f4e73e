//! Reaching the repository: through the daemon of a mounted file system,
//! or opened by this process. The operations themselves are the `service`
//! crate's; this adds the command line's lock wait, progress bars and
//! messages about what opening the repository found.

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Result;
use repo::Repo;
use service::{Caller, Progress, Reply, Request};

use crate::ui;

/// How long a command waits for the repository's lock (`--lock-wait`).
static LOCK_WAIT: OnceLock<Duration> = OnceLock::new();

pub fn set_lock_wait(wait: Duration) {
    let _ = LOCK_WAIT.set(wait);
}

pub fn lock_wait() -> Duration {
    LOCK_WAIT.get().copied().unwrap_or(Duration::ZERO)
}

/// Runs `req` through the daemon serving `root` if one runs, else on the
/// repository opened here, sending `stream` with a `put` or `get`.
pub fn call(
    root: &Path,
    req: &Request,
    stream: Option<&File>,
    quiet: bool,
    progress: &dyn Progress,
) -> Result<Reply> {
    let on_open = |repo: &Repo| opened(repo, quiet);
    let caller = Caller {
        root,
        lock_wait: lock_wait(),
        opened: &on_open,
        progress,
    };
    Ok(service::call(&caller, req, stream)?)
}

/// [`call`] with progress shown as a bar on stderr.
pub fn run(root: &Path, req: &Request, quiet: bool) -> Result<Reply> {
    let steps = ui::Steps::new(quiet);
    let out = call(root, req, None, quiet, &steps);
    steps.finish();
    out
}

/// Opens the repository in this process. While another command holds its
/// lock this waits for it (up to [`lock_wait`]); a mounted repository is
/// refused at once, with where it is mounted.
pub fn open(root: &Path, quiet: bool) -> Result<Repo> {
    let repo = service::open(root, lock_wait())?;
    opened(&repo, quiet);
    Ok(repo)
}

/// Opens a repository whose index may not match the store, for `check`.
pub fn open_to_check(root: &Path, quiet: bool) -> Result<Repo> {
    let repo = service::open_to_check(root, lock_wait())?;
    opened(&repo, quiet);
    Ok(repo)
}

/// Opens a repository whose index may be unreadable: a damaged index file is
/// moved aside so that a fresh one can be rebuilt, and this says so.
pub fn open_for_rebuild(root: &Path, quiet: bool) -> Result<Repo> {
    let (repo, aside) = service::open_for_rebuild(root, lock_wait())?;
    crate::log::to_repo(&repo.root);
    if let Some(a) = aside {
        say!(
            "cairn: the index could not be opened ({}); moved it to {} and rebuilding",
            a.reason,
            a.aside.display()
        );
    }
    say_discarded(&repo, quiet);
    Ok(repo)
}

/// What every command that opened the repository itself does first: log
/// to it, and say what opening it cleaned up.
fn opened(repo: &Repo, quiet: bool) {
    crate::log::to_repo(&repo.root);
    say_discarded(repo, quiet);
}

pub fn say_discarded(repo: &Repo, quiet: bool) {
    if repo.discarded_partials > 0 && !quiet {
        say!(
            "cairn: discarded {} partial container(s) left by an interrupted write",
            repo.discarded_partials
        );
    }
}

//! The repository lock: one process at a time changes a repository.
//!
//! `REPO/run/lock` is held with an exclusive, non-blocking `flock` for the
//! life of an open [`Repo`](crate::Repo), taken before anything else on disk
//! is touched (no partial cleanup, no index or metadata open, no config
//! write happens without it). The kernel drops the lock when its holder
//! exits, however it exits, so a `kill -9` never leaves a repository locked.
//!
//! The holder says who it is in `REPO/run/holder`, a file only the holder
//! writes (replaced whole by a rename, so a reader never sees half of it),
//! so that a process turned away can name it: its pid, its command line and,
//! once it has mounted the file system, the mount point.
//!
//! A mount's daemon says how its unmount went in `REPO/run/unmount`
//! ([`last_unmount`]): `cairn umount` waits for the lock to go, then reads
//! it, and fails when the daemon could not make everything durable. The
//! file is made at mount time at its full size and later overwritten in
//! place, so that writing the outcome needs no new space on a full disk.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::layout::{io, RepoError};

const RUN: &str = "run";
const LOCK: &str = "lock";
const HOLDER: &str = "holder";
const UNMOUNT: &str = "unmount";
/// The size `run/unmount` is made at; an outcome is cut to fit.
const UNMOUNT_SIZE: usize = 4096;
/// A command line longer than this is cut in the holder record.
const COMMAND_MAX: usize = 200;

/// Who holds a repository's lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// Its command line (cut at a couple of hundred bytes).
    pub command: String,
    /// Where it has the repository's file system mounted, if it does.
    pub mountpoint: Option<PathBuf>,
}

impl Holder {
    fn me(mountpoint: Option<&Path>) -> Holder {
        let args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
        Holder {
            pid: std::process::id(),
            command: shown_command(args),
            mountpoint: mountpoint.map(Path::to_path_buf),
        }
    }
}

/// A command line as the holder record shows it: the program's file name,
/// secrets given as options (`--s3-secret-access-key`) replaced by `***`,
/// cut at [`COMMAND_MAX`] bytes.
fn shown_command(mut args: impl Iterator<Item = String>) -> String {
    let program = args.next().unwrap_or_default();
    let program = Path::new(&program)
        .file_name()
        .map_or(program.clone(), |n| n.to_string_lossy().into_owned());
    let mut shown = vec![program];
    let mut hide_next = false;
    for a in args {
        let secret = a.starts_with("--") && (a.contains("secret") || a.contains("access-key"));
        let hide = std::mem::replace(&mut hide_next, secret && !a.contains('='));
        shown.push(match a.split_once('=') {
            _ if hide => "***".to_string(),
            Some((flag, _)) if secret => format!("{flag}=***"),
            _ => a,
        });
    }
    let mut command = shown.join(" ");
    if command.len() > COMMAND_MAX {
        let mut cut = COMMAND_MAX;
        while !command.is_char_boundary(cut) {
            cut -= 1;
        }
        command.truncate(cut);
        command.push_str(" ...");
    }
    command
}

/// The held lock of one repository; dropping it releases the lock.
#[derive(Debug)]
pub struct RepoLock {
    run: PathBuf,
    /// Declared last: released only after the holder record is gone.
    _lock: Flock<File>,
}

impl RepoLock {
    /// Takes the lock of the repository at `root` without waiting:
    /// [`RepoError::Locked`], naming the holder, if another process has it.
    pub fn acquire(root: &Path) -> Result<RepoLock, RepoError> {
        let run = root.join(RUN);
        fs::create_dir_all(&run).map_err(io("create directory", &run))?;
        let path = run.join(LOCK);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open the lock file", &path))?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(RepoError::Locked {
                    root: root.to_path_buf(),
                    holder: holder_of(root),
                })
            }
            Err((_, e)) => return Err(io("lock", &path)(e.into())),
        };
        let held = RepoLock { run, _lock: lock };
        held.record(&Holder::me(None))?;
        Ok(held)
    }

    /// Records that this process has the file system mounted at
    /// `mountpoint`, so a process turned away can say where.
    pub fn announce_mount(&self, mountpoint: &Path) -> Result<(), RepoError> {
        self.record(&Holder::me(Some(mountpoint)))?;
        let path = self.run.join(UNMOUNT);
        let mut f = File::create(&path).map_err(io("write", &path))?;
        f.write_all(&padded("mounted"))
            .and_then(|()| f.sync_all())
            .map_err(io("write", &path))
    }

    /// Records how the unmount went (`Err`: what could not be made durable),
    /// over the file [`RepoLock::announce_mount`] made, in place.
    pub fn record_unmount(&self, outcome: Result<(), &str>) -> Result<(), RepoError> {
        let path = self.run.join(UNMOUNT);
        let text = match outcome {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("failed: {e}"),
        };
        let mut f = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io("write", &path))?;
        f.write_all(&padded(&text))
            .and_then(|()| f.sync_all())
            .map_err(io("write", &path))
    }

    fn record(&self, holder: &Holder) -> Result<(), RepoError> {
        let path = self.run.join(HOLDER);
        let tmp = self.run.join(format!("{HOLDER}.new"));
        let text = toml::to_string(holder).expect("a holder is plain data");
        let mut f = File::create(&tmp).map_err(io("write", &tmp))?;
        f.write_all(text.as_bytes()).map_err(io("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(io("replace", &path))
    }
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.run.join(HOLDER));
    }
}

/// `text` as the bytes of `run/unmount`: cut to fit (at a character
/// boundary), then padded with newlines.
fn padded(text: &str) -> Vec<u8> {
    let mut end = text.len().min(UNMOUNT_SIZE - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = text.as_bytes()[..end].to_vec();
    out.resize(UNMOUNT_SIZE, b'\n');
    out
}

/// How the last mount of the repository at `root` ended, as its daemon
/// recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmounted {
    /// Everything written was made durable.
    Clean,
    /// What could not be made durable, in the daemon's words.
    Failed(String),
    /// Still mounted, or the daemon ended without saying (killed).
    Unknown,
}

/// [`Unmounted`] for the repository at `root` (`Unknown` when it was never
/// mounted).
pub fn last_unmount(root: &Path) -> Unmounted {
    let Ok(text) = fs::read_to_string(root.join(RUN).join(UNMOUNT)) else {
        return Unmounted::Unknown;
    };
    let text = text.trim_end_matches('\n');
    match text.strip_prefix("failed: ") {
        Some(why) => Unmounted::Failed(why.to_owned()),
        None if text == "ok" => Unmounted::Clean,
        None => Unmounted::Unknown,
    }
}

/// Who holds the lock of the repository at `root`, as its holder recorded
/// it: `None` when no live process is recorded (the lock is free, or its
/// holder has only just taken it and not yet said who it is).
pub fn holder_of(root: &Path) -> Option<Holder> {
    let text = fs::read_to_string(root.join(RUN).join(HOLDER)).ok()?;
    let holder: Holder = toml::from_str(&text).ok()?;
    Path::new("/proc")
        .join(holder.pid.to_string())
        .exists()
        .then_some(holder)
}

/// Whether a process holds the lock of the repository at `root` now (a
/// repository without a lock file is not locked). Takes the lock for an
/// instant to find out, recording nothing.
pub fn is_locked(root: &Path) -> Result<bool, RepoError> {
    let path = root.join(RUN).join(LOCK);
    let file = match OpenOptions::new().read(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io("open the lock file", &path)(e)),
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => Ok(false),
        Err((_, Errno::EWOULDBLOCK)) => Ok(true),
        Err((_, e)) => Err(io("lock", &path)(e.into())),
    }
}

/// What a process turned away by the lock is told.
pub(crate) fn locked_message(root: &Path, holder: &Option<Holder>) -> String {
    let root = root.display();
    match holder {
        Some(Holder {
            pid,
            mountpoint: Some(m),
            ..
        }) => format!(
            "the repository {root} is mounted at {m} by cairn (pid {pid}): this command cannot \
             run while it is mounted; `cairn umount {m}` first",
            m = m.display()
        ),
        Some(Holder { pid, command, .. }) => format!(
            "the repository {root} is in use by `{command}` (pid {pid}); run this again when \
             it has finished"
        ),
        None => format!(
            "the repository {root} is locked by a process that has not yet recorded who it is \
             in {root}/{RUN}/{HOLDER}; run this again in a moment"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unmount_outcome_is_read_back_and_cut_to_fit() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last_unmount(dir.path()), Unmounted::Unknown);
        let run = dir.path().join(RUN);
        fs::create_dir_all(&run).unwrap();
        let lock = RepoLock {
            run: run.clone(),
            _lock: Flock::lock(
                File::create(run.join(LOCK)).unwrap(),
                FlockArg::LockExclusiveNonblock,
            )
            .unwrap(),
        };
        lock.announce_mount(Path::new("/mnt/x")).unwrap();
        assert_eq!(last_unmount(dir.path()), Unmounted::Unknown);
        lock.record_unmount(Err("no space left: 3 files not stored"))
            .unwrap();
        assert_eq!(
            last_unmount(dir.path()),
            Unmounted::Failed("no space left: 3 files not stored".into())
        );
        lock.record_unmount(Ok(())).unwrap();
        assert_eq!(last_unmount(dir.path()), Unmounted::Clean);
        let long = "é".repeat(UNMOUNT_SIZE);
        lock.record_unmount(Err(&long)).unwrap();
        assert_eq!(
            fs::metadata(run.join(UNMOUNT)).unwrap().len(),
            UNMOUNT_SIZE as u64
        );
        assert!(matches!(last_unmount(dir.path()), Unmounted::Failed(_)));
    }

    fn shown(args: &[&str]) -> String {
        shown_command(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn the_record_names_the_command_and_hides_secrets() {
        assert_eq!(
            shown(&["/usr/bin/cairn", "put", "-", "--name", "x"]),
            "cairn put - --name x"
        );
        assert_eq!(
            shown(&[
                "cairn",
                "branch",
                "add",
                "b",
                "--s3-secret-access-key",
                "hunter2",
                "--label",
                "l"
            ]),
            "cairn branch add b --s3-secret-access-key *** --label l"
        );
        assert_eq!(
            shown(&["cairn", "--s3-secret-access-key=hunter2"]),
            "cairn --s3-secret-access-key=***"
        );
        let long = shown(&["cairn", &"é".repeat(300)]);
        assert!(long.len() <= COMMAND_MAX + 4 && long.ends_with(" ..."));
    }

    #[test]
    fn is_locked_while_a_holder_lives_and_leaves_it_free() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_locked(dir.path()).unwrap(), "no lock file yet");
        let held = RepoLock::acquire(dir.path()).unwrap();
        assert!(is_locked(dir.path()).unwrap());
        drop(held);
        assert!(!is_locked(dir.path()).unwrap());
        // Looking took nothing: the lock can be taken after.
        RepoLock::acquire(dir.path()).unwrap();
    }
}

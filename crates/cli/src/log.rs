//! Logging: what cairn tells an operator after the fact.
//!
//! The libraries report through `tracing`; this module decides where it
//! goes. Every process writes to stderr: warnings and errors by default
//! (with `-q` too: a warning is about the system, not a summary), `-v`
//! adds info, `-vv` debug, and `RUST_LOG` (an `EnvFilter` directive, e.g.
//! `RUST_LOG=fs=debug`) replaces that choice. The process that opened the repository itself, and so holds
//! its lock, also appends info and above (or `RUST_LOG`'s choice) to
//! `REPO/log/cairn.log`, rotated at [`LOG_MAX`] with [`LOG_KEEP`] older
//! files kept: a daemon that ran for a month leaves at most 40 MiB of log.
//! A command's failure is logged there at ERROR, a user's mistake it
//! refused at INFO. A command that reaches a mounted file system through
//! its control socket writes no file: the daemon logs what it did.

use parking_lot::Mutex;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use file_rotate::compression::Compression;
use file_rotate::suffix::AppendCount;
use file_rotate::{ContentLimit, FileRotate};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Bytes of one log file before it is rotated.
pub const LOG_MAX: usize = 8 << 20;
/// Rotated log files kept besides the current one.
pub const LOG_KEEP: usize = 4;

/// The repository's log file, once this process holds the repository.
static FILE: OnceLock<Mutex<FileRotate<AppendCount>>> = OnceLock::new();

/// The target of a command's failure as logged: stderr leaves it out, as
/// the command says it there itself.
pub const FAILED: &str = "cairn::failed";

/// Where the log of the repository at `root` is.
pub fn path(root: &Path) -> PathBuf {
    root.join("log").join("cairn.log")
}

/// Installs the subscriber; `verbose` is the number of `-v` flags.
pub fn init(verbose: u8) {
    // s3s logs every S3 error answer (a 404 included) as an error; the
    // gateway logs the answers it gives itself (see `gateway::start`).
    let level = match verbose {
        0 => "warn,s3s=off",
        1 => "info,s3s=off",
        _ => "debug",
    };
    let from_env = std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty());
    let filter = |default: &str| {
        let directive = from_env.as_deref().unwrap_or(default);
        EnvFilter::try_new(directive).unwrap_or_else(|_| EnvFilter::new(default))
    };
    let stderr_filter =
        filter(level).add_directive(format!("{FAILED}=off").parse().expect("a valid directive"));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .with_filter(stderr_filter);
    let file = tracing_subscriber::fmt::layer()
        .with_writer(RepoLog)
        .with_ansi(false)
        .with_filter(filter("info,s3s=off"));
    // Only fails if a subscriber is installed already: then that one logs.
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}

/// Starts appending to the repository's log. Call only while holding the
/// repository: a process refused by its lock must not write there.
pub fn to_repo(root: &Path) {
    let log = path(root);
    if FILE.get().is_some() {
        return;
    }
    if let Some(dir) = log.parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot create the log directory; logging to stderr only");
            return;
        }
    }
    let file = FileRotate::new(
        &log,
        AppendCount::new(LOG_KEEP),
        ContentLimit::BytesSurpassed(LOG_MAX),
        Compression::None,
        None,
    );
    let _ = FILE.set(Mutex::new(file));
}

/// Writes to the repository's log once there is one; until then, nowhere.
struct RepoLog;

impl<'a> MakeWriter<'a> for RepoLog {
    type Writer = RepoLog;

    fn make_writer(&'a self) -> Self::Writer {
        RepoLog
    }
}

impl Write for RepoLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match FILE.get() {
            // A panic while logging must not silence every later line.
            Some(f) => f.lock().write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match FILE.get() {
            Some(f) => f.lock().flush(),
            None => Ok(()),
        }
    }
}

//! The `cairn` command: the user-facing edge of every layer.
//!
//! **Owns:** argument parsing, progress bars, human and JSON output, turning
//! typed errors from the layers below into messages and exit codes, and
//! running the mount in the foreground (`mount`, `serve`), and being
//! mount(8)'s helper when called as `mount.fuse.cairn` (`mount_helper`).
//!
//! **Never:** implements an operation: what a command does is the
//! `service` crate's (the same functions the daemon's control socket runs),
//! or a single call into `repo` (init, key and config records) or `fuse`.
//! While the file system is mounted, commands reach it through the daemon's
//! control socket (`service::control`).
//!
//! **Invariants:** modules do not import each other in a circle: `commands`
//! dispatches to the command groups (`history`, `redundancy`, `branches`,
//! `records`, `mount`, `doctor`, `bench`), which use only `ops` (reaching the
//! repository), `ui` and `args`. Every error a user gets is logged.

/// `say!` that does not panic when stderr cannot be written (a full
/// disk behind a redirect, a closed pipe): a message lost is better than a
/// command that dies after its work is done.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `bail!` for a user's mistake (a path that is not there, flags that do
/// not go together): reported as refused, not as an error of the system
/// (see [`Refused`]).
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::Refused(format!($($arg)*)).into())
    };
}

mod alloc;
mod args;
mod bench;
mod branches;
mod chunkd;
mod cluster;
mod commands;
mod coord;
mod doctor;
mod gateway;
mod history;
mod log;
mod mount;
mod mount_helper;
mod ops;
mod records;
mod redundancy;
mod ui;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    alloc::tune();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = <args::Cli as clap::CommandFactory>::command();
    let subcommands: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
    let helper = mount_helper::called_as_helper(&argv, &subcommands);
    let result = if helper {
        log::init(0);
        mount_helper::run(argv.get(1..).unwrap_or_default())
    } else {
        let args = args::Cli::parse_from(argv);
        log::init(args.verbose);
        commands::run(args)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Logged to the repository's log; stderr gets the message
            // below once. A user's mistake is said plainly and logged as
            // refused: nothing failed.
            if is_refusal(&e) {
                tracing::info!(target: log::FAILED, error = %format!("{e:#}"), "refused");
                say!("cairn: {e}");
            } else {
                tracing::error!(target: log::FAILED, error = %format!("{e:#}"), "command failed");
                say!("cairn: error: {e}");
            }
            // Many errors repeat their source in their own message: print
            // each cause only if nothing printed yet says it already.
            let mut said = vec![e.to_string()];
            let mut source = e.source();
            while let Some(s) = source {
                let text = s.to_string();
                if !said.iter().any(|t| t.contains(&text)) {
                    say!("  caused by: {text}");
                    said.push(text);
                }
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// A command refused as asked: the user's mistake, which changed nothing.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Whether `e` refuses what the user asked rather than reports a failure:
/// the CLI's own [`Refused`], or a service error that is a refusal, the
/// outermost of them judging.
fn is_refusal(e: &anyhow::Error) -> bool {
    e.chain()
        .find_map(|cause| {
            if cause.is::<Refused>() {
                return Some(true);
            }
            cause
                .downcast_ref::<service::ServiceError>()
                .map(service::ServiceError::is_refusal)
        })
        .unwrap_or(false)
}

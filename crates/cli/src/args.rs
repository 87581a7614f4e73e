use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// cairn: a deduplicating, content-addressed store.
///
/// cairn cuts data into content-defined chunks, stores every distinct chunk
/// once (compressed, in containers) and keeps named roots that point at what
/// you stored. Every read is verified against the chunk's keyed BLAKE3 id.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, max_term_width = 100)]
pub struct Cli {
    /// The repository directory [default: $XDG_DATA_HOME/cairn, usually
    /// ~/.local/share/cairn].
    #[arg(long, global = true, env = "CAIRN_REPO", value_name = "DIR")]
    pub repo: Option<PathBuf>,

    /// No progress bars and no summaries on stderr; errors are still shown.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a repository.
    ///
    /// Writes cairn.toml (chunking, compression, container size and memory
    /// budget, each explained), a random per-repository key that keys every
    /// chunk id, an empty fingerprint index and a local branch for containers.
    Init,

    /// Store a file (or standard input) and root it under a label.
    ///
    /// The input is cut into content-defined chunks; chunks the repository
    /// already holds are not stored again. A recipe (a tree of chunk ids) is
    /// stored with the data and the label points at it. The command returns
    /// only when data, recipe and label are durable.
    Put(PutArgs),

    /// Write a stored file to a file or to standard output.
    ///
    /// Every chunk is verified against its id; a damaged chunk stops the read
    /// with an error naming its container and chunk.
    Get(GetArgs),

    /// List the labels (roots) and the size of what each holds.
    Roots {
        /// Print one JSON object per line.
        #[arg(long)]
        json: bool,
    },

    /// Remove a label. Its data stays until garbage collection reclaims it.
    Rm {
        /// The label to remove.
        label: String,
    },

    /// Show what the repository holds and how well it deduplicates.
    ///
    /// logical bytes: the sizes of everything rooted; stored bytes: container
    /// bytes on disk; dedup ratio: logical / stored; index RAM: the compact
    /// fingerprint index's bytes per chunk.
    Stats {
        /// Print a single JSON object.
        #[arg(long)]
        json: bool,
    },

    /// Verify every container, chunk, index entry and root.
    ///
    /// Reads all data. Exits with status 1 when anything is damaged, naming
    /// each damaged container, chunk and affected root.
    Check(CheckArgs),

    /// Repair the repository's derived state.
    Repair {
        /// Rebuild the fingerprint index from the containers alone (keeps
        /// roots). Damaged chunks are left out, so a later put of the same
        /// data stores them afresh.
        #[arg(long, required = true)]
        rebuild_index: bool,
    },

    /// Mount the repository's file system (in the foreground).
    ///
    /// Applications use the mount point like any directory: every file is
    /// chunked, deduplicated and compressed into the repository. Ctrl-C or
    /// SIGTERM (or `cairn umount`) unmounts cleanly after making all written
    /// data durable. Needs /dev/fuse and fusermount3 (Debian package fuse3).
    /// Run as root, the mount is shared with other users (allow_other) and the
    /// kernel checks permissions (default_permissions).
    Mount(MountArgs),

    /// Unmount a cairn file system (fusermount3 -u).
    Umount {
        /// The mount point.
        mountpoint: PathBuf,
    },

    /// The main job: create the repository if needed and mount it.
    ///
    /// Mounts at MOUNTPOINT, by default ~/cairn (created if missing), and
    /// prints where; runs in the foreground until Ctrl-C or SIGTERM.
    Serve {
        /// Where to mount [default: ~/cairn].
        mountpoint: Option<PathBuf>,
    },

    /// Show the built-in tour: store a file twice, read it back, show stats.
    ///
    /// Creates the repository if it does not exist. FILE defaults to the
    /// cairn executable itself.
    Demo {
        /// The file to store.
        file: Option<PathBuf>,
    },

    /// Measurements used by the benchmarks under bench/.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Args, Debug)]
pub struct PutArgs {
    /// The file to store, or - for standard input.
    pub file: PathBuf,
    /// The label to root it under (1-255 bytes).
    #[arg(long, short)]
    pub name: String,
    /// Point an existing label at the new data instead of refusing.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Args, Debug)]
pub struct MountArgs {
    /// The directory to mount on (must exist and be empty).
    pub mountpoint: PathBuf,
    /// Let other users access the mount (default when run as root).
    #[arg(long)]
    pub allow_other: bool,
    /// FUSE worker threads.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// The label to read.
    pub label: String,
    /// Where to write [default: standard output].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// After checking, rebuild what can be rebuilt (the index) and report
    /// what remains lost.
    #[arg(long)]
    pub repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Keyed BLAKE3 over a file's content-defined chunks on every core:
    /// the hashing limit of ingest. Prints {"bytes": N, "seconds": S}.
    Hash {
        /// The file to hash.
        file: PathBuf,
    },
}

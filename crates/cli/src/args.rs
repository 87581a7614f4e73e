use std::net::SocketAddr;
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

    /// Nothing on stderr but errors and warnings: no progress bars,
    /// summaries or hints. What a command exists to print is still printed
    /// on stdout: its report or listing, --json, `get`'s data, a new access
    /// key's secret.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    /// More log lines on stderr: -v for info, -vv for debug (`RUST_LOG`
    /// overrides). The repository's own log is REPO/log/cairn.log.
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// While another command (a `put`, a `gc` ...) holds the repository's
    /// lock, wait up to this many seconds for it before giving up with an
    /// error that names it. A mounted repository is not waited for: commands
    /// that can run while it is mounted go through its daemon, the others
    /// say where it is mounted.
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 30)]
    pub lock_wait: u64,

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
    ///
    /// With --join OTHER: makes a client repository of the file system
    /// whose repository is OTHER, for a second mount of it on this or
    /// another machine (docs/cluster.md). OTHER's key and cairn.toml are
    /// copied (OTHER is only read, and may be mounted); its branches must be
    /// S3 buckets. The new repository has its own index, caches and lock,
    /// and makes containers under its client number (1-65535, unique per
    /// file system), which it registers on the branches: --client N, or
    /// without it the lowest number not registered there yet. Prints
    /// `client N`, the number it got. Then mount both with the same
    /// `--meta etcd://...`. Exit 0 once joined; 1 when refused (OTHER not
    /// shareable, N taken), with nothing left behind. Two joins at the same
    /// moment may pick the same number: on a store that ignores
    /// `If-None-Match` (S3Proxy on files) both may then get it, so join
    /// one client at a time.
    Init {
        /// The repository of the file system to join.
        #[arg(long, value_name = "OTHER")]
        join: Option<std::path::PathBuf>,
        /// This client's number (with --join): 1-65535, unique per file
        /// system [default: the lowest one not registered].
        #[arg(long, value_name = "N", requires = "join", value_parser = clap::value_parser!(u16).range(1..))]
        client: Option<u16>,
    },

    /// Store a file (or standard input) and root it under a label.
    ///
    /// The input is cut into content-defined chunks; chunks the repository
    /// already holds are not stored again. A recipe (a tree of chunk ids) is
    /// stored with the data and the label points at it. The command returns
    /// only when data, recipe and label are durable. While the repository is
    /// mounted, the daemon reads the file (or standard input) directly.
    Put(PutArgs),

    /// Write a stored file to a file or to standard output.
    ///
    /// Every chunk is verified against its id; a damaged chunk stops the read
    /// with an error naming its container and chunk. A version or snapshot
    /// is a tree, not one file: `cairn restore LABEL / --out DIR` writes it
    /// out.
    Get(GetArgs),

    /// List the labels (roots) and the size of what each holds.
    ///
    /// Files stored with `put` first, then snapshots, then the versions the
    /// file system writes on its own (every `fs.version_seconds` when
    /// anything changed, at unmount, and by `cairn version`) in their own
    /// section, oldest first. `get` writes back a stored file; a snapshot
    /// or version is a whole tree: `cairn restore LABEL / --out DIR` writes
    /// it out.
    ///
    /// With --json: one array of {"label", "kind", "root", "bytes", "created",
    /// "error"} in the same order (`[]` when there are none); kind is
    /// "stream", "snapshot" or "version"; created is null for a stored
    /// file; bytes is null for a root that cannot be read, and error then
    /// says why.
    Roots {
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
    },

    /// Remove a label. Its data stays until garbage collection reclaims it.
    Rm {
        /// The label to remove.
        label: String,
    },

    /// Show what the repository holds, what holds its space, and how well
    /// it deduplicates and compresses.
    ///
    /// logical bytes: the sizes of the live files (inline ones included) and
    /// of every stored stream. referenced: what they take before
    /// compression (the distinct chunks they reach, plus every inline
    /// file's bytes: those live in the metadata engine, one copy per file).
    /// dedup ratio: logical / referenced. compression: raw bytes of every
    /// chunk / container bytes on disk. "space held by" splits the chunks'
    /// raw bytes by what holds them, each counted once: live files, stored
    /// streams, snapshots only (`cairn snapshot delete` frees it), versions
    /// only (retention frees it as they age, see `[versions]` in
    /// cairn.toml), snapshots and versions together (their directory
    /// listings included), and the rest (recipe nodes, version records, and
    /// garbage `cairn gc` reclaims). The numbers are the same
    /// mounted or not. Costs a mark pass over everything, like gc's.
    ///
    /// Mounted, it also prints the read caches since the mount (JSON:
    /// `read_cache`): the DRAM cache's bytes, the chunks read from the
    /// store (missed by every cache), and the persistent cache tier's
    /// hits, misses, corrupt entries dropped, contents, and chunks admitted
    /// or skipped under its write budget (`[cache]` in cairn.toml; "off"
    /// when unset). See docs/cache.md.
    ///
    /// Exits 0; 1 if the repository cannot be opened (a damaged or missing
    /// fs.redb while versions exist names `cairn recover`).
    Stats {
        /// Print a single JSON object.
        #[arg(long)]
        json: bool,
    },

    /// Verify every container, chunk, index entry and root.
    ///
    /// Reads all data, going on past anything damaged. Prints one line per
    /// problem (a container that cannot be read, a corrupt chunk, an index
    /// that does not match the containers), one line per file (by path) and
    /// root that loses data and why, then one `summary:` line: `clean`, or
    /// what is damaged and what to run next.
    ///
    /// Exit status: 0 when everything reads back (after the repair, with
    /// --repair); 1 while anything is damaged or any file or root loses
    /// data. Files that lost data stay listed until they are written again,
    /// restored from a snapshot, or deleted; a lost root until `cairn rm`.
    ///
    /// What to run next: `--repair` rebuilds the index and rewrites the
    /// damaged containers it can read (nothing that could come back is
    /// given up); `--drop-lost` also gives up what cannot be read, after
    /// which the store checks clean. On a mounted file system the check runs
    /// in its daemon; repairs need it unmounted.
    Check(CheckArgs),

    /// Repair the repository's derived state.
    ///
    /// Needed when the index cannot be opened or does not match the
    /// containers (an empty or old index.redb: every command that opens
    /// the repository refuses it and names this command). Prints how many
    /// containers and chunks were indexed, and each container or chunk left
    /// out because it is damaged; exits 1 if any was. Then run `cairn
    /// check`: it names the files that damage affects.
    Repair {
        /// Rebuild the fingerprint index from the containers alone (keeps
        /// roots), going on past containers that cannot be read. Damaged
        /// chunks are left out, so a later put of the same data stores them
        /// afresh.
        #[arg(long, required = true)]
        rebuild_index: bool,
        /// Print the report as one JSON document (see docs/operations.md).
        #[arg(long)]
        json: bool,
    },

    /// Mount the repository's file system (in the foreground).
    ///
    /// Applications use the mount point like any directory: every file is
    /// chunked, deduplicated and compressed into the repository. Ctrl-C or
    /// SIGTERM (or `cairn umount`) unmounts cleanly after making all written
    /// data durable. Needs /dev/fuse and fusermount3 (Debian package fuse3).
    /// Run as root, the mount is shared with other users (allow_other) and the
    /// kernel checks permissions (default_permissions).
    ///
    /// The daemon's memory stays within the budgets of cairn.toml: data in
    /// flight (`[memory] budget`), dirty file data (`[fs] total_dirty`), the
    /// chunk cache with read-ahead (`[fs] cache`) and the redb page caches
    /// (`[memory] metadata_cache`, `index_cache`); docs/file-system.md,
    /// "Memory", lists what counts toward which and what does not.
    Mount(MountArgs),

    /// Run the metadata over several etcd clusters: create it, show it,
    /// add a data cluster, move a shard (docs/metadata-on-etcd.md).
    #[command(subcommand)]
    Cluster(crate::cluster::ClusterCommand),

    /// Unmount a cairn file system (fusermount3 -u), or clear a dead one
    /// left by a daemon that was killed.
    ///
    /// Returns once the daemon has made everything written durable and let
    /// go of its repository (the mount's source, `cairn:REPO` in
    /// /proc/mounts and `df`, names it), so the next command finds the
    /// repository free; after a second of waiting it says so. Gives up
    /// after 15 minutes, naming the repository's log.
    Umount {
        /// The mount point.
        mountpoint: PathBuf,
    },

    /// The main job: create the repository if needed, mount it and serve
    /// it over S3.
    ///
    /// Mounts at MOUNTPOINT, by default ~/cairn (created if missing), and
    /// serves the same files over the S3 API at --listen (a bucket is a
    /// directory of the mount, an object a file below it; see
    /// docs/gateway.md). Prints where; the first start also creates an
    /// access key and prints its secret, once, as lines for
    /// ~/.aws/credentials. The same address answers GET /metrics for
    /// Prometheus (docs/metrics.md) and shows a web dashboard at /-/
    /// (capacity and dedup over time, branches, jobs; actions with an
    /// operator's key; docs/dashboard.md). Runs in the foreground until
    /// Ctrl-C or SIGTERM, which stop all of them and make everything
    /// written durable. Exit status 1 if the mount point or the address
    /// cannot be used.
    Serve {
        /// Where to mount [default: ~/cairn].
        mountpoint: Option<PathBuf>,
        /// Mount even if the directory is not empty (see `mount --nonempty`).
        #[arg(long)]
        nonempty: bool,
        /// The file system's metadata in one etcd cluster:
        /// etcd://HOST:PORT[,HOST:PORT...]/FSID (see `cairn mount --help`).
        #[arg(long, value_name = "URL")]
        meta: Option<String>,
        /// The file system's metadata over several etcd clusters, whose
        /// shard map is in the control cluster at URL (see `cairn mount
        /// --help` and `cairn cluster --help`).
        #[arg(long, value_name = "URL", conflicts_with = "meta")]
        cluster: Option<String>,
        #[command(flatten)]
        gateway: GatewayArgs,
    },

    /// Serve the repository over S3 without mounting it (in the
    /// foreground).
    ///
    /// The same gateway as `cairn serve`, for a machine without FUSE. A
    /// repository mounted by another process is refused (stop that one and
    /// use `cairn serve`). Prints the endpoint, and on the first start an
    /// access key and its secret (once). Ctrl-C or SIGTERM stops it after
    /// making everything written durable.
    Gateway {
        #[command(flatten)]
        gateway: GatewayArgs,
    },

    /// Serve a directory to other machines as a branch, and hold part of a
    /// shared fingerprint index.
    ///
    /// `cairn chunkd --dir DIR --listen ADDR --token-file FILE` serves DIR
    /// over HTTP so that repositories elsewhere can name it in cairn.toml
    /// (`kind = "chunkd"`, `url`, `token_file`; see docs/chunkd.md). A put
    /// is answered only once the blob and its directory are synced to
    /// DIR's disk. Every request must carry the secret in FILE (its first
    /// line, at least 16 bytes; never given on the command line): without
    /// it the answer is 401, with a wrong one 403. Bodies over --max-body
    /// are refused (413) before they are read.
    ///
    /// With --etcd and --fsid it also holds the fingerprint-index ranges
    /// the range table in etcd (/FSID/chunkd/ranges) gives to --advertise,
    /// in DIR/.chunkd/index.redb; set the table first with `cairn chunkd
    /// ranges init`.
    ///
    /// Prints `listening on http://ADDR` on stdout once it answers (port 0:
    /// any free port), then runs in the foreground until Ctrl-C or
    /// SIGTERM, which let requests in flight finish. Exit status 1 if the
    /// directory, the token file or the address cannot be used. Every
    /// refused or failed request is logged on stderr.
    #[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
    Chunkd(ChunkdArgs),

    /// Settle the unfinished operations of a file system over several
    /// etcd clusters: the leader-elected coordinator.
    ///
    /// An operation whose keys are in several data clusters (a rename or
    /// hard link across them, a directory made on another cluster than
    /// its parent) is an intent in the control cluster. A client that
    /// dies part-way leaves it unfinished; clients settle those they
    /// meet, and `cairn coord` settles every one: it rolls committed ones
    /// forward and aborts those whose client is gone.
    ///
    /// Run one on a few machines: one leads (its record, under its lease
    /// of --ttl seconds, is `coord/leader` in the control cluster), the
    /// others wait. The leader renews its lease every third of --ttl and
    /// reads the intents every --interval seconds (one request when there
    /// is none). When it stops (Ctrl-C or SIGTERM) it revokes its lease,
    /// and another leads at its next try; when it dies, another leads
    /// once the lease lapses. Leadership only saves duplicate work:
    /// settling is safe from any number of processes at once.
    ///
    /// Logs on stderr when it starts or stops leading, who leads when
    /// that changes, each pass that settled something (how many), and
    /// failures (the 1st, 2nd, 4th, 8th... in a row; passes back off to
    /// at most a minute apart). Runs in the foreground until Ctrl-C or
    /// SIGTERM. Exit status: 0 when stopped; 1 if the file system cannot
    /// be opened.
    ///
    /// What to run next: cairn cluster status --cluster URL shows the
    /// coordinator that leads and the intents still unfinished.
    Coord {
        /// The file system: etcd://CONTROL_HOST:PORT[,...]/FSID.
        #[arg(long, env = "CAIRN_CLUSTER", value_name = "URL")]
        cluster: String,
        /// Seconds between the leader's passes (and the others' tries).
        #[arg(long, value_name = "SECONDS", default_value_t = 2,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        interval: u64,
        /// The leader's lease, in seconds: how long the others wait for a
        /// leader that died.
        #[arg(long, value_name = "SECONDS", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(2..=3600))]
        ttl: u64,
    },

    /// Create, list and revoke the S3 gateway's access keys.
    ///
    /// Keys are kept in the repository (REPO/gateway/keys.toml, readable by
    /// you only) and count at once, also for a gateway already running.
    /// Not `cairn key`, which backs up the repository's encryption key.
    #[command(subcommand, name = "access-key")]
    AccessKey(AccessKeyCommand),

    /// What the S3 gateway lets anyone read.
    ///
    /// Kept with the access keys (REPO/gateway/keys.toml) and counted at
    /// once, also by a gateway already running.
    #[command(subcommand)]
    Bucket(BucketCommand),

    /// Show the built-in tour: store a file twice, read it back, show stats.
    ///
    /// Creates the repository if it does not exist. FILE defaults to the
    /// cairn executable itself.
    Demo {
        /// The file to store.
        file: Option<PathBuf>,
    },

    /// Create, list, compare and delete snapshots of the file system.
    ///
    /// A snapshot is the whole namespace frozen at one instant, stored in the
    /// repository as a Merkle tree (an unchanged directory costs nothing).
    /// Every snapshot is readable at MOUNTPOINT/.snapshots/NAME/ (read-only;
    /// `.snapshots` is hidden from the root's listing but reachable by name).
    /// Works on a mounted file system (through its daemon) and on an
    /// unmounted repository.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),

    /// Bring files or trees back from a snapshot or a version.
    ///
    /// NAME is a snapshot's name, or a label `cairn roots` lists
    /// (snapshot/NAME, or version/N for a version the file system wrote on
    /// its own). PATH is a path inside the file system (/ for everything;
    /// absolute paths under the mount point work too).
    ///
    /// Inside the file system (default, or --to): copies recipes, not data,
    /// so it is instant, and the restored files are independent of the
    /// snapshot. Outside it (--out DIR): writes PATH, under its own name,
    /// into the host directory DIR (the top level of / goes straight into
    /// DIR), with modes, times and hard links (owners too when run as
    /// root; extended attributes stay in the file system). --out is how to
    /// look at an old version with ordinary tools, or to bring files back
    /// without a mount.
    Restore {
        /// The snapshot (NAME or snapshot/NAME) or version (version/N).
        name: String,
        /// What to restore (a file or directory; / for everything).
        path: String,
        /// Where to put it inside the file system [default: PATH itself]:
        /// /a/b, or MOUNTPOINT/a/b while it is mounted.
        #[arg(long, value_name = "DEST")]
        to: Option<String>,
        /// Write it into DIR, a directory outside the file system, instead.
        #[arg(long, value_name = "DIR", conflicts_with = "to")]
        out: Option<PathBuf>,
        /// Replace existing files at the destination (directories are merged)
        /// instead of refusing.
        #[arg(long)]
        overwrite: bool,
        /// Print what was restored as JSON: {"files", "dirs", "bytes"}.
        #[arg(long)]
        json: bool,
    },

    /// Copy a file or tree by copying its recipes, not its data.
    ///
    /// Instant whatever the size; the copy is independent: writing one does
    /// not change the other. Hard links inside the tree stay links.
    Clone {
        /// The file or directory to copy: a path inside the file system
        /// (/a/b, or MOUNTPOINT/a/b while it is mounted).
        src: String,
        /// The new path inside the file system (must not exist; its
        /// directory must). To copy out of the file system, use cp.
        dst: String,
        /// Print what was copied as JSON: {"files", "dirs", "bytes"}.
        #[arg(long)]
        json: bool,
    },

    /// Write a version of the namespace now.
    ///
    /// The file system also does this every `fs.version_seconds` when
    /// anything changed, and at unmount. Versions (roots version/<n>) are
    /// kept as `[versions]` in cairn.toml says: by default the newest one,
    /// every one of the last hour, the newest of each hour for a day and of
    /// each day for a week; the others are dropped when a version is
    /// written and by `cairn gc`, never while the file system is empty.
    /// Snapshots are never dropped. `cairn recover` rebuilds from the
    /// newest. Prints the version written (and the versions dropped).
    Version {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// List the automatic versions and until when each is kept, or drop
    /// them on demand.
    ///
    /// Versions hold what was deleted or overwritten since they were
    /// written: as long as `[versions]` in cairn.toml keeps them (by
    /// default an hour of them, then one an hour for a day and one a day
    /// for a week), `cairn gc` cannot free it. `cairn versions prune`
    /// releases them now. When free space runs low the file system drops
    /// the oldest ones by itself (see [gc] keep_free_percent). Snapshots
    /// are never dropped here (`cairn snapshot delete`).
    #[command(subcommand)]
    Versions(VersionsCommand),

    /// Reclaim the space of data nothing references any more.
    ///
    /// First drops the versions retention no longer keeps (`[versions]` in
    /// cairn.toml), so that data deleted from the file system is freed once
    /// no kept version holds it; `--dry-run` only names them. Then marks
    /// every chunk reachable from roots (versions, snapshots, stored
    /// files) and from the live file system, including data written but not
    /// yet committed, then rewrites containers whose live fraction is under
    /// the threshold, and after them the sparsest others until the garbage
    /// left is at most --max-garbage of what stays stored: their live chunks
    /// are copied forward and the containers deleted. Safe while the file system is mounted and busy: a chunk that
    /// a concurrent write deduplicates against is never lost.
    ///
    /// A container that cannot be read is skipped (printed as `skipped`,
    /// with the files it affects as `LOST`) and everything else is
    /// collected. When a file's recipe sits in such a container, what the
    /// file uses cannot be told from garbage: nothing is reclaimed and gc
    /// exits 1 naming the files; bring the branch back, or run `cairn check
    /// --drop-lost` (or delete the files), then gc again.
    ///
    /// On a file system shared by several client repositories (`init
    /// --join`, docs/cluster.md) the collection runs across clients: every
    /// mounted client hands in what its open files reach and the chunks its
    /// writers deduplicated against meanwhile, and the collector deletes
    /// only containers of its own (run gc on each client to reclaim all).
    /// While it runs, the other clients write no version or snapshot. A
    /// mounted client that does not answer within --peer-wait (down, cut
    /// off, or killed while mounted) ends it with nothing deleted (exit 1,
    /// naming the clients): mount it again, or unmount it cleanly.
    Gc {
        /// Reclaim containers whose live fraction is below this (0..1).
        #[arg(long, default_value_t = service::GC_THRESHOLD)]
        threshold: f64,
        /// The garbage the collection may leave, as a fraction (0..1) of the
        /// bytes that stay stored; 1 turns this off (only --threshold
        /// counts). Lower means a smaller repository and more copying.
        #[arg(long, default_value_t = service::GC_MAX_GARBAGE)]
        max_garbage: f64,
        /// Only report what would be reclaimed.
        #[arg(long)]
        dry_run: bool,
        /// Across clients: seconds to wait for every mounted client's
        /// answer to each phase.
        #[arg(long, default_value_t = service::GC_PEER_WAIT.as_secs(), value_name = "SECS")]
        peer_wait: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Rebuild the file system's metadata from the store alone.
    ///
    /// For a metadata engine that is damaged or was deleted: rebuilds the
    /// fingerprint index from the containers, the roots from their copies on
    /// the branch, and the namespace from the newest version (or the one
    /// named), so the tree is exactly as it was in that version. The old
    /// metadata file is kept beside as fs.redb.damaged. The file system must
    /// not be mounted.
    Recover {
        /// Recover from this version number instead of the newest.
        #[arg(long, value_name = "N", conflicts_with = "snapshot")]
        version: Option<u64>,
        /// Recover from this snapshot instead of a version.
        #[arg(long, value_name = "NAME")]
        snapshot: Option<String>,
        /// Print the report as one JSON document (see docs/operations.md).
        #[arg(long)]
        json: bool,
    },

    /// Measurements used by the benchmarks under bench/.
    #[command(subcommand)]
    Bench(BenchCommand),

    /// Show which redundancy policy protects a file, and where its data is.
    ///
    /// A file's policy comes from its xattr user.cairn.policy (set on it, or
    /// copied from its directory when it was created), else from the first
    /// [[rule]] of cairn.toml that matches its path, extension, size and
    /// owner, else from [default_rule]. Set one with
    /// `setfattr -n user.cairn.policy -v mirror:2 FILE`; a stronger policy
    /// re-stores the file's data in the background. See docs/redundancy.md.
    #[command(subcommand)]
    Policy(PolicyCommand),

    /// Every branch's health, usage and read delay estimate.
    ///
    /// A branch is degraded once a read from it failed (missing, unreadable
    /// or corrupt shard) since the repository was opened; reads then went to
    /// other copies or were rebuilt from parity. A branch is retired while
    /// `branch remove` or `branch replace` moves its shards off (it takes no
    /// new ones; it is listed until it holds none). USED counts shard payload
    /// bytes. DELAY is the latency estimate read balancing uses (a moving
    /// average plus deviation); branches with a higher delay get fewer reads.
    /// Works on a mounted file system (through its daemon) and unmounted.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Read and verify every shard; rewrite each bad one from the others.
    ///
    /// Every shard of every container is read and each 64 KiB block checked
    /// against its digest. Damage is judged per block: a shard with bad
    /// blocks is rebuilt from the good blocks of the others (any copy, or
    /// any K shards good in that block row) and written back whole (to
    /// another branch when its own refuses). Prints one line per container
    /// repaired; "NOT RESTORED" for a container that reads back whole but
    /// whose bad shard could not be written anywhere (bring its branch back
    /// or `cairn branch replace` it, then scrub again); "LOST" for a
    /// container with bytes no read can give back, followed by every file
    /// with data in those bytes ("lost data in file: PATH"). Scrub goes on
    /// past lost containers. Exit status: 0 when every file reads back, 1
    /// when some data is lost. Safe while the file system is mounted and
    /// busy; the verdict is the same mounted or not.
    Scrub {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Add, remove or replace the storage branches of cairn.toml.
    #[command(subcommand)]
    Branch(BranchCommand),

    /// The repository's own record of cairn.toml.
    ///
    /// Whenever a cairn.toml is accepted, the repository records it
    /// (REPO/meta/repository.toml: its branches, their locations and labels,
    /// and the file verbatim) and marks each branch (a blob `cairn-branch`
    /// naming the repository and the branch). A cairn.toml that disagrees
    /// with the record (a branch that holds data missing or moved, no
    /// branches over a repository that has them, a directory or bucket of
    /// another repository) is refused by every command before anything is
    /// written, listing what differs.
    #[command(subcommand)]
    Config(ConfigCommand),

    /// Back up or restore the repository key (REPO/key).
    ///
    /// Every chunk id is keyed with it: without it nothing stored can be read.
    #[command(subcommand)]
    Key(KeyCommand),

    /// Check this machine and the repository for what stops cairn working
    /// or puts data at risk, and say what to do about each.
    ///
    /// Looks, and changes nothing (it takes no lock, so it runs beside a
    /// mount and on a repository no other command can open): /dev/fuse
    /// and the fuse3 package (fusermount3); every cairn mount on the
    /// machine, naming a dead one (its daemon was killed: "Transport
    /// endpoint is not connected"); that the repository exists and this
    /// user can read and write it; that cairn.toml parses and validates
    /// (and whether it was edited since it was last accepted); that the
    /// key is there, is this repository's, is readable by its owner only,
    /// and has been backed up (`cairn key export` ran for it: cairn cannot
    /// see the copy, only that one was made); the S3 gateway's access-key
    /// file's mode; the free space of the metadata's disk and of every
    /// local branch (a problem when it cannot take two more containers, a
    /// warning below --min-free percent; S3 branches are not measured);
    /// the clock (a problem when the repository holds files newer than
    /// now, i.e. the clock went back, or when it is before 2024); and, for
    /// a client with `[shared_index] kind = "chunkd"`, the index's range
    /// table read from etcd and whether each owner answers, asked with the
    /// repository's token file (an owner or etcd not answering is a
    /// warning: dedup is missed, data is safe; each is given 5 s).
    ///
    /// Prints one line per finding: OK, INFO, WARNING or PROBLEM, what was
    /// found, and for the last two the fix ("-> ..."), then the chunkd
    /// index's ranges (start, end, owner, epoch) if there is one. With
    /// --json: one object {"repository", "status", "findings": [{"check",
    /// "severity", "subject", "message", "fix"}], "shared_index": null or
    /// {"fsid", "etcd", "ranges": [{"start", "end", "owner", "epoch"}]}},
    /// severity one of ok, info, warning, problem.
    ///
    /// Exit status: 0 when nothing needs attention (only OK and INFO), 1
    /// when the worst finding is a WARNING, 2 when there is a PROBLEM.
    ///
    /// What to run next: the fix of each PROBLEM, then of each WARNING,
    /// then `cairn doctor` again. It does not read stored data: `cairn
    /// check` verifies that (docs/operations.md).
    Doctor {
        /// Print the report as one JSON document (see docs/operations.md).
        #[arg(long)]
        json: bool,
        /// Warn when a branch's disk has less free space than this
        /// percentage.
        #[arg(long, value_name = "PERCENT", default_value_t = 10.0)]
        min_free: f64,
    },

    /// Print a shell completion script for cairn to standard output.
    ///
    /// bash: `cairn completions bash > /etc/bash_completion.d/cairn` (or
    /// ~/.local/share/bash-completion/completions/cairn); zsh: into a
    /// directory of $fpath as `_cairn`; fish: into
    /// ~/.config/fish/completions/cairn.fish. Exit status 0.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Write cairn's manual pages (roff), made from this very help text.
    ///
    /// Without DIR, prints cairn(1) to standard output (`cairn man | man
    /// -l -`). With DIR, writes cairn.1 and one page per subcommand
    /// (cairn-mount.1, cairn-snapshot-create.1 ...) into DIR, created if
    /// missing, and prints each path written; install with `cairn man
    /// /usr/local/share/man/man1`. Exit status 1 if DIR cannot be written.
    Man {
        /// The directory to write the pages into.
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Write cairn.toml back from the repository's record: the last
    /// accepted file, comments and all.
    ///
    /// For a cairn.toml that was lost, damaged or edited by mistake (which
    /// every command then refuses, naming what differs). An existing
    /// cairn.toml is replaced only with --force, and kept as cairn.toml.old.
    /// Prints the file written and its branches. Exit status 1 when there is
    /// no record (a repository last used by an older cairn) or the
    /// repository is in use (unmount it first). Run `cairn check` next.
    Recover {
        /// Replace an existing cairn.toml (kept as cairn.toml.old).
        #[arg(long)]
        force: bool,
        /// Print what was written as JSON: {"path", "kept", "branches"}.
        #[arg(long)]
        json: bool,
    },
}

/// Where `serve` and `gateway` listen unless told.
const DEFAULT_LISTEN: &str = "127.0.0.1:8333";

/// How `serve` and `gateway` serve S3.
#[derive(Args, Debug, Clone)]
pub struct GatewayArgs {
    /// Where the S3 gateway listens (port 0: any free port, printed).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Largest body of one PUT or one multipart part, in bytes (S3's
    /// 5 GiB by default). A larger Content-Length is refused before the
    /// body is read (EntityTooLarge, nothing stored).
    #[arg(long, value_name = "BYTES", default_value_t = 5 << 30)]
    pub max_put_size: u64,
    /// Largest object completed from parts, in bytes (S3's 5 TiB by
    /// default); a larger CompleteMultipartUpload is refused
    /// (EntityTooLarge; the parts stay until the upload is aborted).
    #[arg(long, value_name = "BYTES", default_value_t = 5 << 40)]
    pub max_object_size: u64,
    /// A PUT's temporary file (.cairn-put.*) or a multipart upload
    /// unchanged for this many seconds (a day by default) is abandoned:
    /// removed when the gateway starts and by a sweep every hour.
    #[arg(long, value_name = "SECONDS", default_value_t = 24 * 3600)]
    pub abandoned_after: u64,
}

#[derive(Subcommand, Debug)]
pub enum BucketCommand {
    /// Let anyone GET and HEAD the bucket's objects without signing (on),
    /// or stop it (off, the default).
    ///
    /// For serving web assets to browsers: `http://ADDR/BUCKET/KEY` then
    /// answers a plain GET. Listing the bucket and every write still need
    /// an access key. A running gateway counts the change from its next
    /// request on. Prints what it did ("bucket NAME is now public-read",
    /// or "was already ..."). Exit status 1 for a name that is not a valid
    /// bucket name. See the list with `cairn bucket list-public`.
    Public {
        /// The bucket (it need not exist yet).
        name: String,
        /// on: anyone may read its objects; off: only access keys.
        #[arg(value_enum)]
        state: Switch,
    },
    /// Print the buckets anyone may read, one a line.
    ListPublic {
        /// Print one JSON array of bucket names (`[]` when none).
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    On,
    Off,
}

#[derive(Subcommand, Debug)]
pub enum AccessKeyCommand {
    /// Create an access key and print it with its secret (shown only this
    /// once) as lines for ~/.aws/credentials.
    ///
    /// The key reaches every bucket unless --bucket names some; it reads
    /// and writes unless --read-only.
    Create {
        /// Only GET and HEAD requests (read objects, list).
        #[arg(long)]
        read_only: bool,
        /// Limit the key to this bucket (repeat for more).
        #[arg(long = "bucket", value_name = "BUCKET")]
        buckets: Vec<String>,
        /// Print the new key as JSON: {"id", "secret", "read_only",
        /// "buckets"}.
        #[arg(long)]
        json: bool,
    },
    /// List the access keys and what each may do (never the secrets).
    ///
    /// With --json: one array of {"id", "read_only", "buckets"} (`[]` when
    /// there are none; an empty buckets array means every bucket).
    List {
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an access key: requests signed with it get 403 from then on.
    /// Exit status 1 if there is no such key.
    Revoke {
        /// The access key id (as `list` shows it).
        id: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Write the repository key to FILE (created, readable by you only), or
    /// to standard output.
    ///
    /// Store the copy away from the repository: anyone holding it and the
    /// data can read everything, and without it nothing can be read. A
    /// key that is missing, damaged or not this repository's is refused.
    Export {
        /// Where to write the key (must not exist) [default: standard
        /// output].
        file: Option<PathBuf>,
    },
    /// Restore a lost or damaged repository key from FILE (written by
    /// `cairn key export`, or a copy of the key file).
    ///
    /// The key is checked against the check value the repository recorded:
    /// a key of another repository is refused and nothing is written. A
    /// damaged or wrong key file it replaces is kept as REPO/key.damaged. Exit
    /// status 1 when the key is refused.
    Import {
        /// The key backup.
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Which rule or xattr applies to PATH, and on which branches each shard
    /// of each of its containers lives (LOST: no branch holds it).
    Show {
        /// A file inside the file system (absolute paths under the mount
        /// point work too).
        path: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Apply cairn.toml after editing it by hand: its rules, and any
    /// [[branch]] entries added, take effect in the running file system at
    /// once (or are checked, when nothing is mounted).
    ///
    /// New files follow the new rules; files already stored keep their
    /// data where it is (set `user.cairn.policy` on a file to move it). A
    /// branch left out of cairn.toml while it still holds data is refused:
    /// use `cairn branch remove` or `cairn branch replace` for that.
    Reload {
        /// Print what was applied as JSON: {"added", "reinstated"}, each
        /// an array of branch names.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum BranchCommand {
    /// Add a branch: a local directory (--path) or an S3 bucket
    /// (--s3-endpoint and --s3-bucket).
    ///
    /// Appends a [[branch]] entry to cairn.toml after checking the branch
    /// can be opened (a bucket must exist and accept the credentials). Rules
    /// use it once they name it or one of its labels (or name no branches).
    /// A mounted file system opens it and stores on it at once.
    Add {
        /// 1-64 characters of [A-Za-z0-9._-].
        name: String,
        /// The directory (created if missing; relative to the repository).
        #[arg(long, value_name = "DIR", conflicts_with = "s3_endpoint")]
        path: Option<PathBuf>,
        /// Base URL of the S3 API, e.g. https://s3.eu-west-1.amazonaws.com.
        #[arg(long, value_name = "URL", requires = "s3_bucket")]
        s3_endpoint: Option<String>,
        #[arg(long, value_name = "BUCKET")]
        s3_bucket: Option<String>,
        #[arg(long, value_name = "REGION", default_value = "us-east-1")]
        s3_region: String,
        #[arg(long, value_name = "KEY")]
        s3_access_key_id: Option<String>,
        #[arg(long, value_name = "SECRET")]
        s3_secret_access_key: Option<String>,
        /// A label rules can name instead of the branch (repeatable).
        #[arg(long)]
        label: Vec<String>,
    },
    /// Move every shard off a branch, then remove it from cairn.toml.
    ///
    /// With --json: {"rebuilt", "already_present", "failed", "lost",
    /// "lost_files"} on standard output.
    ///
    /// Each shard goes to another branch holding no shard of the same
    /// container, spread over all of them. Refused, before anything moves,
    /// when a rule names the branch or would be left with too few branches
    /// for its policy. On a mounted file system the branch takes no new
    /// shards from the start; cairn.toml changes only once every shard has
    /// moved. The directory or bucket itself is left untouched.
    Remove {
        /// The branch to empty and drop.
        name: String,
        /// Print the report as one JSON document (see docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// Rebuild every shard of OLD onto NEW, then drop OLD from cairn.toml.
    ///
    /// NEW must already be a configured branch (`cairn branch add`). Shards
    /// are read from OLD while it still answers, else rebuilt from the other
    /// copies or parity. Interrupted (even by kill -9), run it again: shards
    /// already on NEW are verified and skipped. A container already holding
    /// another shard on NEW gets this one on a third branch. Rules naming
    /// OLD name NEW afterwards. On a mounted file system new shards go to
    /// NEW instead of OLD from the start.
    ///
    /// A container lost beyond its policy (too few good blocks left in some
    /// block row) does not stop it: everything else is rebuilt, cairn.toml
    /// is changed, and the lost containers are listed ("LOST ...") with the
    /// files that have data in them; the exit status is then 1. Shards that
    /// could not be written leave cairn.toml unchanged and fail the command:
    /// fix the cause and run it again.
    Replace {
        /// The branch being retired (it may be gone already).
        old: String,
        /// The configured branch that takes over OLD's shards.
        new: String,
        /// Print the report as JSON (as `branch remove --json`).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum VersionsCommand {
    /// The versions, oldest first: creation time, files, logical size and
    /// until when `[versions]` keeps each (if no newer version is written
    /// in its hour or day).
    List {
        /// Print JSON: an array of {"label", "number", "created", "files",
        /// "dirs", "logical_bytes", "kept_until"} (`created` and
        /// `kept_until` in seconds since the epoch; `kept_until` null for
        /// one kept as one of the newest).
        #[arg(long)]
        json: bool,
    },
    /// Drop every version but the newest (or the newest --keep N), now,
    /// whatever `[versions]` says; `cairn gc` (or the file system by
    /// itself) then frees what only they held.
    Prune {
        /// How many of the newest versions stay (at least 1: `cairn
        /// recover` rebuilds from the newest).
        #[arg(long, default_value_t = 1, value_name = "N")]
        keep: u64,
        /// Only name the versions that would be dropped.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON: {"dropped": [labels], "kept": N}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Snapshot the file system as it is now (all data written before the
    /// command is included).
    Create {
        /// 1-200 bytes, no '/'.
        name: String,
        /// Print the report as one JSON document (see docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// List snapshots: creation time, files, logical size and the bytes
    /// unique to each (what deleting it alone would let gc free).
    List {
        /// Print JSON: an array of {"name", "created", "files", "dirs",
        /// "logical_bytes", "unique_bytes"} (`[]` when there are none).
        #[arg(long)]
        json: bool,
    },
    /// Delete a snapshot (its data is reclaimed by the next gc).
    Delete { name: String },
    /// Paths added (+), removed (-) and changed (M) from snapshot A to B.
    Diff {
        a: String,
        b: String,
        /// Print JSON: an array of {"path", "kind"}, kind one of added,
        /// removed, changed (`[]` when nothing changed).
        #[arg(long)]
        json: bool,
    },
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
    /// Print what was stored as JSON: {"len", "chunks", "new_chunks",
    /// "new_bytes", "stored_bytes"}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// The directory to mount on (must exist and be empty, and not be a
    /// mount point itself). A dead cairn mount left there by a daemon that
    /// was killed is cleared first.
    pub mountpoint: PathBuf,
    /// Mount even if the directory is not empty or is itself a mount
    /// point (its contents are hidden while mounted). Never on top of a
    /// live cairn mount.
    #[arg(long)]
    pub nonempty: bool,
    /// Let other users access the mount (default when run as root).
    #[arg(long)]
    pub allow_other: bool,
    /// FUSE worker threads.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Mount read-only: every write, create, rename, removal and attribute
    /// change gets EROFS ("Read-only file system"), and commands that
    /// would change the repository (put, snapshot create, gc ...) are
    /// refused while it is mounted; nothing in the repository changes.
    #[arg(long, short = 'r')]
    pub read_only: bool,
    /// Serve the daemon's figures for Prometheus at http://ADDR/metrics
    /// (port 0: any free port; the address is printed and logged): the
    /// mount's requests and bytes, the store, the caches, the branches'
    /// I/O, commands and jobs, as docs/metrics.md lists. Only an unsigned
    /// GET /metrics is answered; anything else is 404. Figures hold no
    /// names, keys or secrets; listen on 127.0.0.1 unless a scraper
    /// elsewhere needs them. `cairn serve` answers /metrics on its own
    /// port already.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Mount options as mount(8) takes them, comma-separated: ro, rw,
    /// allow_other, nonempty, threads=N, metrics=ADDR; the generic ones (defaults, dev,
    /// nodev, suid, nosuid, exec, noexec, atime, noatime, relatime,
    /// strictatime, auto, noauto, user, nouser, _netdev, nofail,
    /// comment=..., x-...) are accepted and ignored. Anything else is
    /// refused. fstab and `mount -t fuse.cairn REPO DIR -o OPTS` work with
    /// cairn on the system's PATH (or linked as /sbin/mount.fuse.cairn):
    /// see docs/operations.md.
    #[arg(short = 'o', long = "options", value_name = "OPTS")]
    pub options: Vec<String>,
    /// Keep the file system's metadata (names, directories, attributes,
    /// extended attributes) in an etcd cluster instead of the repository:
    /// etcd://HOST:PORT/FSID, or etcd://H1:P1,H2:P2,H3:P3/FSID for a
    /// cluster of several members; FSID (letters, digits, - and _) names
    /// the file system in the cluster, which may hold many. File data stays
    /// in the repository. The first such mount records the URL in the
    /// repository (meta/remote); from then on the repository mounts only
    /// with the same --meta, and commands that open the file system
    /// themselves (gc, check, recover while unmounted) are refused: run
    /// them while it is mounted. An unreachable etcd makes operations fail
    /// with EIO after 30 s, never hang. See docs/metadata-on-etcd.md.
    #[arg(long, value_name = "URL")]
    pub meta: Option<String>,
    /// Keep the file system's metadata over several etcd clusters: the
    /// control cluster at etcd://HOST:PORT[,HOST:PORT...]/FSID holds the
    /// shard map that `cairn cluster init` made. As with --meta, file data
    /// stays in the repository, which records the URL (as cluster:URL) and
    /// from then on mounts only with the same --cluster. See `cairn
    /// cluster --help` and docs/metadata-on-etcd.md.
    #[arg(long, value_name = "URL", conflicts_with = "meta")]
    pub cluster: Option<String>,
    /// Return once the file system is mounted and answering; the daemon
    /// goes on in the background (its own process group, so it outlives
    /// the shell) and logs to REPO/log/cairn.log. `cairn umount DIR` ends
    /// it cleanly. If the daemon ends before mounting, this fails with its
    /// message and exit status 1.
    #[arg(long)]
    pub background: bool,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// The label to read.
    pub label: String,
    /// Where to write [default: standard output]. An existing file is
    /// refused unless --force is given.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Overwrite FILE if it exists.
    #[arg(long, requires = "output")]
    pub force: bool,
    /// Print what was read as JSON on standard output: {"bytes",
    /// "closed"} (needs --output: standard output carries the data
    /// otherwise).
    #[arg(long, requires = "output")]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// When damage is found, rebuild the fingerprint index from the
    /// containers (only chunks that verify are indexed, so writing their
    /// data again stores a good copy), rewrite each damaged container that
    /// could be read (a corrupt footer, corrupt chunks) with the chunks of
    /// it that verify, check again, and say what is still lost. A container
    /// that could not be read at all is left as it is (its branch may come
    /// back): `--drop-lost` gives it up.
    #[arg(long)]
    pub repair: bool,
    /// `--repair`, then give up damaged containers for good: chunks in
    /// them that still verify are copied out, the containers (and any
    /// shards of them left on any branch) are deleted. Files that used
    /// what was lost stay listed by path until they are written again or
    /// deleted. Bring back any branch that is only unreachable first.
    #[arg(long)]
    pub drop_lost: bool,
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
    /// The redundancy layer over local-directory branches, in one table:
    /// durable writes and cold reads under single, mirror:2, parity:4,
    /// rs:4+2 and rs:8+3; reads with one and two branches gone; rebuilding
    /// a lost branch onto a fresh one (what `branch replace` does); and a
    /// mirror:2 with one branch twice as slow, with and without
    /// latency-aware balancing. Each target is marked MET or NOT MET.
    ///
    /// Run it as root: reads then start from a dropped page cache, else
    /// they are flagged WARM. Exits 2 if data read back differs from what
    /// was written.
    Redundancy(RedundancyBenchArgs),
    /// The file system through the mount against the raw store (`put`/
    /// `get`), a bindfs passthrough mount and a plain directory: a 4 GiB
    /// file written and read, a second copy, Postmark, 20,000 small files
    /// created and read cold, the daemon's peak RSS. Runs bench/fs.py
    /// (built in) with this binary; every argument is passed on (see
    /// `cairn bench fs -- --help`). Run it as root.
    Fs(ScriptArgs),
    /// Ingest and restore against restic and borg on the same data: runs
    /// bench/ingest.py (built in) with this binary; arguments are passed on.
    Ingest(ScriptArgs),
    /// Garbage collection against restic's forget + prune, and the cost of
    /// a version: runs bench/gc.py (built in) with this binary; arguments
    /// are passed on.
    Gc(ScriptArgs),
    /// Random I/O on a big file (VM images, databases) with fio: the cairn
    /// mount against a plain directory and bindfs on the same disk.
    ///
    /// Runs bench/random_io.py (built in) with this binary; every argument
    /// is passed on (`cairn bench random -- --help` lists them: --size,
    /// --runtime, --cairn-config, --workdir, --json OUT, --keep,
    /// --step-timeout). Needs root (it mounts, and drops the page cache for
    /// cold reads), /dev/fuse, python3, and fio and bindfs (installed with
    /// apt-get when missing).
    ///
    /// Each target (a plain directory, bindfs over one, cairn over a fresh
    /// repository) runs twice, with unique data (fio refill_buffers) and
    /// with half of the written blocks repeated (dedupe_percentage=50): an
    /// image of --size (default 4 GiB) written sequentially; then, --runtime
    /// seconds each (default 30), 4 KiB random reads cold (caches dropped,
    /// cairn remounted) and warm, 64 KiB random reads, 4 KiB random reads
    /// while a sequential reader streams a second file, 4 KiB random
    /// writes, a 70/30 read/write mix, 64 KiB random writes and a
    /// database-like job (16 KiB, fsync every 32 writes). fio uses psync,
    /// buffered I/O.
    ///
    /// Prints tables to stdout (progress to stderr): IOPS and MB/s per job
    /// and target with the cairn/bindfs and cairn/ext4 ratios; the drop of
    /// random-read IOPS under the sequential reader; bytes the repository
    /// grew per byte written, and its size after `cairn gc` per logical
    /// byte; the daemon's peak RSS against the budgets in its cairn.toml;
    /// and a Targets table (every IOPS >= bindfs, growth <= 1.5x written
    /// before gc and <= 1.1x logical after, drop <= 20%, RSS within
    /// budget), each MET or NOT MET.
    ///
    /// `--cairn-config [LABEL:]SECTION.NAME=VALUE` (repeatable) edits each
    /// fresh repository's cairn.toml before mounting; a LABEL adds a column
    /// cairn[LABEL] with those settings, so one run compares settings. The
    /// benchmark sets fs.version_seconds = 0 (so gc can free overwritten
    /// data); the report prints each cairn column's settings.
    ///
    /// Exit status: 0 when it ran (also with targets NOT MET), 1 when fio,
    /// a mount or cairn failed (its stderr is printed; every mount is
    /// unmounted), 2 when a job moved no data. Next: compare with the
    /// baseline table in bench/README.md.
    Random(ScriptArgs),
    /// What ordinary programs leave in the store: the bytes the repository
    /// grows per byte written, before any gc, for sequential writers of
    /// every size and pace (head -c, dd bs=4k, 4 KiB every millisecond,
    /// 512 B every half-millisecond), fio 4 KiB random writes with an fsync
    /// every 32 on a file with no known extension, and sqlite (3,000
    /// autocommit inserts); time or IOPS beside it. Side by side with a
    /// plain directory and bindfs, under `cairn mount` and `cairn serve`,
    /// idle and with CPU and disk hogs running ("loaded"), with a Targets
    /// table (growth <= 1.1x sequential, <= 1.5x random, sqlite <= 2x the
    /// plain directory's time and <= 3x the database's size; IOPS >= 1.0x
    /// bindfs and >= 0.3x plain), each MET or NOT MET.
    ///
    /// Runs bench/writes.py (built in) with this binary; every argument is
    /// passed on (`cairn bench writes -- --help`: --conditions, --targets,
    /// --workloads, --runtime, --json OUT, --keep). Needs root, /dev/fuse,
    /// python3, fio and bindfs (installed with apt-get when missing).
    /// Exit status: 0 when it ran (also with targets NOT MET), 1 when a step
    /// failed.
    Writes(ScriptArgs),
    /// The S3 gateway on many small objects and on large ones, against nginx
    /// (bench/gateway.py; needs root).
    ///
    /// Puts a deep file set (100 entries per directory, depth 4 to 6) of
    /// 4-20 KiB objects through `cairn serve` with parallel clients (PUT/s),
    /// writes the same files into a plain ext4 directory, then GETs them,
    /// uniform and Zipf, cold (page cache dropped, cairn restarted) and warm,
    /// from the gateway, from nginx on the ext4 directory and from nginx on
    /// cairn's FUSE mount (the directory-walk path): GET/s, MB/s, p50 and p99
    /// latency. Counts the metadata and branch reads per cold GET (exact
    /// counters of the daemon, `cairn stats --counters`), and times a large
    /// object's PUT and GET against `cairn put` and `cairn get`. Prints the
    /// issue's targets MET or NOT MET.
    ///
    /// Options (after `--`): --objects N (default 1,000,000: hours; 20000
    /// takes minutes), --gets N per run, --clients N, --zipf-theta T,
    /// --large-size SIZE, --scratch DIR, --json FILE, --keep.
    ///
    /// Exit status: 0 when it ran (also with targets NOT MET), 1 when a
    /// command or request failed or an object came back with other bytes.
    Gateway(ScriptArgs),
    /// Metadata operations through the mount: redb against etcd.
    ///
    /// Runs `bench/cluster.py`: creates, stats (after a remount), readdirs,
    /// renames in a directory and across directories, by several worker
    /// processes at once, on ext4, on a mount with the embedded redb engine,
    /// and with `--meta etcd://` on one etcd cluster of one and of three
    /// members started on loopback (etcd-server is installed with apt-get
    /// when missing). Prints ops/s per phase and the ratio to the redb
    /// mount; every name is checked at the end. Then two clients on one
    /// file system (bytes a duplicate costs, two writers at once), and the
    /// scaling simulation: the requests `bench cluster-trace` records,
    /// replayed on m machines (RFS placement, clusters of 1 and 3 members,
    /// service times calibrated from the etcd runs), against the issue's
    /// targets (reads >= 0.8 m, writes >= 0.8 m / n).
    ///
    /// Options (after `--`): --files N (default 4000), --workers N (default
    /// 4), --listings N, --workdir DIR, --json FILE, --skip-two-clients,
    /// --skip-scaling, --scaling-machines 1,2,4,8,16, --scaling-only
    /// --service-ms READ,LEAD,FOLLOW (the simulation alone).
    ///
    /// Exit status: 0 when it ran, 1 when a command failed or a name was
    /// wrong.
    Cluster(ScriptArgs),
    /// The etcd requests each metadata operation makes, for the cluster
    /// benchmark's scaling simulation: a file system sharded over
    /// --clusters simulated etcd clusters (in memory; the engine's code is
    /// the one a mount runs), a workload of mkdir, create, stat (a lookup),
    /// readdir with attributes, and renames within and across directories.
    /// Prints one JSON object to stdout: for each phase, each operation's
    /// requests in order as [cluster, kind] (cluster -1 is the control
    /// cluster; kind "range", "read-txn" (a transaction of reads only),
    /// "txn", "grant" or "revoke").
    /// `bench/cluster.py` replays them on a model of m machines.
    ClusterTrace(ClusterTraceArgs),
}

/// What `cairn bench cluster-trace` runs.
#[derive(Args, Debug)]
pub struct ClusterTraceArgs {
    /// Data clusters the namespace is sharded over (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clusters: u32,
    /// Virtual shards.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub shards: u32,
    /// Directories made under the root (each a traced mkdir).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub dirs: u32,
    /// Files created over the directories (each a traced create, stat and
    /// rename).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub files: u32,
}

/// Arguments passed on to a bench/ script.
#[derive(Args, Debug)]
pub struct ScriptArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RedundancyBenchArgs {
    /// Random data stored under each policy, in MiB.
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pub mib: u64,
    /// Container size in MiB (cairn's containers are 4 MiB).
    #[arg(long, default_value_t = 4, value_name = "MIB")]
    pub container_mib: u64,
    /// Containers written or read at once, as the store keeps several in
    /// flight.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub in_flight: usize,
    /// Rounds of the healthy writes and reads, the end-to-end puts and the
    /// slow-mirror reads, each reported as its median (the degraded reads
    /// and the rebuild are one pass each).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub rounds: usize,
    /// Seed of the random data (the same seed gives the same bytes).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A fresh scratch directory for the branches is made inside DIR.
    #[arg(long, default_value = "/var/tmp", value_name = "DIR")]
    pub dir: PathBuf,
    /// Keep the scratch directory instead of removing it at the end.
    #[arg(long)]
    pub keep: bool,
    /// Also write the results as JSON to OUT.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

/// `cairn chunkd`: serve, or manage the range table.
#[derive(Args, Debug)]
pub struct ChunkdArgs {
    /// The directory served as a branch (created if missing).
    #[arg(long, value_name = "DIR", required = true)]
    pub dir: Option<PathBuf>,
    /// Where to listen, e.g. 0.0.0.0:7878 (port 0: any free port, printed).
    #[arg(long, value_name = "ADDR", required = true)]
    pub listen: Option<SocketAddr>,
    /// The file holding the shared secret (first line, at least 16 bytes).
    /// Keep it readable by the server's user only.
    #[arg(long, value_name = "FILE", required = true)]
    pub token_file: Option<PathBuf>,
    /// Largest request body accepted (a container is a few MiB).
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20)]
    pub max_body: u64,
    #[command(flatten)]
    pub cluster: ChunkdCluster,
    /// This chunkd's URL as the range table names it [default:
    /// http://ADDR of --listen; needed when that is port 0 or 0.0.0.0].
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,
    /// How often the range table is read again from etcd (it is also read
    /// at once when a client names a newer epoch).
    #[arg(long, value_name = "SECONDS", default_value_t = 2)]
    pub refresh: u64,
    #[command(subcommand)]
    pub command: Option<ChunkdCommand>,
}

/// Where the range table is.
#[derive(Args, Debug, Clone)]
pub struct ChunkdCluster {
    /// etcd endpoints, comma-separated (http://HOST:PORT).
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The file system whose index this is (the etcd key prefix).
    #[arg(long, value_name = "ID")]
    pub fsid: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ChunkdCommand {
    /// Set, show or change which chunkd owns which fingerprint range.
    #[command(subcommand)]
    Ranges(RangesCommand),
}

#[derive(Subcommand, Debug)]
pub enum RangesCommand {
    /// Cut the fingerprint space evenly among the given chunkds, at epoch 1.
    ///
    /// One etcd transaction, refused if a table is already set (then use
    /// `assign`). Prints the table. Exit status 1 if etcd cannot be
    /// reached or the table is set.
    Init {
        #[command(flatten)]
        cluster: ChunkdCluster,
        /// The owners' URLs (http://HOST:PORT), in range order.
        #[arg(long = "owner", value_name = "URL", required = true)]
        owners: Vec<String>,
    },
    /// Print the range table and, with --token-file, whether each owner
    /// answers and at which epochs it holds its ranges.
    ///
    /// One line per range: start, end (hex, of the first 8 bytes of a
    /// fingerprint), owner, epoch; then one line per owner: `ok` and its
    /// ranges, or why it does not answer. Exit status 1 if etcd cannot be
    /// reached or no table is set; 0 even if an owner is down.
    Show {
        #[command(flatten)]
        cluster: ChunkdCluster,
        /// The chunkds' shared secret, to ask each owner for its view.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Print one JSON object: {"ranges": [...], "owners": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Give one range to another chunkd (or the same one, to fence off
    /// clients that hold an old table) at a new, higher epoch.
    ///
    /// One etcd transaction against the table as read; owners learn of it
    /// within their --refresh. The new owner starts with no entries for the
    /// range: dedup against what was there is missed until those chunks are
    /// added again; no data is lost. Prints the new table.
    Assign {
        #[command(flatten)]
        cluster: ChunkdCluster,
        /// The range's start, in hex as `show` prints it.
        #[arg(long, value_name = "HEX")]
        start: String,
        /// The new owner's URL.
        #[arg(long, value_name = "URL")]
        owner: String,
    },
}

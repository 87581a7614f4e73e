use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cas::{CheckProgress, Problem, Store};
use fs::space::SpaceReport;
use recipe::Recipe;
use repo::{Repo, RepoError};
use serde::{Deserialize, Serialize};

use crate::args::{CheckArgs, Cli, Command, GetArgs, PolicyCommand, PutArgs};
use crate::ops::{self, GetOut, PutOut, Request};
use crate::ui::{self, out};

/// How long a command waits for the repository's lock (`--lock-wait`).
static LOCK_WAIT: OnceLock<Duration> = OnceLock::new();
/// How often a waiting command tries the lock again.
pub const LOCK_POLL: Duration = Duration::from_millis(50);

pub fn lock_wait() -> Duration {
    LOCK_WAIT.get().copied().unwrap_or(Duration::ZERO)
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    let root = cli.repo.clone().unwrap_or_else(repo::default_location);
    let quiet = cli.quiet;
    let _ = LOCK_WAIT.set(Duration::from_secs(cli.lock_wait));
    match cli.command {
        Command::Init => init(&root, quiet),
        Command::Put(args) => put(&root, &args, quiet),
        Command::Get(args) => get(&root, &args, quiet),
        Command::Roots { json } => roots(&root, json, quiet),
        Command::Rm { label } => {
            ops::call(&root, &Request::Rm { label }, None, quiet, &|_| {})?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { json } => stats(&root, json, quiet),
        Command::Check(args) => check(&root, &args, quiet),
        Command::Repair { rebuild_index } => {
            debug_assert!(rebuild_index);
            rebuild(&root, quiet)
        }
        Command::Demo { file } => demo(&root, file, quiet),
        Command::Mount(args) => crate::mount::mount(&root, &args, quiet),
        Command::Umount { mountpoint } => crate::mount::umount(&mountpoint),
        Command::Serve {
            mountpoint,
            nonempty,
        } => crate::mount::serve(&root, mountpoint, nonempty, quiet),
        Command::Bench(cmd) => crate::bench::run(cmd),
        Command::Snapshot(cmd) => crate::history::snapshot(&root, cmd, quiet),
        Command::Restore {
            name,
            path,
            to,
            overwrite,
        } => crate::history::restore(
            &root,
            crate::ops::Request::Restore {
                name,
                path,
                to,
                overwrite,
            },
            quiet,
        ),
        Command::Clone { src, dst } => crate::history::clone(&root, src, dst, quiet),
        Command::Version { json } => crate::history::version(&root, json, quiet),
        Command::Gc {
            threshold,
            dry_run,
            json,
        } => crate::history::gc(&root, threshold, dry_run, json, quiet),
        Command::Recover { version, snapshot } => {
            crate::history::recover(&root, version, snapshot, quiet)
        }
        Command::Policy(PolicyCommand::Show { path, json }) => {
            crate::redundancy::policy_cmd(&root, path, json, quiet)
        }
        Command::Policy(PolicyCommand::Reload) => crate::branches::reload_cmd(&root, quiet),
        Command::Status { json } => crate::redundancy::status_cmd(&root, json, quiet),
        Command::Scrub { json } => crate::redundancy::scrub_cmd(&root, json, quiet),
        Command::Branch(cmd) => crate::branches::run(&root, cmd, quiet),
        Command::Config(cmd) => crate::records::config_cmd(&root, cmd, quiet),
        Command::Key(cmd) => crate::records::key_cmd(&root, cmd, quiet),
    }
}

/// Opens the repository in this process. While another command holds its
/// lock this waits for it (up to [`lock_wait`]); a mounted repository is
/// refused at once, with where it is mounted.
pub fn open(root: &Path, quiet: bool) -> Result<Repo> {
    let repo = wait_for_lock(|| Repo::open(root))?;
    crate::log::to_repo(&repo.root);
    say_discarded(&repo, quiet);
    Ok(repo)
}

/// Runs `open` until it is not turned away by a command holding the lock,
/// or [`lock_wait`] has passed.
fn wait_for_lock<T>(open: impl Fn() -> Result<T, RepoError>) -> Result<T> {
    let deadline = Instant::now() + lock_wait();
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

pub fn say_discarded(repo: &Repo, quiet: bool) {
    if repo.discarded_partials > 0 && !quiet {
        say!(
            "cairn: discarded {} partial container(s) left by an interrupted write",
            repo.discarded_partials
        );
    }
}

/// Opens a repository whose index may be unreadable: a damaged index file is
/// moved aside (it is derived data, and only under the repository's lock)
/// so that a fresh one can be rebuilt.
pub fn open_for_rebuild(root: &Path, quiet: bool) -> Result<Repo> {
    let (repo, aside) = wait_for_lock(|| Repo::open_for_rebuild(root))?;
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

fn init(root: &Path, quiet: bool) -> Result<ExitCode> {
    wait_for_lock(|| Repo::init(root))?;
    if !quiet {
        say!("created a cairn repository at {}", root.display());
        say!(
            "its key is {}: back it up now (somewhere else, e.g. with `cairn key export FILE`); \
             without it nothing stored can be read",
            Repo::key_path(root).display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn put(root: &Path, args: &PutArgs, quiet: bool) -> Result<ExitCode> {
    let input = if args.file == Path::new("-") {
        let fd = std::io::stdin().as_fd().try_clone_to_owned();
        File::from(fd.context("cannot use standard input")?)
    } else {
        File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?
    };
    let size = input
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let pb = ui::bar(quiet, size, "put");
    let started = Instant::now();
    let request = Request::Put {
        name: args.name.clone(),
        replace: args.replace,
    };
    let v = ops::call(root, &request, Some(&input), quiet, &|p| {
        pb.set_position(p.done)
    })?;
    pb.finish_and_clear();
    let s: PutOut = serde_json::from_value(v)?;
    if !quiet {
        let secs = started.elapsed().as_secs_f64();
        say!(
            "stored {:?}: {} in {secs:.2} s ({}); {} chunks, {} new ({} new data, {} after compression)",
            args.name,
            ui::bytes(s.len),
            ui::rate(s.len, secs),
            s.chunks,
            s.new_chunks,
            ui::bytes(s.new_bytes),
            ui::bytes(s.stored_bytes),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The file `get -o` writes to: a new file, or with `force` an existing
/// one truncated. Devices and pipes (`-o /dev/null`) are opened as they
/// are. Returns the file and whether this call created it.
fn output_file(path: &Path, force: bool) -> Result<(File, bool)> {
    let existing = std::fs::metadata(path).ok();
    if existing.as_ref().is_some_and(|m| m.is_file()) && !force {
        bail!("{} exists; give --force to overwrite it", path.display());
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(existing.as_ref().is_none_or(|m| m.is_file()))
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    Ok((file, existing.is_none()))
}

fn get(root: &Path, args: &GetArgs, quiet: bool) -> Result<ExitCode> {
    let (output, created) = match &args.output {
        Some(path) => {
            let (f, created) = output_file(path, args.force)?;
            (f, created.then_some(path))
        }
        None => {
            let fd = std::io::stdout().as_fd().try_clone_to_owned();
            (File::from(fd.context("cannot use standard output")?), None)
        }
    };
    let pb = ui::bar(quiet || args.output.is_none(), None, "get");
    let started = Instant::now();
    let request = Request::Get {
        label: args.label.clone(),
    };
    let answer = ops::call(root, &request, Some(&output), quiet, &|p| {
        if p.total > 0 && pb.length() != Some(p.total) {
            pb.set_length(p.total);
        }
        pb.set_position(p.done)
    });
    pb.finish_and_clear();
    let v = match answer {
        Ok(v) => v,
        Err(e) => {
            // A file this command created holds nothing worth keeping.
            if let Some(path) = created {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    };
    let got: GetOut = serde_json::from_value(v)?;
    if !quiet && args.output.is_some() && !got.closed {
        let secs = started.elapsed().as_secs_f64();
        say!(
            "read {:?}: {} in {secs:.2} s ({}), verified",
            args.label,
            ui::bytes(got.bytes),
            ui::rate(got.bytes, secs)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize, Deserialize)]
pub struct RootLine {
    label: String,
    root: String,
    bytes: Option<u64>,
    error: Option<String>,
}

pub fn root_lines(store: &Store) -> Result<Vec<RootLine>> {
    Ok(store
        .list_roots()?
        .into_iter()
        .map(|(label, id)| {
            let size = if is_history(&label) {
                fs::tree::read_record(store, &id)
                    .map(|r| r.logical_bytes)
                    .map_err(|e| e.to_string())
            } else {
                Recipe::open(store, id)
                    .map(|r| r.len())
                    .map_err(|e| e.to_string())
            };
            RootLine {
                label,
                root: id.to_string(),
                bytes: size.as_ref().ok().copied(),
                error: size.err(),
            }
        })
        .collect())
}

fn roots(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let v = ops::call(root, &Request::Roots, None, quiet, &|_| {})?;
    let lines: Vec<RootLine> = serde_json::from_value(v)?;
    for line in lines {
        if json {
            out!("{}", serde_json::to_string(&line)?);
        } else {
            let size = match (&line.bytes, &line.error) {
                (Some(b), _) => ui::bytes(*b),
                (None, Some(e)) => format!("unreadable: {e}"),
                (None, None) => "-".into(),
            };
            out!("{:<40} {size}", line.label);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What holds the space of a repository opened by this process: the
/// same computation a mount runs ([`fs::Fs::space_report`]), over the
/// metadata engine opened as a mount would open it (refused the same way).
pub fn space_unmounted(repo: &Repo) -> Result<SpaceReport> {
    let has_versions = || -> Result<bool> {
        Ok(repo
            .store
            .list_roots()?
            .iter()
            .any(|(l, _)| l.starts_with(fs::history::VERSION_PREFIX)))
    };
    // A repository never mounted has no file system; opening one would
    // create it.
    if !repo.fs_meta_path().exists() && !has_versions()? {
        return Ok(fs::space::report(&repo.store, None)?);
    }
    use meta::MetaStore;
    let meta = repo.open_meta(0, 0)?;
    let view = meta.view()?;
    Ok(fs::space::report(&repo.store, Some(view.as_ref()))?)
}

/// Versions and snapshots: their data is the file system's, counted once.
fn is_history(label: &str) -> bool {
    label.starts_with(fs::history::VERSION_PREFIX)
        || label.starts_with(fs::history::SNAPSHOT_PREFIX)
}

fn stats(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let v = ops::call(root, &Request::Stats, None, quiet, &|_| {})?;
    print_stats(root, &serde_json::from_value(v)?, json)
}

fn print_stats(root: &Path, st: &SpaceReport, json: bool) -> Result<ExitCode> {
    if json {
        out!("{}", serde_json::to_string_pretty(st)?);
        return Ok(ExitCode::SUCCESS);
    }
    let b = ui::bytes;
    out!("repository        {}", root.display());
    out!(
        "roots             {} ({} versions, {} snapshots, {} stored streams)",
        st.roots,
        st.versions,
        st.snapshots,
        st.roots - st.versions - st.snapshots
    );
    if let (Some(files), Some(dirs), Some(bytes)) = (st.fs_files, st.fs_dirs, st.fs_logical_bytes) {
        out!(
            "file system       {files} files, {dirs} directories, {}",
            b(bytes)
        );
        out!(
            "  inline          {} files, {} (kept in the metadata engine, not deduplicated)",
            st.fs_inline_files.unwrap_or(0),
            b(st.fs_inline_bytes.unwrap_or(0))
        );
    }
    out!(
        "logical bytes     {} (live files and stored streams)",
        b(st.logical_bytes)
    );
    out!(
        "referenced        {} (distinct chunks they reach, plus inline bytes; uncompressed)",
        b(st.referenced_bytes)
    );
    out!(
        "dedup ratio       {:.2}x (logical / referenced)",
        st.dedup_ratio
    );
    out!(
        "unique bytes      {} (every chunk in the containers, uncompressed)",
        b(st.unique_bytes)
    );
    out!(
        "stored bytes      {} (containers on disk)",
        b(st.stored_bytes)
    );
    out!(
        "compression       {:.2}x (unique / stored)",
        st.compression_ratio
    );
    let h = &st.held;
    out!("space held by     (uncompressed, each chunk counted once)");
    out!("  live files      {}", b(h.live_bytes));
    out!("  stored streams  {}", b(h.stored_streams_bytes));
    out!(
        "  snapshots only  {} (`cairn snapshot delete` frees it)",
        b(h.snapshots_only_bytes)
    );
    out!(
        "  versions only   {} (freed as versions age out: [versions] in cairn.toml)",
        b(h.versions_only_bytes)
    );
    out!(
        "  both            {} (snapshots and versions)",
        b(h.snapshots_and_versions_bytes)
    );
    out!(
        "  other           {} (recipe nodes, version records, garbage for `cairn gc`)",
        b(h.other_bytes)
    );
    out!("chunks            {}", st.chunks);
    out!("containers        {}", st.containers);
    out!(
        "index RAM         {} ({:.1} bytes/chunk)",
        b(st.index_ram_bytes),
        st.index_ram_bytes_per_chunk
    );
    for r in &st.unreadable_roots {
        out!("unreadable root   {r} (not counted; run `cairn check`)");
    }
    Ok(ExitCode::SUCCESS)
}

fn progress_fn<'a>(steps: &'a ui::Steps, what: &'a str) -> impl Fn(CheckProgress) + Sync + 'a {
    move |p| steps.update(what, p.containers_done, p.containers_total)
}

/// Roots whose data is damaged or missing, each with how many of its chunks
/// (data or recipe) cannot be read.
fn damaged_roots(
    store: &Store,
    known: fs::damage::KnownDamage<'_>,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (label, id) in store.list_roots()? {
        if is_history(&label) {
            if let Err(e) = fs::reach::MarkSet::default().root(store, &id) {
                out.push((label, format!("tree unreadable: {e}")));
            }
            continue;
        }
        let verdict = match Recipe::open(store, id) {
            Err(e) => Some(format!("recipe unreadable: {e}")),
            Ok(r) => match r.extents(0, r.len()) {
                Err(e) => Some(format!("recipe unreadable: {e}")),
                Ok(extents) => {
                    let mut bad = 0;
                    for e in &extents {
                        if known(&e.id).is_some() || !store.contains(&e.id)? {
                            bad += 1;
                        }
                    }
                    (bad > 0)
                        .then(|| format!("{bad} of {} chunks damaged or missing", extents.len()))
                }
            },
        };
        if let Some(v) = verdict {
            out.push((label, v));
        }
    }
    Ok(out)
}

/// What `cairn check` found (and, with `--repair`, did): the store's
/// report and the roots and live files that lose data.
#[derive(Serialize, serde::Deserialize)]
pub struct CheckOut {
    check: cas::CheckReport,
    /// What `--repair` did, and the store's state after it.
    repaired: Option<Repaired>,
    damaged_roots: Vec<(String, String)>,
    /// Live files that point at chunks the store cannot give back.
    damaged_files: Vec<fs::damage::DamagedFile>,
}

#[derive(Serialize, serde::Deserialize)]
pub struct Repaired {
    rebuilt: cas::RebuildReport,
    /// The damaged containers rewritten without what did not verify: with
    /// `--drop-lost` every damaged one, else those that could be read.
    dropped: Option<cas::Dropped>,
    /// Whether unreadable containers were given up too (`--drop-lost`).
    gave_up_unreadable: bool,
    /// A check of the store after the repair.
    after: cas::CheckReport,
}

impl CheckOut {
    /// The store as it is now: after the repair when one ran.
    fn now(&self) -> &cas::CheckReport {
        self.repaired.as_ref().map_or(&self.check, |r| &r.after)
    }

    fn is_healthy(&self) -> bool {
        self.now().is_clean() && self.damaged_files.is_empty() && self.damaged_roots.is_empty()
    }
}

/// Roots (label, why) and live files that lose data.
type Losses = (Vec<(String, String)>, Vec<fs::damage::DamagedFile>);

/// The live files and roots that lose data, given what the check found.
fn losses(store: &Store, fs: Option<&fs::Fs>, report: &cas::CheckReport) -> Result<Losses> {
    let known = |id: &cas::ChunkId| report.damage_of(id).map(str::to_string);
    let roots = damaged_roots(store, &known)?;
    let files = match fs {
        Some(fs) => fs.damaged_files(&known)?,
        None => Vec::new(),
    };
    Ok((roots, files))
}

pub fn check_store(
    store: &Store,
    fs: Option<&fs::Fs>,
    progress: &(dyn Fn(CheckProgress) + Sync),
) -> Result<CheckOut> {
    let check = store.check(progress)?;
    let (damaged_roots, damaged_files) = losses(store, fs, &check)?;
    Ok(CheckOut {
        check,
        repaired: None,
        damaged_roots,
        damaged_files,
    })
}

fn check(root: &Path, args: &CheckArgs, quiet: bool) -> Result<ExitCode> {
    let repair = args.repair || args.drop_lost;
    // A mounted file system owns the index: ask its daemon.
    let steps = ui::Steps::new(quiet);
    let answer = crate::control::call(root, &Request::Check, None, &|p| {
        steps.update(&p.what, p.done, p.total)
    })?;
    steps.finish();
    if let Some(v) = answer {
        let out: CheckOut = serde_json::from_value(v)?;
        if repair && !out.check.is_clean() {
            let e = anyhow::anyhow!(
                "damage found while the file system is mounted; `cairn check --repair` \
                 changes the index and the containers: unmount, then run it again"
            );
            tracing::error!("{e:#}");
            return Err(e);
        }
        return check_print(&out, args.json);
    }
    // An index that does not match the store is what check reports and
    // its repair rebuilds: neither refuses it at open.
    let repo = if repair {
        open_for_rebuild(root, quiet)?
    } else {
        let repo = wait_for_lock(|| Repo::open_to_check(root))?;
        crate::log::to_repo(&repo.root);
        say_discarded(&repo, quiet);
        repo
    };
    let store = &repo.store;
    let steps = ui::Steps::new(quiet);
    let check = store.check(&progress_fn(&steps, "check"))?;
    steps.finish();
    // The live file system, when the repository has one.
    let live = if repo.fs_meta_path().exists() {
        Some(crate::mount::open_fs(&repo)?)
    } else {
        None
    };
    let mut repaired = None;
    if repair && !check.is_clean() {
        let steps = ui::Steps::new(quiet);
        let rebuilt = store.rebuild_index(&progress_fn(&steps, "rebuild"))?;
        let give_up = if args.drop_lost {
            rebuilt.damaged_containers()
        } else {
            rebuilt.rewritable_containers()
        };
        let dropped = Some(store.drop_damaged(&give_up)?);
        let after = store.check(&progress_fn(&steps, "check again"))?;
        steps.finish();
        repaired = Some(Repaired {
            rebuilt,
            dropped,
            gave_up_unreadable: args.drop_lost,
            after,
        });
    }
    let now = repaired.as_ref().map_or(&check, |r| &r.after);
    let (damaged_roots, damaged_files) = losses(store, live.as_deref(), now)?;
    let out = CheckOut {
        check,
        repaired,
        damaged_roots,
        damaged_files,
    };
    check_print(&out, args.json)
}

/// Counts of what `report` found, as "2 containers unreadable, 3 chunks
/// corrupt".
fn damage_counts(report: &cas::CheckReport) -> Vec<String> {
    let mut unreadable = 0;
    let mut corrupt_containers = 0;
    let mut corrupt = 0;
    let mut dangling = 0;
    let mut index = false;
    for p in &report.problems {
        match p {
            Problem::UnreadableContainer { .. } => unreadable += 1,
            Problem::CorruptContainer { .. } => corrupt_containers += 1,
            Problem::CorruptChunk { .. } => corrupt += 1,
            Problem::DanglingIndexEntry { .. } => dangling += 1,
            Problem::IndexMismatch { .. } => index = true,
            Problem::UnindexedChunks { .. } => {}
        }
    }
    let mut out = Vec::new();
    if index {
        out.push("the index does not match the store".to_string());
    }
    for (n, what) in [
        (unreadable, "container(s) unreadable"),
        (corrupt_containers, "container(s) with a corrupt footer"),
        (corrupt, "chunk(s) corrupt"),
        (dangling, "index entr(ies) leading nowhere"),
    ] {
        if n > 0 {
            out.push(format!("{n} {what}"));
        }
    }
    out
}

/// The one line that says how the repository is and what to run next.
fn summary(out: &CheckOut) -> String {
    let now = out.now();
    let mut parts = damage_counts(now);
    if !out.damaged_files.is_empty() {
        parts.push(format!(
            "{} file(s) have lost data",
            out.damaged_files.len()
        ));
    }
    if !out.damaged_roots.is_empty() {
        parts.push(format!(
            "{} root(s) have lost data",
            out.damaged_roots.len()
        ));
    }
    let repaired = out.repaired.is_some();
    if parts.is_empty() {
        let verb = if repaired {
            "repaired, now clean"
        } else {
            "clean"
        };
        return format!(
            "summary: {verb}, no damage found ({} containers, {} chunks ({}) verified, \
             {} of {} index entries sound)",
            now.containers,
            now.chunks_verified,
            ui::bytes(now.bytes_verified),
            now.index_entries_ok,
            now.index_entries
        );
    }
    let next = if !now.is_clean() {
        if now.damaged_containers().is_empty() {
            "run `cairn check --repair`"
        } else if repaired {
            "bring back the branches that held them and run `cairn check` again, \
             or give them up with `cairn check --drop-lost`"
        } else {
            "run `cairn check --repair` (rebuilds the index; `--drop-lost` also gives up \
             what cannot be read)"
        }
    } else {
        "write the files' data again, restore them from a snapshot, or delete them; \
         remove a lost root with `cairn rm LABEL`"
    };
    let state = if repaired { "still damaged" } else { "DAMAGED" };
    format!("summary: {state}: {}; {next}", parts.join(", "))
}

fn check_print(out: &CheckOut, json: bool) -> Result<ExitCode> {
    let healthy = out.is_healthy();
    if json {
        out!("{}", serde_json::to_string_pretty(out)?);
    } else {
        for p in &out.check.problems {
            out!("  {}: {p}", if p.is_damage() { "DAMAGE" } else { "note" });
        }
        if let Some(r) = &out.repaired {
            out!(
                "repaired: rebuilt the index from {} sound containers ({} chunks indexed); \
                 what did not verify is no longer indexed, so writing it again stores it anew",
                r.rebuilt.containers,
                r.rebuilt.chunks_indexed
            );
            if let Some(d) = &r.dropped {
                for c in &d.containers {
                    if r.gave_up_unreadable {
                        out!("repaired: dropped damaged container {c}");
                    } else {
                        out!("repaired: rewrote damaged container {c} without what did not verify");
                    }
                }
                if !d.containers.is_empty() {
                    out!(
                        "repaired: {} chunk(s) of them still verified and were kept; {} index \
                         entr(ies) went with them",
                        d.chunks_kept,
                        d.entries_dropped
                    );
                }
            }
            for p in r.after.problems.iter().filter(|p| p.is_damage()) {
                out!("  still DAMAGE: {p}");
            }
        }
        for (label, v) in &out.damaged_roots {
            out!("  LOST: root {label:?}: {v}");
        }
        for f in &out.damaged_files {
            out!("  LOST: file {}: {}", f.path, f.cause);
        }
        out!("{}", summary(out));
    }
    if !healthy {
        tracing::error!("check: {}", summary(out));
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn rebuild(root: &Path, quiet: bool) -> Result<ExitCode> {
    let repo = open_for_rebuild(root, quiet)?;
    let steps = ui::Steps::new(quiet);
    let r = repo.store.rebuild_index(&progress_fn(&steps, "rebuild"))?;
    steps.finish();
    out!(
        "rebuilt the fingerprint index from {} containers: {} chunks indexed",
        r.containers,
        r.chunks_indexed
    );
    for p in &r.problems {
        out!("  left out: {p}");
    }
    if r.problems.iter().any(Problem::is_damage) {
        out!(
            "what was left out cannot be read: `cairn check` names the files it affects, and \
             `cairn check --drop-lost` gives it up for good"
        );
    }
    Ok(if r.problems.iter().any(Problem::is_damage) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn demo(root: &Path, file: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    if !Repo::exists(root) {
        wait_for_lock(|| Repo::init(root))?;
        out!("created a repository at {}", root.display());
    }
    let file = match file {
        Some(f) => f,
        None => std::env::current_exe().context("cannot find the cairn executable")?,
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or("input".into());
    let labels = [
        format!("demo/{name}-{stamp}"),
        format!("demo/{name}-{stamp}-copy"),
    ];
    out!(
        "storing {} twice, as {:?} and {:?}",
        file.display(),
        labels[0],
        labels[1]
    );
    for label in &labels {
        put(
            root,
            &PutArgs {
                file: file.clone(),
                name: label.clone(),
                replace: true,
            },
            quiet,
        )?;
    }
    let repo = open(root, quiet)?;
    let recipe = Recipe::open(&repo.store, repo.store.get_root(&labels[1])?)?;
    let mut back = Vec::new();
    recipe.write_to(&mut back, &|_| {})?;
    let original =
        std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    if back != original {
        bail!(
            "read-back of {:?} differs from {}",
            labels[1],
            file.display()
        );
    }
    out!(
        "read {:?} back: {} bytes, identical to the original\n",
        labels[1],
        back.len()
    );
    print_stats(&repo.root, &space_unmounted(&repo)?, false)
}

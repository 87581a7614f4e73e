use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cas::{CheckProgress, Problem, Store};
use recipe::Recipe;
use repo::Repo;
use serde::Serialize;

use crate::args::{CheckArgs, Cli, Command, GetArgs, PolicyCommand, PutArgs};
use crate::ui;

pub fn run(cli: Cli) -> Result<ExitCode> {
    let root = cli.repo.clone().unwrap_or_else(repo::default_location);
    let quiet = cli.quiet;
    match cli.command {
        Command::Init => init(&root, quiet),
        Command::Put(args) => put(&open(&root, quiet)?, &args, quiet),
        Command::Get(args) => get(&open(&root, quiet)?, &args, quiet),
        Command::Roots { json } => roots(&open(&root, quiet)?, json),
        Command::Rm { label } => {
            open(&root, quiet)?.store.delete_root(&label)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { json } => stats(&root, json, quiet),
        Command::Check(args) => check(&root, &args, quiet),
        Command::Repair { rebuild_index } => {
            debug_assert!(rebuild_index);
            rebuild(&open_for_rebuild(&root, quiet)?, quiet)
        }
        Command::Demo { file } => demo(&root, file, quiet),
        Command::Mount(args) => crate::mount::mount(&root, &args, quiet),
        Command::Umount { mountpoint } => crate::mount::umount(&mountpoint),
        Command::Serve { mountpoint } => crate::mount::serve(&root, mountpoint, quiet),
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
    }
}

pub fn open(root: &Path, quiet: bool) -> Result<Repo> {
    let repo = Repo::open(root)?;
    crate::log::to_repo(&repo.root);
    if repo.discarded_partials > 0 && !quiet {
        say!(
            "cairn: discarded {} partial container(s) left by an interrupted write",
            repo.discarded_partials
        );
    }
    Ok(repo)
}

/// Opens a repository whose index may be unreadable: a damaged index file is
/// moved aside (it is derived data) so that a fresh one can be rebuilt.
fn open_for_rebuild(root: &Path, quiet: bool) -> Result<Repo> {
    match Repo::open(root) {
        Err(repo::RepoError::Store(cas::CasError::IndexOpen { path, source })) => {
            let aside = path.with_extension("redb.damaged");
            std::fs::rename(&path, &aside).with_context(|| {
                format!("cannot move the damaged index {} aside", path.display())
            })?;
            say!(
                "cairn: the index could not be opened ({source}); moved it to {} and rebuilding",
                aside.display()
            );
            open(root, quiet)
        }
        other => Ok(other?),
    }
}

fn init(root: &Path, quiet: bool) -> Result<ExitCode> {
    Repo::init(root)?;
    if !quiet {
        say!("created a cairn repository at {}", root.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn put(repo: &Repo, args: &PutArgs, quiet: bool) -> Result<ExitCode> {
    let store = &repo.store;
    if !args.replace && store.get_root(&args.name).is_ok() {
        bail!(
            "label {:?} already exists (use --replace to point it at the new data)",
            args.name
        );
    }
    let (input, size): (Box<dyn Read + Send>, Option<u64>) = if args.file == Path::new("-") {
        (Box::new(io::stdin()), None)
    } else {
        let f = File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(f), size)
    };
    let pb = ui::bar(quiet, size, "put");
    let started = Instant::now();
    let stored = recipe::store_stream(store, input, repo.config.chunking, &|n| pb.set_position(n))?;
    store.put_root(&args.name, &stored.root)?;
    pb.finish_and_clear();
    if !quiet {
        let secs = started.elapsed().as_secs_f64();
        let s = stored.stats;
        say!(
            "stored {:?}: {} in {secs:.2} s ({}); {} chunks, {} new ({} new data, {} after compression)",
            args.name,
            ui::bytes(stored.len),
            ui::rate(stored.len, secs),
            s.chunks,
            s.new_chunks,
            ui::bytes(s.new_bytes),
            ui::bytes(s.stored_bytes),
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn get(repo: &Repo, args: &GetArgs, quiet: bool) -> Result<ExitCode> {
    let root = repo.store.get_root(&args.label)?;
    let recipe = Recipe::open(&repo.store, root)?;
    let pb = ui::bar(quiet || args.output.is_none(), Some(recipe.len()), "get");
    let started = Instant::now();
    // Chunks are tens of KiB: written as they come, no extra buffer copy.
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(io::stdout().lock()),
    };
    let n = recipe.write_to(&mut out, &|n| pb.set_position(n))?;
    pb.finish_and_clear();
    if !quiet && args.output.is_some() {
        let secs = started.elapsed().as_secs_f64();
        say!(
            "read {:?}: {} in {secs:.2} s ({}), verified",
            args.label,
            ui::bytes(n),
            ui::rate(n, secs)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct RootLine {
    label: String,
    root: String,
    bytes: Option<u64>,
    error: Option<String>,
}

fn root_lines(store: &Store) -> Result<Vec<RootLine>> {
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

fn roots(repo: &Repo, json: bool) -> Result<ExitCode> {
    for line in root_lines(&repo.store)? {
        if json {
            println!("{}", serde_json::to_string(&line)?);
        } else {
            let size = match (&line.bytes, &line.error) {
                (Some(b), _) => ui::bytes(*b),
                (None, Some(e)) => format!("unreadable: {e}"),
                (None, None) => "-".into(),
            };
            println!("{:<40} {size}", line.label);
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize, serde::Deserialize)]
pub struct Stats {
    roots: u64,
    /// Bytes of every rooted stream plus every file in the file system.
    logical_bytes: u64,
    fs_files: Option<u64>,
    fs_dirs: Option<u64>,
    fs_logical_bytes: Option<u64>,
    stored_bytes: u64,
    unique_bytes: u64,
    dedup_ratio: f64,
    compression_ratio: f64,
    chunks: u64,
    containers: u64,
    index_ram_bytes: u64,
    index_ram_bytes_per_chunk: f64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// What `cairn stats` reports, for a store and (when known) its file
/// system's files, directories and bytes.
pub fn stats_of(store: &Store, fs: Option<(u64, u64, u64)>) -> Result<Stats> {
    let s = store.stats()?;
    let roots = root_lines(store)?;
    let logical: u64 = roots
        .iter()
        .filter(|r| !is_history(&r.label))
        .filter_map(|r| r.bytes)
        .sum::<u64>()
        + fs.map_or(0, |(_, _, bytes)| bytes);
    Ok(Stats {
        roots: roots.len() as u64,
        logical_bytes: logical,
        fs_files: fs.map(|f| f.0),
        fs_dirs: fs.map(|f| f.1),
        fs_logical_bytes: fs.map(|f| f.2),
        stored_bytes: s.stored_bytes,
        unique_bytes: s.unique_bytes,
        dedup_ratio: ratio(logical, s.stored_bytes),
        compression_ratio: ratio(s.unique_bytes, s.stored_bytes),
        chunks: s.chunks,
        containers: s.containers,
        index_ram_bytes: s.index_ram_bytes,
        index_ram_bytes_per_chunk: s.index_ram_bytes_per_chunk,
    })
}

/// Versions and snapshots: their data is the file system's, counted once.
fn is_history(label: &str) -> bool {
    label.starts_with(fs::history::VERSION_PREFIX)
        || label.starts_with(fs::history::SNAPSHOT_PREFIX)
}

fn stats(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let st: Stats = match crate::control::call(root, &crate::ops::Request::Stats, &|_| {})? {
        Some(v) => serde_json::from_value(v)?,
        None => {
            let repo = open(root, quiet)?;
            stats_of(&repo.store, fs_counts(&repo)?)?
        }
    };
    print_stats(root, &st, json)
}

fn print_stats(root: &Path, st: &Stats, json: bool) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(st)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("repository        {}", root.display());
    println!("roots             {}", st.roots);
    if let (Some(files), Some(dirs), Some(bytes)) = (st.fs_files, st.fs_dirs, st.fs_logical_bytes) {
        println!(
            "file system       {files} files, {dirs} directories, {}",
            ui::bytes(bytes)
        );
    }
    println!("logical bytes     {}", ui::bytes(st.logical_bytes));
    println!(
        "unique bytes      {} (distinct chunks, uncompressed)",
        ui::bytes(st.unique_bytes)
    );
    println!(
        "stored bytes      {} (containers on disk)",
        ui::bytes(st.stored_bytes)
    );
    println!(
        "dedup ratio       {:.2}x (logical / stored)",
        st.dedup_ratio
    );
    println!(
        "compression       {:.2}x (unique / stored)",
        st.compression_ratio
    );
    println!("chunks            {}", st.chunks);
    println!("containers        {}", st.containers);
    println!(
        "index RAM         {} ({:.1} bytes/chunk)",
        ui::bytes(st.index_ram_bytes),
        st.index_ram_bytes_per_chunk
    );
    Ok(ExitCode::SUCCESS)
}

/// Files, directories and bytes of the file system, if it was ever mounted.
fn fs_counts(repo: &Repo) -> Result<Option<(u64, u64, u64)>> {
    let path = repo.fs_meta_path();
    if !path.exists() {
        return Ok(None);
    }
    use meta::MetaStore;
    let m = meta::RedbMeta::open(&path, 0, 0)
        .context("cannot read the file system's metadata (try `cairn recover`)")?;
    let counts = m.counts()?;
    let mut bytes = 0;
    m.for_each_content(&mut |_, _, size| bytes += size)?;
    Ok(Some((counts.files, counts.dirs, bytes)))
}

fn progress_fn(pb: &indicatif::ProgressBar) -> impl Fn(CheckProgress) + Sync + '_ {
    move |p| {
        pb.set_length(p.containers_total);
        pb.set_position(p.containers_done);
    }
}

/// Roots whose data is damaged or missing, each with how many of its chunks
/// (data or recipe) cannot be read.
fn damaged_roots(store: &Store, damaged: &HashSet<String>) -> Result<Vec<(String, String)>> {
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
                        if damaged.contains(&e.id.to_string()) || !store.contains(&e.id)? {
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

fn damaged_chunks(problems: &[Problem]) -> HashSet<String> {
    problems
        .iter()
        .filter_map(|p| match p {
            Problem::CorruptChunk { chunk, .. } | Problem::DanglingIndexEntry { chunk, .. } => {
                Some(chunk.clone())
            }
            _ => None,
        })
        .collect()
}

/// What `cairn check` found: the store's report and the roots it harms.
#[derive(Serialize, serde::Deserialize)]
pub struct CheckOut {
    check: cas::CheckReport,
    damaged_roots: Vec<(String, String)>,
    /// Live files that point at chunks the store cannot give back.
    damaged_files: Vec<fs::damage::DamagedFile>,
}

pub fn check_store(
    store: &Store,
    fs: Option<&fs::Fs>,
    progress: &(dyn Fn(CheckProgress) + Sync),
) -> Result<CheckOut> {
    let check = store.check(progress)?;
    let damaged_roots = damaged_roots(store, &damaged_chunks(&check.problems))?;
    let damaged_files = match fs {
        Some(fs) => fs.damaged_files()?,
        None => Vec::new(),
    };
    Ok(CheckOut {
        check,
        damaged_roots,
        damaged_files,
    })
}

fn check(root: &Path, args: &CheckArgs, quiet: bool) -> Result<ExitCode> {
    // A mounted file system owns the index: ask its daemon.
    let pb = ui::count_bar(quiet, "check");
    let request = crate::ops::Request::Check;
    let answer = crate::control::call(root, &request, &|p| {
        pb.set_length(p.total);
        pb.set_position(p.done);
    })?;
    pb.finish_and_clear();
    if let Some(v) = answer {
        let out: CheckOut = serde_json::from_value(v)?;
        if args.repair && !out.check.is_clean() {
            anyhow::bail!(
                "damage found while the file system is mounted; `cairn check --repair` \
                 rebuilds the index: unmount, then run it again"
            );
        }
        return check_print(out, None, args.json);
    }
    let repo = open(root, quiet)?;
    let pb = ui::count_bar(quiet, "check");
    let report = repo.store.check(&progress_fn(&pb))?;
    pb.finish_and_clear();
    // The live file system, when the repository has one.
    let live = if repo.fs_meta_path().exists() {
        Some(crate::mount::open_fs(&repo)?)
    } else {
        None
    };
    let mut damaged = damaged_chunks(&report.problems);
    let mut lost = damaged_roots(&repo.store, &damaged)?;
    let mut repaired = None;
    if args.repair && !report.is_clean() {
        let pb = ui::count_bar(quiet, "rebuild");
        let r = repo.store.rebuild_index(&progress_fn(&pb))?;
        pb.finish_and_clear();
        damaged = damaged_chunks(&r.problems);
        lost = damaged_roots(&repo.store, &damaged)?;
        repaired = Some(r);
    }
    let damaged_files = match &live {
        Some(fs) => fs.damaged_files()?,
        None => Vec::new(),
    };
    let out = CheckOut {
        check: report,
        damaged_roots: lost,
        damaged_files,
    };
    check_print(out, repaired, args.json)
}

fn check_print(
    out: CheckOut,
    repaired: Option<cas::RebuildReport>,
    json: bool,
) -> Result<ExitCode> {
    let CheckOut {
        check: report,
        damaged_roots: lost,
        damaged_files,
    } = out;
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            check: &'a cas::CheckReport,
            repaired: Option<&'a cas::RebuildReport>,
            damaged_roots: Vec<serde_json::Value>,
            damaged_files: &'a [fs::damage::DamagedFile],
        }
        let damaged_roots = lost
            .iter()
            .map(|(l, v)| serde_json::json!({"label": l, "damage": v}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&Out {
                check: &report,
                repaired: repaired.as_ref(),
                damaged_roots,
                damaged_files: &damaged_files,
            })?
        );
    } else {
        println!(
            "checked {} containers ({} sound), {} chunks ({}) verified, {} of {} index entries sound",
            report.containers,
            report.containers_ok,
            report.chunks_verified,
            ui::bytes(report.bytes_verified),
            report.index_entries_ok,
            report.index_entries
        );
        for p in &report.problems {
            println!("  {}: {p}", if p.is_damage() { "DAMAGE" } else { "note" });
        }
        if let Some(r) = &repaired {
            println!(
                "repair: rebuilt the index from {} sound containers ({} chunks); damaged chunks were left out",
                r.containers, r.chunks_indexed
            );
        }
        for (label, v) in &lost {
            println!("  root {label:?}: {v}");
        }
        for f in &damaged_files {
            println!("  DAMAGE: file {}: {}", f.path, f.cause);
        }
        if !damaged_files.is_empty() {
            println!(
                "{} file(s) cannot be read back whole; writing the same data again, \
                 restoring them from a snapshot, or deleting them clears this",
                damaged_files.len()
            );
        } else if report.is_clean() {
            println!("no damage found");
        } else if repaired.is_some() && lost.is_empty() {
            println!("repaired: every root reads back");
        } else if !lost.is_empty() {
            println!(
                "{} root(s) have lost data; putting the same data again stores the missing chunks anew",
                lost.len()
            );
        }
    }
    let healthy =
        damaged_files.is_empty() && (report.is_clean() || (repaired.is_some() && lost.is_empty()));
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn rebuild(repo: &Repo, quiet: bool) -> Result<ExitCode> {
    let pb = ui::count_bar(quiet, "rebuild");
    let r = repo.store.rebuild_index(&progress_fn(&pb))?;
    pb.finish_and_clear();
    println!(
        "rebuilt the fingerprint index from {} containers: {} chunks indexed",
        r.containers, r.chunks_indexed
    );
    for p in &r.problems {
        println!("  left out: {p}");
    }
    Ok(if r.problems.iter().any(Problem::is_damage) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn demo(root: &Path, file: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    if !Repo::exists(root) {
        Repo::init(root)?;
        println!("created a repository at {}", root.display());
    }
    let repo = open(root, quiet)?;
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
    println!(
        "storing {} twice, as {:?} and {:?}",
        file.display(),
        labels[0],
        labels[1]
    );
    for label in &labels {
        put(
            &repo,
            &PutArgs {
                file: file.clone(),
                name: label.clone(),
                replace: true,
            },
            quiet,
        )?;
    }
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
    println!(
        "read {:?} back: {} bytes, identical to the original\n",
        labels[1],
        back.len()
    );
    print_stats(
        &repo.root,
        &stats_of(&repo.store, fs_counts(&repo)?)?,
        false,
    )
}

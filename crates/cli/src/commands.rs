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

use crate::args::{CheckArgs, Cli, Command, GetArgs, PutArgs};
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
        Command::Stats { json } => stats(&open(&root, quiet)?, json),
        Command::Check(args) => check(&open(&root, quiet)?, &args, quiet),
        Command::Repair { rebuild_index } => {
            debug_assert!(rebuild_index);
            rebuild(&open_for_rebuild(&root, quiet)?, quiet)
        }
        Command::Demo { file } => demo(&root, file, quiet),
        Command::Mount(args) => crate::mount::mount(&root, &args, quiet),
        Command::Umount { mountpoint } => crate::mount::umount(&mountpoint),
        Command::Serve { mountpoint } => crate::mount::serve(&root, mountpoint, quiet),
        Command::Bench(cmd) => crate::bench::run(cmd),
    }
}

pub fn open(root: &Path, quiet: bool) -> Result<Repo> {
    let repo = Repo::open(root)?;
    if repo.discarded_partials > 0 && !quiet {
        eprintln!(
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
            eprintln!(
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
        eprintln!("created a cairn repository at {}", root.display());
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
        eprintln!(
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
        eprintln!(
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
            let r = Recipe::open(store, id);
            RootLine {
                label,
                root: id.to_string(),
                bytes: r.as_ref().ok().map(Recipe::len),
                error: r.err().map(|e| e.to_string()),
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

#[derive(Serialize)]
struct Stats {
    repository: PathBuf,
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

fn stats(repo: &Repo, json: bool) -> Result<ExitCode> {
    let s = repo.store.stats()?;
    let roots = root_lines(&repo.store)?;
    let fs = fs_counts(repo)?;
    let logical: u64 =
        roots.iter().filter_map(|r| r.bytes).sum::<u64>() + fs.map_or(0, |(_, _, bytes)| bytes);
    let st = Stats {
        repository: repo.root.clone(),
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
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("repository        {}", st.repository.display());
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
    let m = meta::RedbMeta::open(&path, 0, 0).context(
        "cannot read the file system's metadata (is it mounted? stats of a mounted file system come with the control socket, issue 4)",
    )?;
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

fn check(repo: &Repo, args: &CheckArgs, quiet: bool) -> Result<ExitCode> {
    let pb = ui::count_bar(quiet, "check");
    let report = repo.store.check(&progress_fn(&pb))?;
    pb.finish_and_clear();
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
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            check: &'a cas::CheckReport,
            repaired: Option<&'a cas::RebuildReport>,
            damaged_roots: Vec<serde_json::Value>,
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
                damaged_roots
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
        if report.is_clean() {
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
    let healthy = report.is_clean() || (repaired.is_some() && lost.is_empty());
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
    stats(&repo, false)
}

//! The commands that are not a group of their own: init, put, get, roots,
//! rm, stats, check, repair and demo. Each parses, calls the service (or
//! the daemon, through it) and prints.

use std::fs::File;
use std::io::{Read, Seek};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cas::Problem;
use fs::space::SpaceReport;
use repo::Repo;
use service::{CheckOut, Repair, Request};

use crate::args::{CheckArgs, Cli, Command, GetArgs, PolicyCommand, PutArgs};
use crate::ops;
use crate::ui::{self, out};

pub fn run(cli: Cli) -> Result<ExitCode> {
    let root = cli.repo.clone().unwrap_or_else(repo::default_location);
    let quiet = cli.quiet;
    ops::set_lock_wait(Duration::from_secs(cli.lock_wait));
    match cli.command {
        Command::Init { join, client } => match join {
            Some(other) => join_fs(&root, &other, client, quiet),
            None => init(&root, quiet),
        },
        Command::Put(args) => put(&root, &args, quiet),
        Command::Get(args) => get(&root, &args, quiet),
        Command::Roots { json } => roots(&root, json, quiet),
        Command::Rm { label } => {
            ops::call(&root, &Request::Rm { label }, None, quiet, &service::Silent)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { json } => stats(&root, json, quiet),
        Command::Check(args) => check(&root, &args, quiet),
        Command::Repair {
            rebuild_index,
            json,
        } => {
            debug_assert!(rebuild_index);
            rebuild(&root, json, quiet)
        }
        Command::Demo { file } => demo(&root, file, quiet),
        Command::Mount(args) => crate::mount::mount(&root, &args, None, quiet),
        Command::Umount { mountpoint } => crate::mount::umount(&mountpoint, quiet),
        Command::Cluster(cmd) => crate::cluster::run(cmd),
        Command::Serve {
            mountpoint,
            nonempty,
            meta,
            cluster,
            gateway,
        } => {
            let at = crate::mount::Serving {
                mountpoint,
                nonempty,
                meta,
                cluster,
            };
            crate::mount::serve(&root, at, &gateway, quiet)
        }
        Command::Gateway { gateway } => crate::gateway::gateway(&root, &gateway, quiet),
        Command::Chunkd(args) => crate::chunkd::run(args, quiet),
        Command::Coord {
            cluster,
            interval,
            ttl,
        } => crate::coord::run(&cluster, interval, ttl, quiet),
        Command::AccessKey(cmd) => crate::gateway::access_key(&root, cmd),
        Command::Bucket(cmd) => crate::gateway::bucket(&root, cmd),
        Command::Bench(cmd) => crate::bench::run(cmd),
        Command::Snapshot(cmd) => crate::history::snapshot(&root, cmd, quiet),
        Command::Restore {
            name,
            path,
            to,
            out,
            overwrite,
            json,
        } => {
            let req = Request::Restore {
                name,
                path,
                to,
                overwrite,
                out: out.as_deref().map(host_dir).transpose()?,
            };
            crate::history::restore(&root, req, json, quiet)
        }
        Command::Clone { src, dst, json } => crate::history::clone(&root, src, dst, json, quiet),
        Command::Version { json } => crate::history::version(&root, json, quiet),
        Command::Versions(cmd) => crate::history::versions(&root, cmd, quiet),
        Command::Gc {
            threshold,
            max_garbage,
            dry_run,
            peer_wait,
            json,
        } => crate::history::gc(
            &root,
            service::GcAsk {
                threshold,
                max_garbage,
                dry_run,
                peer_wait,
            },
            json,
            quiet,
        ),
        Command::Recover {
            version,
            snapshot,
            json,
        } => crate::history::recover(&root, version, snapshot, json, quiet),
        Command::Policy(PolicyCommand::Show { path, json }) => {
            crate::redundancy::policy_cmd(&root, path, json, quiet)
        }
        Command::Policy(PolicyCommand::Reload { json }) => {
            crate::branches::reload_cmd(&root, json, quiet)
        }
        Command::Status { json } => crate::redundancy::status_cmd(&root, json, quiet),
        Command::Scrub { json } => crate::redundancy::scrub_cmd(&root, json, quiet),
        Command::Branch(cmd) => crate::branches::run(&root, cmd, quiet),
        Command::Config(cmd) => crate::records::config_cmd(&root, cmd, quiet),
        Command::Key(cmd) => crate::records::key_cmd(&root, cmd, quiet),
        Command::Doctor { json, min_free } => crate::doctor::doctor(&root, json, min_free),
        Command::Completions { shell } => crate::doctor::completions(shell),
        Command::Man { dir } => crate::doctor::man(dir.as_deref()),
    }
}

fn init(root: &Path, quiet: bool) -> Result<ExitCode> {
    service::init(root, ops::lock_wait())?;
    if !quiet {
        say!("created a cairn repository at {}", root.display());
        say!("{}", ui::key_backup(root));
    }
    Ok(ExitCode::SUCCESS)
}

fn join_fs(root: &Path, other: &Path, client: Option<u16>, quiet: bool) -> Result<ExitCode> {
    let client = service::join(root, other, client, ops::lock_wait())?;
    out!("client {client}");
    if !quiet {
        say!(
            "created client {client} of the file system of {} at {}; mount both with the same --meta or --cluster URL",
            other.display(),
            root.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn put(root: &Path, args: &PutArgs, quiet: bool) -> Result<ExitCode> {
    let input = if args.file == Path::new("-") {
        let fd = std::io::stdin().as_fd().try_clone_to_owned();
        File::from(fd.context("cannot use standard input")?)
    } else {
        match File::open(&args.file) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                refuse!("{}: no such file", args.file.display())
            }
            Err(e) => return Err(e).context(format!("cannot open {}", args.file.display())),
        }
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
    let progress = ui::Bytes(pb);
    let answer = ops::call(root, &request, Some(&input), quiet, &progress);
    progress.0.finish_and_clear();
    let s = answer?.into_put()?;
    if args.json {
        out!("{}", ui::json(&s)?);
    } else if !quiet {
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
        refuse!("{} exists; give --force to overwrite it", path.display());
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
    let progress = ui::Bytes(pb);
    let answer = ops::call(root, &request, Some(&output), quiet, &progress);
    progress.0.finish_and_clear();
    let got = match answer.and_then(|r| Ok(r.into_get()?)) {
        Ok(got) => got,
        Err(e) => {
            // A file this command created holds nothing worth keeping.
            if let Some(path) = created {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    };
    if args.json {
        out!("{}", ui::json(&got)?);
    } else if !quiet && args.output.is_some() && !got.closed {
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

/// `restore --out DIR` as the daemon, which runs elsewhere, must be told
/// it: absolute (a relative DIR is this shell's), and text.
fn host_dir(dir: &Path) -> Result<String> {
    let abs = std::path::absolute(dir).with_context(|| format!("cannot find {}", dir.display()))?;
    match abs.into_os_string().into_string() {
        Ok(s) => Ok(s),
        Err(_) => bail!(
            "{}: --out takes a directory whose path is UTF-8",
            dir.display()
        ),
    }
}

fn roots(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let lines = ops::call(root, &Request::Roots, None, quiet, &service::Silent)?.into_roots()?;
    if json {
        out!("{}", ui::json(&lines)?);
        return Ok(ExitCode::SUCCESS);
    }
    let size = |line: &service::RootLine| match (&line.bytes, &line.error) {
        (Some(b), _) => ui::bytes(*b),
        (None, Some(e)) => format!("unreadable: {e}"),
        (None, None) => "-".into(),
    };
    let (versions, kept): (Vec<_>, Vec<_>) = lines
        .iter()
        .partition(|l| l.kind == service::RootKind::Version);
    for line in kept {
        out!("{:<40} {}", line.label, size(line));
    }
    if !versions.is_empty() {
        out!(
            "\nversions written by the file system, oldest first (`cairn restore version/N / --out DIR` writes one out):"
        );
        for line in versions {
            let created = line.created.map_or_else(|| "-".into(), ui::utc);
            out!("{:<40} {created:<20} {}", line.label, size(line));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn stats(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let report = ops::call(root, &Request::Stats, None, quiet, &service::Silent)?.into_stats()?;
    print_stats(root, &report, json)
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
    if let Some(rc) = &st.read_cache {
        out!(
            "read caches       DRAM {}; {} chunks read from the store since the mount",
            b(rc.dram_bytes),
            rc.store_chunk_reads
        );
        match &rc.tier {
            Some(t) => out!(
                "  cache tier      {} hits, {} misses, {} corrupt entries dropped; {} chunks ({} of {}); {} admitted ({}), {} skipped (over the write budget or writer busy)",
                t.hits,
                t.misses,
                t.corrupt,
                t.entries,
                b(t.bytes),
                b(t.size),
                t.admitted,
                b(t.admitted_bytes),
                t.skipped
            ),
            None => out!("  cache tier      off ([cache] dir in cairn.toml)"),
        }
    }
    for r in &st.unreadable_roots {
        out!("unreadable root   {r} (not counted; run `cairn check`)");
    }
    Ok(ExitCode::SUCCESS)
}

fn check(root: &Path, args: &CheckArgs, quiet: bool) -> Result<ExitCode> {
    let repair = match (args.repair, args.drop_lost) {
        (_, true) => Repair::DropLost,
        (true, false) => Repair::Rewrite,
        (false, false) => Repair::No,
    };
    // A mounted file system owns the index: ask its daemon.
    let steps = ui::Steps::new(quiet);
    let answer = service::control::call(root, &Request::Check, None, &steps);
    steps.finish();
    if let Some(reply) = answer? {
        let out = reply.into_check()?;
        if repair != Repair::No && !out.check.is_clean() {
            return Err(service::ServiceError::RepairWhileMounted.into());
        }
        return check_print(&out, args.json);
    }
    // An index that does not match the store is what check reports and
    // its repair rebuilds: neither refuses it at open.
    let repo = if repair != Repair::No {
        ops::open_for_rebuild(root, quiet)?
    } else {
        ops::open_to_check(root, quiet)?
    };
    let steps = ui::Steps::new(quiet);
    let out = service::check_repo(&repo, repair, &steps);
    steps.finish();
    check_print(&out?, args.json)
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

fn rebuild(root: &Path, json: bool, quiet: bool) -> Result<ExitCode> {
    let repo = ops::open_for_rebuild(root, quiet)?;
    let steps = ui::Steps::new(quiet);
    let r = service::rebuild_index(&repo, &steps);
    steps.finish();
    let r = r?;
    let damaged = r.problems.iter().any(Problem::is_damage);
    if json {
        out!("{}", ui::json(&r)?);
        return Ok(if damaged {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
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
        service::init(root, ops::lock_wait())?;
        out!("created a repository at {}", root.display());
        out!("{}", ui::key_backup(root));
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
                json: false,
            },
            quiet,
        )?;
    }
    let mut back_file = tempfile::tempfile().context("cannot create a temporary file")?;
    let request = Request::Get {
        label: labels[1].clone(),
    };
    ops::call(root, &request, Some(&back_file), quiet, &service::Silent)?.into_get()?;
    let mut back = Vec::new();
    back_file
        .seek(std::io::SeekFrom::Start(0))
        .and_then(|_| back_file.read_to_end(&mut back))
        .context("cannot read the temporary file back")?;
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
    let report = ops::call(root, &Request::Stats, None, quiet, &service::Silent)?.into_stats()?;
    print_stats(root, &report, false)
}

//! Power loss at thousands of points of a random workload loses nothing
//! that was synced, and never makes a file read wrong bytes.
//!
//! It lives with the garbage collector because its workload reaches every
//! layer that changes what is stored: the file system (files, versions,
//! snapshots), the chunk store and the collector.
//!
//! Every byte the file system stores (containers on the branch, the
//! fingerprint index, the roots, the metadata engine) goes through one
//! simulated power switch (`branch::crash`). For each seed, a workload of
//! creates, writes (inline and chunked, small and large, written behind),
//! overwrites, truncates, renames, unlinks, mkdirs and fsyncs runs once to
//! count its storage operations, then again with the power cut at one
//! operation after another: what was not synced is lost (the last write
//! torn, or any of them kept, torn or lost), the machine restarts on what
//! the disks kept, and
//! - the namespace and every file's content are exactly those of the last
//!   completed sync (or of a sync the cut interrupted): every fsynced file
//!   reads back exactly, and no file reads anything else;
//! - the metadata engine's invariants hold;
//! - the store's check finds no damage but the torn blob of a put the cut
//!   interrupted (only when the branch is allowed to tear puts);
//! - the file system takes new data and makes it durable.
//!
//! A failure names its seed and cut; `CAIRN_CRASH_SEED=SEED:CUT` replays
//! that case alone (and `CAIRN_CRASH_SEED=SEED` the seed's every cut).

mod power;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use branch::crash::{Change, Kept, Loss};
use cas::{ContainerId, Problem};
use fs::tree::{self, TreeContent};
use fs::Fs;
use gc::{GcOptions, Live};
use meta::{Content, FileKind, InodeId, NewInode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use power::model::{Model, Rooted, Snapshot, Tree};
use power::workload::{self, Op};
use power::{Disks, Running};

const SEEDS: u64 = 24;
/// Workload operations per seed, before the final sync.
const STEPS: usize = 36;
/// Power cuts per seed at most (spread over its operations).
const CUTS_PER_SEED: u64 = 110;
/// The whole test must cut the power at least this often.
const MIN_CUTS: u64 = 2000;
const WORKERS: usize = 2;

/// One power cut: the seed of the workload, the storage operation it falls
/// on (`None`: the reference run, cut after the last), how writes are lost.
#[derive(Clone, Copy)]
struct Case {
    seed: u64,
    at: Option<u64>,
    loss: Loss,
    tear: bool,
}

impl Case {
    fn new(seed: u64, at: Option<u64>) -> Case {
        let mut dice = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ at.unwrap_or(0));
        Case {
            seed,
            at,
            loss: if dice.gen_bool(0.5) {
                Loss::Tail
            } else {
                Loss::Scatter
            },
            tear: dice.gen_bool(0.3),
        }
    }

    /// The seed of the dice that decide what the disks keep.
    fn loss_seed(&self) -> u64 {
        self.seed ^ self.at.unwrap_or(u64::MAX).rotate_left(32)
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(
                f,
                "seed {}, power cut at storage operation {at} ({:?} loss{}); replay with \
                 CAIRN_CRASH_SEED={}:{at}",
                self.seed,
                self.loss,
                if self.tear { ", puts may tear" } else { "" },
                self.seed
            ),
            None => write!(
                f,
                "seed {}, reference run; replay with CAIRN_CRASH_SEED={}",
                self.seed, self.seed
            ),
        }
    }
}

/// What a run left to check: the states recovery may find, what became of
/// the branch's unsynced changes, the operations run.
struct Ran {
    candidates: Vec<Snapshot>,
    roots: BTreeMap<String, Rooted>,
    ops: u64,
    log: Vec<String>,
}

/// Runs the seed's workload until it ends (then syncs everything) or the
/// power goes off.
fn run_workload(running: &Running, seed: u64) -> Result<Ran, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    model.durable = model.snapshot();
    let mut log = Vec::new();
    let mut interrupted = None;
    for step in 0..=STEPS {
        if running.power.is_off() {
            break;
        }
        let op = if step == STEPS {
            Op::SyncAll
        } else {
            workload::next(&mut rng, &model)
        };
        log.push(op.to_string());
        match workload::apply(&running.fs, &mut model, &op) {
            Ok(()) if op.syncs() => model.durable = model.snapshot(),
            Ok(()) => {}
            Err(e) if running.power.is_off() => {
                if op.syncs() {
                    workload::synced(&mut model, &op);
                    interrupted = Some(model.snapshot());
                }
                workload::interrupted(&mut model, &op);
                log.push(format!("  failed after the power cut: {e}"));
                break;
            }
            Err(e) => {
                return Err(format!(
                    "{op} failed with the power on: {e}\noperations:\n{}",
                    log.join("\n")
                ))
            }
        }
    }
    let ops = running.power.ops();
    let mut candidates = vec![model.durable.clone()];
    candidates.extend(interrupted);
    Ok(Ran {
        candidates,
        roots: model.roots,
        ops,
        log,
    })
}

/// The namespace and every file's content as the file system serves them.
fn observe(fs: &Fs) -> Result<Snapshot, String> {
    let mut seen = Snapshot::default();
    let mut dirs = vec![InodeId::ROOT];
    while let Some(dir) = dirs.pop() {
        let entries = fs
            .readdir(dir, None, 10_000)
            .map_err(|e| format!("readdir of inode {}: {e}", dir.0))?;
        for entry in entries {
            let is_dir = entry.kind == FileKind::Dir;
            seen.entries
                .insert((dir.0, entry.name.clone()), (entry.ino.0, is_dir));
            if is_dir {
                if seen.entries.len() > 10_000 {
                    return Err("the namespace has a cycle".into());
                }
                dirs.push(entry.ino);
                continue;
            }
            let size = fs
                .getattr(entry.ino)
                .map_err(|e| format!("getattr of inode {}: {e}", entry.ino.0))?
                .attr
                .size;
            let bytes = fs
                .read(entry.ino, 0, size as u32)
                .map_err(|e| format!("reading inode {} ({size} bytes): {e}", entry.ino.0))?;
            if bytes.len() as u64 != size {
                return Err(format!(
                    "inode {} reads {} bytes of {size}",
                    entry.ino.0,
                    bytes.len()
                ));
            }
            seen.contents.insert(entry.ino.0, bytes.into());
        }
    }
    Ok(seen)
}

/// A namespace stored under a root (a version or a snapshot), by path.
fn materialize(store: &cas::Store, id: &cas::ChunkId) -> Result<Tree, String> {
    let record = tree::read_record(store, id).map_err(|e| format!("its record: {e}"))?;
    let TreeContent::Dir(root) = record.root.content else {
        return Err("its root is not a directory".into());
    };
    let mut out = Tree::new();
    let mut dirs = vec![(Vec::new(), root)];
    while let Some((at, listing)) = dirs.pop() {
        let entries = tree::read_listing(store, &listing)
            .map_err(|e| format!("the listing of {:?}: {e}", String::from_utf8_lossy(&at)))?;
        for e in entries {
            let mut path = at.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            let bytes = match e.content {
                TreeContent::Dir(listing) => {
                    if out.len() > 10_000 {
                        return Err("the stored tree has a cycle".into());
                    }
                    dirs.push((path.clone(), listing));
                    out.insert(path, None);
                    continue;
                }
                TreeContent::Empty => Vec::new(),
                TreeContent::Inline(bytes) => bytes,
                TreeContent::Recipe(id) => recipe::Recipe::open(store, id)
                    .and_then(|r| r.read_at(0, e.attr.size))
                    .map_err(|err| format!("reading {}: {err}", String::from_utf8_lossy(&path)))?,
            };
            out.insert(path, Some(Arc::new(bytes)));
        }
    }
    Ok(out)
}

/// Every root holds exactly the tree it was made from, and every root
/// whose creation returned (and that nothing may have deleted) is there.
fn check_roots(fs: &Fs, made: &BTreeMap<String, Rooted>) -> Result<(), String> {
    let store = fs.store();
    let found = store
        .list_roots()
        .map_err(|e| format!("listing the roots: {e}"))?;
    for (label, id) in &found {
        let Some(rooted) = made.get(label) else {
            return Err(format!(
                "root {label} is there but was never made, or was deleted"
            ));
        };
        let tree = materialize(store, id).map_err(|e| format!("root {label}: {e}"))?;
        if tree != rooted.tree {
            let differ: Vec<String> = tree
                .iter()
                .filter(|(path, bytes)| rooted.tree.get(*path) != Some(bytes))
                .chain(
                    rooted
                        .tree
                        .iter()
                        .filter(|(path, _)| !tree.contains_key(*path)),
                )
                .map(|(path, _)| String::from_utf8_lossy(path).into_owned())
                .take(8)
                .collect();
            return Err(format!(
                "root {label} differs from the tree it was made from at {differ:?}"
            ));
        }
    }
    let missing: Vec<&String> = made
        .iter()
        .filter(|(label, r)| r.must && !found.iter().any(|(l, _)| l == *label))
        .map(|(label, _)| label)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("roots made and not deleted are gone: {missing:?}"))
    }
}

fn collect(fs: &Fs) -> Result<(), gc::GcError> {
    let options = GcOptions {
        threshold: 1.0,
        dry_run: false,
    };
    gc::collect(fs.store(), Live::Mounted(fs), options, &|_| {}).map(drop)
}

/// Containers whose put the cut tore (only a tearing branch tears them).
fn torn_containers(outcomes: &[branch::crash::Outcome]) -> HashSet<String> {
    outcomes
        .iter()
        .filter_map(|o| match (&o.change, o.kept) {
            (Change::Put { key, .. }, Kept::Prefix(_)) => {
                ContainerId::from_blob_key(key).map(|c| c.to_string())
            }
            _ => None,
        })
        .collect()
}

/// Writes a new file after the recovery and reads it back.
fn still_works(fs: &Fs) -> Result<(), String> {
    let new = NewInode {
        kind: FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
    };
    let bytes: Vec<u8> = (0..60_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let run = || -> fs::Result<Vec<u8>> {
        let ino = fs
            .create(InodeId::ROOT, b"written-after-the-crash", new)?
            .id;
        fs.open(ino)?;
        fs.write(ino, 0, &bytes)?;
        fs.fsync(ino)?;
        fs.release(ino)?;
        fs.read(ino, 0, bytes.len() as u32)
    };
    match run() {
        Ok(read) if read == bytes => Ok(()),
        Ok(_) => Err("a file written after the recovery reads back different bytes".into()),
        Err(e) => Err(format!("writing after the recovery failed: {e}")),
    }
}

/// Runs one case on a copy of the clean disks; returns how many storage
/// operations its workload made.
fn run_case(clean: &Disks, dir: &Path, case: Case) -> Result<u64, String> {
    let disks = clean.copy(dir);
    let running = disks.boot(case.tear);
    if let Some(at) = case.at {
        running.power.crash_after(at, case.loss, case.loss_seed());
    }
    let ran = run_workload(&running, case.seed)?;
    running.power.cut(case.loss, case.loss_seed());
    let (disks, outcomes) = running.recover(&disks);
    let running = disks.boot(false);
    let fail = |what: String| {
        format!(
            "{what}\nthe branch's unsynced changes: {outcomes:?}\noperations:\n{}",
            ran.log.join("\n")
        )
    };
    let seen = observe(&running.fs).map_err(fail)?;
    if !ran.candidates.contains(&seen) {
        let diffs: Vec<String> = ran
            .candidates
            .iter()
            .map(|c| format!("  against a state synced: {}", seen.diff(c)))
            .collect();
        return Err(fail(format!(
            "the recovered file system is not a state that was synced:\n{}",
            diffs.join("\n")
        )));
    }
    let problems = running
        .meta
        .verify()
        .map_err(|e| fail(format!("verifying the metadata failed: {e}")))?;
    if !problems.is_empty() {
        return Err(fail(format!("the metadata is inconsistent: {problems:?}")));
    }
    let report = running
        .fs
        .store()
        .check(&|_| {})
        .map_err(|e| fail(format!("the store's check failed: {e}")))?;
    let torn = torn_containers(&outcomes);
    let unexplained: Vec<&Problem> = report
        .problems
        .iter()
        .filter(|p| match p {
            Problem::CorruptContainer { container, .. } => !torn.contains(container),
            other => other.is_damage(),
        })
        .collect();
    if !unexplained.is_empty() {
        return Err(fail(format!(
            "the store's check found damage the cut does not explain: {unexplained:?}"
        )));
    }
    check_roots(&running.fs, &ran.roots).map_err(fail)?;
    collect(&running.fs).map_err(|e| fail(format!("a collection after the recovery: {e}")))?;
    let again = observe(&running.fs).map_err(fail)?;
    if again != seen {
        return Err(fail(format!(
            "a collection after the recovery changed the file system: {}",
            again.diff(&seen)
        )));
    }
    still_works(&running.fs).map_err(fail)?;
    Ok(ran.ops)
}

/// The cuts for a workload of `total` storage operations: all of them, or
/// `CUTS_PER_SEED` spread evenly with a seeded offset.
fn cuts(seed: u64, total: u64) -> Vec<u64> {
    if total <= CUTS_PER_SEED {
        return (1..=total).collect();
    }
    let stride = total as f64 / CUTS_PER_SEED as f64;
    let offset = StdRng::seed_from_u64(seed).gen_range(0.0..stride);
    (0..CUTS_PER_SEED)
        .map(|i| 1 + (offset + i as f64 * stride) as u64)
        .collect()
}

/// Runs a case, turning a panic into a failure that names the case.
fn checked(clean: &Disks, root: &Path, case: Case) -> Result<u64, String> {
    let dir = root.join(format!("{}-{}", case.seed, case.at.unwrap_or(0)));
    let result = panic::catch_unwind(AssertUnwindSafe(|| run_case(clean, &dir, case)));
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(Ok(ops)) => Ok(ops),
        Ok(Err(message)) => Err(format!("{case}\n{message}")),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("{case}: panicked: {message}"))
        }
    }
}

/// `SEED` or `SEED:CUT` from `CAIRN_CRASH_SEED`.
fn replay() -> Option<(u64, Option<u64>)> {
    let value = std::env::var("CAIRN_CRASH_SEED").ok()?;
    let parse = |s: &str| {
        s.trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("CAIRN_CRASH_SEED={value}: want SEED or SEED:CUT"))
    };
    Some(match value.split_once(':') {
        Some((seed, at)) => (parse(seed), Some(parse(at))),
        None => (parse(&value), None),
    })
}

/// Where the branches live: memory-backed when the machine has a tmpfs,
/// since the test syncs thousands of times.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

#[test]
fn power_loss_at_thousands_of_points_keeps_every_synced_file() {
    let root = scratch();
    let clean = Disks::new(&root.path().join("clean"));
    let seeds: Vec<(u64, Option<u64>)> = match replay() {
        Some(one) => vec![one],
        None => (0..SEEDS).map(|s| (s, None)).collect(),
    };
    let next = AtomicU64::new(0);
    let cut = AtomicU64::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&(seed, only)) = seeds.get(i) else {
                    return;
                };
                if let Some(at) = only {
                    if let Err(e) = checked(&clean, root.path(), Case::new(seed, Some(at))) {
                        failures.lock().unwrap().push(e);
                    }
                    cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let total = match checked(&clean, root.path(), Case::new(seed, None)) {
                    Ok(total) => {
                        println!("seed {seed}: {total} storage operations");
                        total
                    }
                    Err(e) => {
                        failures.lock().unwrap().push(e);
                        continue;
                    }
                };
                for at in cuts(seed, total) {
                    if failures.lock().unwrap().len() >= 3 {
                        return;
                    }
                    if let Err(e) = checked(&clean, root.path(), Case::new(seed, Some(at))) {
                        failures.lock().unwrap().push(e);
                    }
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!("{} power cuts", cut.load(Ordering::Relaxed));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    if replay().is_none() {
        let cut = cut.into_inner();
        assert!(cut >= MIN_CUTS, "only {cut} power cuts were made");
    }
}

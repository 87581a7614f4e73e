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
//! overwrites, truncates, renames, hard links, unlinks, mkdirs, fsyncs,
//! versions, snapshots and garbage collections runs once to count its
//! storage operations, then again with the power cut at one operation after
//! another: what was not synced is lost (the last write torn, or any of
//! them kept, torn or lost), the machine restarts on what the disks kept,
//! and
//! - the namespace and every file's content are exactly those of the last
//!   completed sync (or of a sync the cut interrupted): every fsynced file
//!   reads back exactly, and no file reads anything else;
//! - the metadata engine's invariants hold;
//! - the store's check finds no damage but the torn blob of a put the cut
//!   interrupted (only when the branch is allowed to tear puts);
//! - every version and snapshot holds exactly the tree it was made from,
//!   and none whose creation returned is lost;
//! - a garbage collection changes nothing a reader sees, and the file
//!   system takes new data and makes it durable.
//!
//! A third of the cases cut the power a second time while the machine
//! restarts and is checked, then restart and check again.
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

use branch::crash::{Change, Kept, Loss, Power};
use branch::Branch;
use cas::{ContainerId, Problem};
use fs::tree::{self, TreeContent};
use fs::Fs;
use gc::{GcOptions, Live};
use meta::{Content, FileKind, InodeId, NewInode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use power::model::{Model, Rooted, Snapshot, Tree};
use power::workload::{self, Op};
use power::{Broken, Disks};

const SEEDS: u64 = 24;
/// Workload operations per seed, before the final sync.
const STEPS: usize = 36;
/// Power cuts per seed at most (spread over its operations).
const CUTS_PER_SEED: u64 = 110;
/// The whole test must cut the power at least this often.
const MIN_CUTS: u64 = 2000;
const WORKERS: usize = 2;
/// A second cut, in some cases, falls on one of the restart's first this
/// many storage operations (a restart and its checks make 80 to 110).
const RESTART_OPS: u64 = 100;

/// One power cut: the seed of the workload, the storage operation it falls
/// on (`None`: the reference run, cut after the last), how writes are lost,
/// and for some cases a second cut while the machine restarts.
#[derive(Clone, Copy)]
struct Case {
    seed: u64,
    at: Option<u64>,
    loss: Loss,
    tear: bool,
    /// The storage operation of the restart that a second cut falls on.
    again: Option<u64>,
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
            again: (at.is_some() && dice.gen_bool(0.3)).then(|| dice.gen_range(1..=RESTART_OPS)),
        }
    }

    /// The seed of the dice that decide what the disks keep at cut `n`.
    fn loss_seed(&self, n: u64) -> u64 {
        (self.seed ^ self.at.unwrap_or(u64::MAX).rotate_left(32)).wrapping_add(n)
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(at) = self.at else {
            return write!(
                f,
                "seed {}, reference run; replay with CAIRN_CRASH_SEED={}",
                self.seed, self.seed
            );
        };
        write!(
            f,
            "seed {}, power cut at storage operation {at} ({:?} loss{})",
            self.seed,
            self.loss,
            if self.tear { ", puts may tear" } else { "" },
        )?;
        if let Some(again) = self.again {
            write!(f, " and again at operation {again} of the restart")?;
        }
        write!(f, "; replay with CAIRN_CRASH_SEED={}:{at}", self.seed)
    }
}

/// What a run left to check: the states recovery may find, the roots made,
/// the operations run.
struct Ran {
    candidates: Vec<Snapshot>,
    roots: BTreeMap<String, Rooted>,
    ops: u64,
    log: Vec<String>,
}

/// Runs the seed's workload until it ends (then syncs everything) or the
/// power goes off.
fn run_workload(power: &Power, fs: &Fs, seed: u64) -> Result<Ran, Broken> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    model.durable = model.snapshot();
    let mut log = Vec::new();
    let mut interrupted = None;
    for step in 0..=STEPS {
        if power.is_off() {
            break;
        }
        let op = if step == STEPS {
            Op::SyncAll
        } else {
            workload::next(&mut rng, &model)
        };
        log.push(op.to_string());
        match workload::apply(fs, &mut model, &op) {
            Ok(()) if op.syncs() => model.durable = model.snapshot(),
            Ok(()) => {}
            Err(e) if power.is_off() => {
                if op.syncs() {
                    workload::synced(&mut model, &op);
                    interrupted = Some(model.snapshot());
                }
                workload::interrupted(&mut model, &op);
                log.push(format!("  failed after the power cut: {e}"));
                break;
            }
            Err(e) => {
                return Err(Broken::After {
                    inner: Box::new(Broken::failed(format!("{op} failed with the power on"))(e)),
                    history: format!("operations:\n{}", log.join("\n")),
                })
            }
        }
    }
    let mut candidates = vec![model.durable.clone()];
    candidates.extend(interrupted);
    Ok(Ran {
        candidates,
        roots: model.roots,
        ops: power.ops(),
        log,
    })
}

/// The namespace and every file's content as the file system serves them.
fn observe(fs: &Fs, branch: &dyn Branch) -> Result<Snapshot, Broken> {
    let mut seen = Snapshot::default();
    let mut dirs = vec![InodeId::ROOT];
    while let Some(dir) = dirs.pop() {
        let entries = fs
            .readdir(dir, None, 10_000)
            .map_err(Broken::failed(format!("readdir of inode {}", dir.0)))?;
        for entry in entries {
            let is_dir = entry.kind == FileKind::Dir;
            seen.entries
                .insert((dir.0, entry.name.clone()), (entry.ino.0, is_dir));
            if is_dir {
                if seen.entries.len() > 10_000 {
                    return Err(Broken::Differs("the namespace has a cycle".into()));
                }
                dirs.push(entry.ino);
                continue;
            }
            let size = fs
                .getattr(entry.ino)
                .map_err(Broken::failed(format!("getattr of inode {}", entry.ino.0)))?
                .attr
                .size;
            let bytes = fs.read(entry.ino, 0, size as u32).map_err(|e| {
                let found = whereabouts(branch, &e);
                Broken::failed(format!(
                    "reading inode {} ({size} bytes){found}",
                    entry.ino.0
                ))(e)
            })?;
            if bytes.len() as u64 != size {
                return Err(Broken::Differs(format!(
                    "inode {} reads {} bytes of {size}",
                    entry.ino.0,
                    bytes.len()
                )));
            }
            seen.contents.insert(entry.ino.0, bytes.into());
        }
    }
    Ok(seen)
}

/// For a chunk the store does not know: which containers on the branch
/// hold it anyway, for the failure message.
fn whereabouts(branch: &dyn Branch, e: &fs::FsError) -> String {
    let fs::FsError::Store(store) = e else {
        return String::new();
    };
    let cas::CasError::UnknownChunk(id) = store.as_ref() else {
        return String::new();
    };
    let Ok(keys) = branch.list(ContainerId::list_prefix()) else {
        return " (the branch cannot be listed)".into();
    };
    let holders: Vec<String> = keys
        .iter()
        .filter_map(|key| {
            let c = ContainerId::from_blob_key(key)?;
            let bytes = branch.get(key).ok()?;
            let entries = cas::container::parse(c, &bytes).ok()?;
            entries
                .iter()
                .any(|(chunk, _)| chunk == id)
                .then(|| c.to_string())
        })
        .collect();
    format!(" (containers on the branch that hold it: {holders:?})")
}

/// A namespace stored under a root (a version or a snapshot), by path.
fn materialize(store: &cas::Store, id: &cas::ChunkId) -> Result<Tree, Broken> {
    let record = tree::read_record(store, id).map_err(Broken::failed("its record"))?;
    let TreeContent::Dir(root) = record.root.content else {
        return Err(Broken::Differs("its root is not a directory".into()));
    };
    let mut out = Tree::new();
    let mut dirs = vec![(Vec::new(), root)];
    while let Some((at, listing)) = dirs.pop() {
        let entries = tree::read_listing(store, &listing).map_err(Broken::failed(format!(
            "the listing of {:?}",
            String::from_utf8_lossy(&at)
        )))?;
        for e in entries {
            let mut path = at.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            let bytes = match e.content {
                TreeContent::Dir(listing) => {
                    if out.len() > 10_000 {
                        return Err(Broken::Differs("the stored tree has a cycle".into()));
                    }
                    dirs.push((path.clone(), listing));
                    out.insert(path, None);
                    continue;
                }
                TreeContent::Empty => Vec::new(),
                TreeContent::Inline(bytes) => bytes,
                TreeContent::Recipe(id) => recipe::Recipe::open(store, id)
                    .and_then(|r| r.read_at(0, e.attr.size))
                    .map_err(Broken::failed(format!(
                        "reading {}",
                        String::from_utf8_lossy(&path)
                    )))?,
            };
            out.insert(path, Some(Arc::new(bytes)));
        }
    }
    Ok(out)
}

/// Every root holds exactly the tree it was made from, and every root
/// whose creation returned (and that nothing may have deleted) is there.
fn check_roots(fs: &Fs, made: &BTreeMap<String, Rooted>) -> Result<(), Broken> {
    let store = fs.store();
    let found = store
        .list_roots()
        .map_err(Broken::failed("listing the roots"))?;
    for (label, id) in &found {
        let Some(rooted) = made.get(label) else {
            return Err(Broken::Differs(format!(
                "root {label} is there but was never made, or was deleted"
            )));
        };
        let tree = materialize(store, id).map_err(|e| e.within(format!("root {label}")))?;
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
            return Err(Broken::Differs(format!(
                "root {label} differs from the tree it was made from at {differ:?}"
            )));
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
        Err(Broken::Differs(format!(
            "roots made and not deleted are gone: {missing:?}"
        )))
    }
}

fn collect(fs: &Fs) -> Result<(), gc::GcError> {
    let options = GcOptions {
        threshold: 1.0,
        dry_run: false,
        max_garbage: 1.0,
        compact_index: false,
        peer_wait: gc::PEER_WAIT,
    };
    gc::collect(fs.store(), Live::Mounted(fs), options, &|_| {}).map(drop)
}

/// Containers whose put the cut tore (only a tearing branch tears them).
fn torn_containers(outcomes: &[branch::crash::Outcome]) -> HashSet<ContainerId> {
    outcomes
        .iter()
        .filter_map(|o| match (&o.change, o.kept) {
            (Change::Put { key, .. }, Kept::Prefix(_)) => ContainerId::from_blob_key(key),
            _ => None,
        })
        .collect()
}

/// The files each restart writes to see that the file system still works.
const PROBE: &[u8] = b"written-after-restart-";

fn probe_bytes() -> Vec<u8> {
    (0..60_000u32).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Takes the restarts' probe files out of what was seen, once they are
/// found whole (a probe is there only if its fsync made it durable).
fn without_probes(mut seen: Snapshot) -> Result<Snapshot, Broken> {
    let probes: Vec<((u64, Vec<u8>), u64)> = seen
        .entries
        .iter()
        .filter(|((parent, name), _)| *parent == InodeId::ROOT.0 && name.starts_with(PROBE))
        .map(|(key, (ino, _))| (key.clone(), *ino))
        .collect();
    for (key, ino) in probes {
        if seen.contents.get(&ino).map(|b| b.as_slice()) != Some(&probe_bytes()[..]) {
            return Err(Broken::Differs(format!(
                "{} reads other bytes than were written and fsynced",
                String::from_utf8_lossy(&key.1)
            )));
        }
        seen.entries.remove(&key);
        seen.contents.remove(&ino);
    }
    Ok(seen)
}

/// Writes a new file after a restart, fsyncs it and reads it back.
fn still_works(fs: &Fs, restart: u32) -> Result<(), Broken> {
    let new = NewInode {
        kind: FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    };
    let bytes = probe_bytes();
    let name = [PROBE, restart.to_string().as_bytes()].concat();
    let run = || -> fs::Result<Vec<u8>> {
        let ino = fs.create(InodeId::ROOT, &name, new)?.id;
        fs.open(ino)?;
        fs.write(ino, 0, &bytes)?;
        fs.fsync(ino)?;
        fs.release(ino)?;
        fs.read(ino, 0, bytes.len() as u32)
    };
    match run() {
        Ok(read) if read == bytes => Ok(()),
        Ok(_) => Err(Broken::Differs(
            "a file written after the restart reads back different bytes".into(),
        )),
        Err(e) => Err(Broken::failed("writing after the restart")(e)),
    }
}

/// What a restart must find.
struct Expected<'a> {
    candidates: &'a [Snapshot],
    roots: &'a BTreeMap<String, Rooted>,
    /// Containers whose put a cut tore.
    torn: &'a HashSet<ContainerId>,
}

/// Restarts the machine on what the disks kept and checks everything.
fn restart(disks: &Disks, expected: &Expected<'_>, n: u32) -> Result<(), Broken> {
    let running = disks.boot()?;
    let fs = &running.fs;
    let seen = observe(fs, &*disks.branch)?;
    let found = without_probes(seen.clone())?;
    if !expected.candidates.contains(&found) {
        let diffs: Vec<String> = expected
            .candidates
            .iter()
            .map(|c| format!("  against a state synced: {}", found.diff(c)))
            .collect();
        return Err(Broken::Differs(format!(
            "the recovered file system is not a state that was synced:\n{}",
            diffs.join("\n")
        )));
    }
    let problems = running
        .meta
        .verify()
        .map_err(Broken::failed("verifying the metadata"))?;
    if !problems.is_empty() {
        return Err(Broken::Differs(format!(
            "the metadata is inconsistent: {problems:?}"
        )));
    }
    let report = fs
        .store()
        .check(&|_| {})
        .map_err(Broken::failed("the store's check"))?;
    let unexplained: Vec<&Problem> = report
        .problems
        .iter()
        .filter(|p| match p {
            Problem::CorruptContainer { container, .. } => !expected.torn.contains(container),
            other => other.is_damage(),
        })
        .collect();
    if !unexplained.is_empty() {
        return Err(Broken::Differs(format!(
            "the store's check found damage the cuts do not explain: {unexplained:?}"
        )));
    }
    check_roots(fs, expected.roots)?;
    collect(fs).map_err(Broken::failed("a collection after the restart"))?;
    let again = observe(fs, &*disks.branch).map_err(|e| e.within("after a collection"))?;
    if again != seen {
        return Err(Broken::Differs(format!(
            "a collection after the restart changed the file system: {}",
            again.diff(&seen)
        )));
    }
    still_works(fs, n)
}

/// Runs one case on a copy of the clean disks; returns how many storage
/// operations its workload made.
fn run_case(clean: &Disks, dir: &Path, case: Case) -> Result<u64, Broken> {
    let disks = clean.copy(dir, case.tear);
    let running = disks.boot()?;
    if let Some(at) = case.at {
        disks.power.crash_after(at, case.loss, case.loss_seed(0));
    }
    let ran = run_workload(&disks.power, &running.fs, case.seed)?;
    disks.power.cut(case.loss, case.loss_seed(0));
    drop(running);
    let (mut disks, outcomes) = disks.recover();
    let fail = |inner: Broken| Broken::After {
        inner: Box::new(inner),
        history: format!(
            "the branch's unsynced changes: {outcomes:?}\noperations:\n{}",
            ran.log.join("\n")
        ),
    };
    let mut torn = torn_containers(&outcomes);
    if let Some(again) = case.again {
        disks.power.crash_after(again, case.loss, case.loss_seed(1));
        let expected = Expected {
            candidates: &ran.candidates,
            roots: &ran.roots,
            torn: &torn,
        };
        match restart(&disks, &expected, 1) {
            Err(e) if !disks.power.is_off() => {
                return Err(fail(e.within("the restart before the second cut")))
            }
            _ => disks.power.cut(case.loss, case.loss_seed(1)),
        }
        let (recovered, outcomes) = disks.recover();
        torn.extend(torn_containers(&outcomes));
        disks = recovered;
    }
    let expected = Expected {
        candidates: &ran.candidates,
        roots: &ran.roots,
        torn: &torn,
    };
    restart(&disks, &expected, 2).map_err(fail)?;
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
fn checked(clean: &Disks, root: &Path, case: Case) -> Result<u64, Broken> {
    let dir = root.join(format!("{}-{}", case.seed, case.at.unwrap_or(0)));
    let result = panic::catch_unwind(AssertUnwindSafe(|| run_case(clean, &dir, case)));
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(Ok(ops)) => Ok(ops),
        Ok(Err(inner)) => Err(Broken::Case {
            case: case.to_string(),
            inner: Box::new(inner),
        }),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Broken::Panicked {
                case: case.to_string(),
                message,
            })
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
    let report: Vec<String> = failures.iter().map(Broken::to_string).collect();
    assert!(failures.is_empty(), "{}", report.join("\n\n"));
    if replay().is_none() {
        let cut = cut.into_inner();
        assert!(cut >= MIN_CUTS, "only {cut} power cuts were made");
    }
}

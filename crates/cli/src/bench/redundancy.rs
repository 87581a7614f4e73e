//! `cairn bench redundancy`: the redundancy layer over real local-directory
//! branches, as `bench/README.md` describes. One run prints one table:
//! healthy writes and reads per policy, degraded reads, a branch rebuild,
//! and a mirror with one slow branch.

use parking_lot::Mutex;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use branch::{BlobKey, Branch, Fault, FaultControl, FaultyBranch, LocalDir};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use rayon::prelude::*;
use redundancy::{BranchId, Policy, Redundant};
use serde::Serialize;

use crate::args::RedundancyBenchArgs;

mod put;

/// Enough for the widest policy, rs:8+3, plus the empty branch a rebuild
/// fills.
const BRANCHES: usize = 12;
const SPARE: BranchId = BranchId(BRANCHES as u16 - 1);
const POLICIES: [&str; 5] = ["single", "mirror:2", "parity:4", "rs:4+2", "rs:8+3"];
/// (policy, branches lost) for the degraded reads.
const DEGRADED: [(&str, usize); 5] = [
    ("parity:4", 1),
    ("rs:4+2", 1),
    ("rs:4+2", 2),
    ("rs:8+3", 1),
    ("rs:8+3", 2),
];
const WRITE_TARGET: f64 = 0.8;
const SLOW_TARGET: f64 = 0.10;
const MB: f64 = 1e6;

pub fn run(args: RedundancyBenchArgs) -> Result<ExitCode> {
    if args.mib == 0 || args.container_mib == 0 || args.in_flight == 0 || args.rounds == 0 {
        bail!("--mib, --container-mib, --in-flight and --rounds must be at least 1");
    }
    let scratch = tempfile::Builder::new()
        .prefix("cairn-redbench-")
        .tempdir_in(&args.dir)
        .with_context(|| format!("cannot make a scratch directory in {}", args.dir.display()))?;
    let mut bench = Bench::new(&args, scratch.path())?;
    let outcome = bench.run_all();
    if args.keep {
        say!("kept {}", scratch.keep().display());
    }
    outcome?;
    bench.print();
    if let Some(out) = &args.json {
        bench.write_json(&args, out)?;
    }
    let mismatches = bench.mismatches.into_inner();
    if mismatches.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for m in &mismatches {
        say!("MISMATCH: {m}");
    }
    Ok(ExitCode::from(2))
}

/// One local-directory branch and the switches the benchmark flips on it.
struct Slot {
    dir: PathBuf,
    branch: Arc<dyn Branch>,
    fault: FaultControl,
    slow: Arc<AtomicBool>,
}

#[derive(Serialize)]
struct Row {
    section: &'static str,
    case: String,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    /// MB/s relative to the row named by `vs`.
    ratio: Option<f64>,
    vs: Option<String>,
    target: Option<String>,
    met: Option<bool>,
    /// Read from a page cache that could not be dropped.
    warm: bool,
    note: String,
}

struct Bench {
    scratch: PathBuf,
    store: Arc<Redundant>,
    /// A branch used without the layer: each container one blob, the disk's
    /// own pace for the write section's bounds.
    raw: LocalDir,
    slots: Vec<Slot>,
    data: Vec<Vec<u8>>,
    in_flight: usize,
    rounds: usize,
    rows: Vec<Row>,
    /// Read-back checks that failed; the run goes on and exits 2.
    mismatches: Mutex<Vec<String>>,
    /// Whether any read ran with a warm page cache.
    warm: AtomicBool,
}

/// Containers of one policy over the first `policy.width()` branches, so
/// every lost branch touches every container.
struct Set {
    policy: Policy,
    allowed: Vec<BranchId>,
    tag: String,
}

impl Set {
    fn new(text: &str) -> Set {
        let policy: Policy = text.parse().expect("the benchmark's policies parse");
        let allowed = (0..policy.width() as u16).map(BranchId).collect();
        Set {
            tag: text.replace([':', '+'], "-"),
            policy,
            allowed,
        }
    }

    fn key(&self, i: usize) -> BlobKey {
        BlobKey::new(format!("bench/{}/{i:06}", self.tag)).expect("a valid key")
    }
}

/// What one timed pass over every container of a set took.
struct Pass {
    seconds: f64,
    bytes: u64,
    warm: bool,
}

impl Pass {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / MB / self.seconds
    }
}

impl Bench {
    fn new(args: &RedundancyBenchArgs, scratch: &Path) -> Result<Bench> {
        let mut slots = Vec::new();
        for i in 0..BRANCHES {
            let name = format!("b{i:02}");
            let dir = scratch.join(&name);
            let (local, _) = LocalDir::open(name, &dir)?;
            let slow = Arc::new(AtomicBool::new(false));
            let slower = Slower {
                inner: Arc::new(local),
                on: slow.clone(),
            };
            let faulty = FaultyBranch::new(Arc::new(slower));
            let fault = faulty.control();
            slots.push(Slot {
                dir,
                branch: Arc::new(faulty),
                fault,
                slow,
            });
        }
        let store = Arc::new(Redundant::new(
            slots.iter().map(|s| s.branch.clone()).collect(),
        )?);
        let total = args.mib << 20;
        let size = args.container_mib << 20;
        let count = total.div_ceil(size) as usize;
        say!(
            "generating {} MiB of random data (seed {}) in {count} containers of {} MiB; branches in {}",
            args.mib,
            args.seed,
            args.container_mib,
            scratch.display()
        );
        let data = (0..count)
            .into_par_iter()
            .map(|i| {
                let len = size.min(total - i as u64 * size) as usize;
                let mut rng = StdRng::seed_from_u64(args.seed.wrapping_add(i as u64));
                let mut bytes = vec![0u8; len];
                rng.fill_bytes(&mut bytes);
                bytes
            })
            .collect();
        let (raw, _) = LocalDir::open("raw", scratch.join("raw"))?;
        Ok(Bench {
            scratch: scratch.to_path_buf(),
            store,
            raw,
            slots,
            data,
            in_flight: args.in_flight,
            rounds: args.rounds,
            rows: Vec::new(),
            mismatches: Mutex::new(Vec::new()),
            warm: AtomicBool::new(false),
        })
    }

    fn total_bytes(&self) -> u64 {
        self.data.iter().map(|d| d.len() as u64).sum()
    }

    /// Runs the sections; the rebuild goes last because it deletes a
    /// branch and every container but its own set's.
    fn run_all(&mut self) -> Result<()> {
        self.healthy()?;
        self.degraded()?;
        self.slow_mirror()?;
        self.rebuild()?;
        let rows = put::section(&self.scratch, &self.data, self.rounds)?;
        self.rows.extend(rows);
        let order = ["write", "put", "read", "degraded", "rebuild", "slow"];
        self.rows
            .sort_by_key(|r| order.iter().position(|s| *s == r.section));
        Ok(())
    }

    fn healthy(&mut self) -> Result<()> {
        // Rounds of all five, alternating, like the reads: a write pass is
        // short, and this disk's speed swings within a minute. Every round
        // but the last deletes what it wrote (untimed).
        let mut writes: Vec<Vec<Pass>> = POLICIES.iter().map(|_| Vec::new()).collect();
        let mut raw = Vec::new();
        for round in 1..=self.rounds {
            say!(
                "writing to a branch without the layer (round {round} of {})",
                self.rounds
            );
            raw.push(self.raw_write_pass()?);
            for (text, all) in POLICIES.iter().zip(&mut writes) {
                let set = Set::new(text);
                say!("writing {text} (round {round} of {})", self.rounds);
                all.push(self.write_pass(&set)?);
                if round < self.rounds {
                    for i in 0..self.data.len() {
                        self.store.delete(&set.key(i))?;
                    }
                }
            }
        }
        let (raw_pass, raw_spread) = median(&mut raw);
        let disk = raw_pass.mb_per_s();
        let mut row = new_row("write", "raw branch, no layer".into(), raw_pass);
        row.note = format!(
            "each container one blob on one branch, fsync'd: the disk's pace; {raw_spread}"
        );
        let mut raw_row = row;
        let mut base = None;
        for (text, mut all) in POLICIES.into_iter().zip(writes) {
            let set = Set::new(text);
            let (pass, spread) = median(&mut all);
            let stored = shards_bytes(&set, pass.bytes);
            let mut row = new_row("write", text.to_string(), pass);
            let single = *base.get_or_insert(pass.mb_per_s());
            row.ratio = Some(pass.mb_per_s() / single);
            row.vs = Some("single".into());
            if matches!(set.policy, Policy::ReedSolomon { .. }) {
                row.target = Some(format!(">= {WRITE_TARGET:.2}x single"));
                row.met = row.ratio.map(|r| r >= WRITE_TARGET);
            }
            // All shards share one disk: writing `stored` bytes at the raw
            // branch's pace is as fast as this policy can go here.
            let bound = disk * pass.bytes as f64 / stored as f64;
            row.note = format!(
                "{:.0} MB of shards over {} branch(es), each fsync'd; one-disk bound {:.0} MB/s \
                 ({:.2}x single), reached {:.0}%; {spread}",
                stored as f64 / MB,
                set.allowed.len(),
                bound,
                bound / single,
                100.0 * pass.mb_per_s() / bound,
            );
            self.rows.push(row);
        }
        raw_row.ratio = base.map(|single| disk / single);
        raw_row.vs = Some("single".into());
        self.rows.push(raw_row);
        // Rounds of all five, alternating, so that what disturbs one pass
        // (the first one after the writes, say) shows in the range.
        let mut passes: Vec<Vec<Pass>> = POLICIES.iter().map(|_| Vec::new()).collect();
        for round in 1..=self.rounds {
            for (text, all) in POLICIES.iter().zip(&mut passes) {
                say!("reading {text} (round {round} of {})", self.rounds);
                all.push(self.read_pass(&Set::new(text), text)?);
            }
        }
        let mut base = None;
        for (text, mut all) in POLICIES.into_iter().zip(passes) {
            let (pass, spread) = median(&mut all);
            let mut row = new_row("read", text.to_string(), pass);
            let single = *base.get_or_insert(pass.mb_per_s());
            row.ratio = Some(pass.mb_per_s() / single);
            row.vs = Some("single".into());
            row.note = spread;
            self.rows.push(row);
        }
        Ok(())
    }

    fn degraded(&mut self) -> Result<()> {
        for (text, lost) in DEGRADED {
            let set = Set::new(text);
            let healthy = self
                .rows
                .iter()
                .find(|r| r.section == "read" && r.case == text)
                .map(|r| r.mb_per_s)
                .expect("healthy reads ran first");
            for slot in &self.slots[..lost] {
                slot.fault.set(Fault::Vanished);
            }
            let gone: Vec<String> = (0..lost as u16)
                .filter_map(|i| self.store.branch_name(BranchId(i)))
                .collect();
            let case = format!("{text}, {lost} of {} gone", set.allowed.len());
            say!("reading {case}");
            let pass = self.read_pass(&set, &case);
            for (i, slot) in self.slots[..lost].iter().enumerate() {
                slot.fault.heal();
                self.store.reset_health(BranchId(i as u16));
            }
            let pass = pass?;
            let mut row = new_row("degraded", case, &pass);
            row.ratio = Some(pass.mb_per_s() / healthy);
            row.vs = Some(format!("{text} read"));
            row.note = format!("branch {} vanished", gone.join(", "));
            self.rows.push(row);
        }
        Ok(())
    }

    /// mirror:2 read with both branches at normal speed, then with the
    /// second branch's reads taking twice as long, balancing off and on.
    /// The three alternate for `rounds` rounds and each reports its median
    /// pass, as the target tells figures 10% apart on a noisy disk.
    /// Balancing-on passes inherit the latency estimates earlier passes
    /// left, as a store that has been running would have them.
    fn slow_mirror(&mut self) -> Result<()> {
        let set = Set::new("mirror:2");
        let runs = [
            ("both branches normal", false, true),
            ("one branch 2x slower, balancing off", true, false),
            ("one branch 2x slower, balancing on", true, true),
        ];
        let mut passes: Vec<Vec<Pass>> = runs.iter().map(|_| Vec::new()).collect();
        // Reads that reached the (fast, slow) branch in each run.
        let mut reads = [(0u64, 0u64); 3];
        for round in 1..=self.rounds {
            for (run, (what, slowed, balancing)) in runs.iter().enumerate() {
                let case = format!("mirror:2, {what}");
                let (fast, slow) = (&self.slots[0], &self.slots[1]);
                slow.slow.store(*slowed, Ordering::Relaxed);
                self.store.set_balancing(*balancing);
                fast.fault.reset_counters();
                slow.fault.reset_counters();
                say!("reading {case} (round {round} of {})", self.rounds);
                let pass = self.read_pass(&set, &case);
                reads[run].0 += fast.fault.reads();
                reads[run].1 += slow.fault.reads();
                passes[run].push(pass?);
            }
        }
        self.slots[1].slow.store(false, Ordering::Relaxed);
        self.store.set_balancing(true);
        let mut base = 0.0;
        for (run, (what, slowed, balancing)) in runs.into_iter().enumerate() {
            let (pass, spread) = median(&mut passes[run]);
            let mut row = new_row("slow", format!("mirror:2, {what}"), pass);
            let (f, s) = reads[run];
            let share = 100.0 * s as f64 / (f + s).max(1) as f64;
            if slowed {
                let overhead = base / pass.mb_per_s() - 1.0;
                row.ratio = Some(pass.mb_per_s() / base);
                row.vs = Some("both normal".into());
                row.note = format!(
                    "{spread}; overhead {:.0}%, {share:.0}% of reads on the slow branch; RAIF: {}",
                    overhead * 100.0,
                    if balancing { "12%" } else { "72%" }
                );
                if balancing {
                    row.target = Some(format!("overhead <= {:.0}%", SLOW_TARGET * 100.0));
                    row.met = Some(overhead <= SLOW_TARGET);
                }
            } else {
                base = pass.mb_per_s();
                row.note = format!("{spread}; {share:.0}% of reads on the second branch");
            }
            self.rows.push(row);
        }
        Ok(())
    }

    /// Loses the first branch of the rs:4+2 set (its directory deleted),
    /// rebuilds its shards onto the empty spare branch, then reads the set
    /// again and checks no read met a fault, i.e. needed reconstruction.
    fn rebuild(&mut self) -> Result<()> {
        let set = Set::new("rs:4+2");
        say!("deleting the other policies' containers");
        for text in POLICIES.iter().filter(|t| **t != "rs:4+2") {
            let other = Set::new(text);
            for i in 0..self.data.len() {
                self.store.delete(&other.key(i))?;
            }
        }
        let lost = BranchId(0);
        let dir = &self.slots[0].dir;
        fs::remove_dir_all(dir).with_context(|| format!("cannot delete {}", dir.display()))?;
        sync();
        say!("rebuilding branch b00 onto b{:02}", SPARE.0);
        let started = Instant::now();
        let report = self.store.rebuild_onto(lost, SPARE, |_| {})?;
        let seconds = started.elapsed().as_secs_f64();
        if !report.failed.is_empty() || !report.conflicts.is_empty() {
            bail!("rebuild left shards behind: {report:?}");
        }
        let spare = &self.slots[usize::from(SPARE.0)].branch;
        let mut written = 0;
        for key in spare.list("")? {
            written += spare.size(&key)?;
        }
        let mut row = new_row(
            "rebuild",
            "rs:4+2, 1 of 6 lost, onto a fresh branch".into(),
            &Pass {
                seconds,
                bytes: written,
                warm: false,
            },
        );
        row.note = format!(
            "{} shards ({:.0} MB) written; {:.0} MB/s of containers made whole",
            report.rebuilt,
            written as f64 / MB,
            self.total_bytes() as f64 / MB / seconds
        );
        self.rows.push(row);
        for id in self.store.branch_ids() {
            self.store.reset_health(id);
        }
        let case = "rs:4+2 after the rebuild".to_string();
        say!("reading {case}");
        let pass = self.read_pass(&set, &case)?;
        let faults: u64 = self
            .store
            .status()
            .iter()
            .map(|s| s.missing + s.unavailable + s.corrupt)
            .sum();
        let still_on_lost = (0..self.data.len())
            .filter(|&i| {
                self.store
                    .locate(&set.key(i))
                    .is_ok_and(|p| p.shards.iter().any(|s| s.branches.contains(&lost)))
            })
            .count();
        if faults > 0 || still_on_lost > 0 {
            self.mismatch(format!(
                "after the rebuild, reads met {faults} shard faults and {still_on_lost} \
                 containers still place a shard on the lost branch"
            ));
        }
        let healthy = self
            .rows
            .iter()
            .find(|r| r.section == "read" && r.case == "rs:4+2")
            .map(|r| r.mb_per_s)
            .expect("healthy reads ran first");
        let mut row = new_row("rebuild", case, &pass);
        row.ratio = Some(pass.mb_per_s() / healthy);
        row.vs = Some("rs:4+2 read".into());
        row.note = format!("{faults} shard faults met: no reconstruction");
        self.rows.push(row);
        Ok(())
    }

    fn mismatch(&self, what: String) {
        self.mismatches.lock().push(what);
    }

    /// Stores every container under `set`, `in_flight` at once.
    fn write_pass(&self, set: &Set) -> Result<Pass> {
        self.timed_puts(|i| {
            let key = set.key(i);
            self.store
                .put(&key, &self.data[i], &set.policy, &set.allowed)
                .map(|_| ())
                .with_context(|| format!("storing {key}"))
        })
    }

    /// Stores every container as one blob on the raw branch, `in_flight` at
    /// once, then deletes them (untimed).
    fn raw_write_pass(&self) -> Result<Pass> {
        let key = |i: usize| BlobKey::new(format!("raw/{i:06}")).expect("a valid key");
        let pass = self.timed_puts(|i| {
            self.raw
                .put(&key(i), &self.data[i])
                .with_context(|| format!("storing raw container {i}"))
        })?;
        for i in 0..self.data.len() {
            self.raw.delete(&key(i))?;
        }
        Ok(pass)
    }

    /// Times `put(i)` for every container, `in_flight` at once, after
    /// writing back what earlier passes left.
    fn timed_puts(&self, put: impl Fn(usize) -> Result<()> + Sync) -> Result<Pass> {
        sync();
        let started = Instant::now();
        in_parallel(self.data.len(), self.in_flight, put)?;
        Ok(Pass {
            seconds: started.elapsed().as_secs_f64(),
            bytes: self.total_bytes(),
            warm: false,
        })
    }

    /// Reads every container of `set` back, `in_flight` at once, from a
    /// dropped page cache where allowed; compares the bytes afterwards,
    /// outside the timing.
    fn read_pass(&self, set: &Set, case: &str) -> Result<Pass> {
        let warm = !drop_caches();
        self.warm.fetch_or(warm, Ordering::Relaxed);
        let started = Instant::now();
        let read = in_parallel(self.data.len(), self.in_flight, |i| {
            let key = set.key(i);
            self.store
                .get(&key)
                .with_context(|| format!("reading {key} ({case})"))
        })?;
        let seconds = started.elapsed().as_secs_f64();
        let bad = (0..self.data.len())
            .filter(|&i| read[i] != self.data[i])
            .count();
        if bad > 0 {
            self.mismatch(format!(
                "{case}: {bad} containers differ from what was written"
            ));
        }
        Ok(Pass {
            seconds,
            bytes: self.total_bytes(),
            warm,
        })
    }

    fn print(&self) {
        let header = ["section", "case", "MB/s", "ratio", "vs", "target", "note"];
        let cells: Vec<[String; 7]> = self
            .rows
            .iter()
            .map(|r| {
                let target = match (&r.target, r.met) {
                    (Some(t), Some(met)) => {
                        format!("{t} {}", if met { "MET" } else { "NOT MET" })
                    }
                    _ => String::new(),
                };
                [
                    r.section.to_string(),
                    r.case.clone(),
                    format!("{:.0}{}", r.mb_per_s, if r.warm { " WARM" } else { "" }),
                    r.ratio.map(|x| format!("{x:.2}")).unwrap_or_default(),
                    r.vs.clone().unwrap_or_default(),
                    target,
                    r.note.clone(),
                ]
            })
            .collect();
        let mut width = header.map(str::len);
        for row in &cells {
            for (w, c) in width.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |row: &[String]| {
            let mut out = String::new();
            for (i, (c, w)) in row.iter().zip(width).enumerate() {
                // Numbers right-aligned, text left-aligned.
                if i == 2 || i == 3 {
                    out += &format!("{c:>w$}  ");
                } else {
                    out += &format!("{c:<w$}  ");
                }
            }
            crate::ui::out!("{}", out.trim_end());
        };
        line(&header.map(String::from));
        for row in &cells {
            line(row);
        }
        if self.warm.load(Ordering::Relaxed) {
            crate::ui::out!(
                "WARM: the page cache could NOT be dropped (not root?); read figures are not cold"
            );
        }
    }

    fn write_json(&self, args: &RedundancyBenchArgs, out: &Path) -> Result<()> {
        let doc = serde_json::json!({
            "mib": args.mib,
            "container_mib": args.container_mib,
            "containers": self.data.len(),
            "in_flight": args.in_flight,
            "rounds": args.rounds,
            "seed": args.seed,
            "branches": BRANCHES,
            "warm": self.warm.load(Ordering::Relaxed),
            "rows": self.rows,
        });
        fs::write(out, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", out.display()))
    }
}

fn new_row(section: &'static str, case: String, pass: &Pass) -> Row {
    Row {
        section,
        case,
        bytes: pass.bytes,
        seconds: pass.seconds,
        mb_per_s: pass.mb_per_s(),
        ratio: None,
        vs: None,
        target: None,
        met: None,
        warm: pass.warm,
        note: String::new(),
    }
}

/// The median pass (by MB/s) and a note giving the range.
fn median(passes: &mut [Pass]) -> (&Pass, String) {
    passes.sort_by(|a, b| a.mb_per_s().total_cmp(&b.mb_per_s()));
    let spread = format!(
        "median of {} ({:.0}-{:.0})",
        passes.len(),
        passes[0].mb_per_s(),
        passes[passes.len() - 1].mb_per_s()
    );
    (&passes[passes.len() / 2], spread)
}

/// Payload bytes a set stores for `bytes` of containers (shard headers and
/// block digests left out).
fn shards_bytes(set: &Set, bytes: u64) -> u64 {
    bytes * u64::from(set.policy.shard_count()) / u64::from(set.policy.data_shards())
}

/// `f(0..n)`, `threads` calls at once on plain threads (the calls wait on
/// disks, not the CPU); results in index order, the first error returned.
fn in_parallel<R: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let parts: Vec<Result<Vec<(usize, R)>>> = thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(n).max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok(done);
                        }
                        done.push((i, f(i)?));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a benchmark worker panicked"))
            .collect()
    });
    let mut all = Vec::with_capacity(n);
    for part in parts {
        all.extend(part?);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

fn sync() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Writes back and drops the page cache; false if not allowed (not root).
fn drop_caches() -> bool {
    sync();
    fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Makes every read take twice as long while switched on, by sleeping as
/// long as the read itself took: "2x slower" holds literally, whatever
/// the shared disk is doing at the time.
struct Slower {
    inner: Arc<dyn Branch>,
    on: Arc<AtomicBool>,
}

impl Slower {
    fn read(&self, read: impl FnOnce() -> branch::Result<Vec<u8>>) -> branch::Result<Vec<u8>> {
        let started = Instant::now();
        let out = read();
        if self.on.load(Ordering::Relaxed) {
            thread::sleep(started.elapsed());
        }
        out
    }
}

impl Branch for Slower {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn put(&self, key: &BlobKey, data: &[u8]) -> branch::Result<()> {
        self.inner.put(key, data)
    }
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<branch::Result<()>> {
        self.inner.put_many(blobs)
    }
    fn get(&self, key: &BlobKey) -> branch::Result<Vec<u8>> {
        self.read(|| self.inner.get(key))
    }
    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> branch::Result<Vec<u8>> {
        self.read(|| self.inner.read_range(key, offset, len))
    }
    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        self.inner.prefetch(key, offset, len)
    }
    fn size(&self, key: &BlobKey) -> branch::Result<u64> {
        self.inner.size(key)
    }
    fn list(&self, prefix: &str) -> branch::Result<Vec<BlobKey>> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &BlobKey) -> branch::Result<()> {
        self.inner.delete(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn in_parallel_keeps_order_and_returns_an_error() {
        let squares = in_parallel(100, 4, |i| Ok(i * i)).unwrap();
        assert_eq!(squares, (0..100).map(|i| i * i).collect::<Vec<_>>());
        let err = in_parallel(10, 3, |i| if i == 7 { bail!("seven") } else { Ok(i) });
        assert_eq!(err.unwrap_err().to_string(), "seven");
    }

    #[test]
    fn slower_doubles_read_time() {
        let dir = tempfile::tempdir().unwrap();
        let (local, _) = LocalDir::open("l", dir.path()).unwrap();
        let sleepy = FaultyBranch::new(Arc::new(local));
        sleepy.control().set(Fault::Slow(Duration::from_millis(20)));
        let slow = Slower {
            inner: Arc::new(sleepy),
            on: Arc::new(AtomicBool::new(true)),
        };
        let key = BlobKey::new("k").unwrap();
        slow.put(&key, b"x").unwrap();
        let started = Instant::now();
        assert_eq!(slow.get(&key).unwrap(), b"x");
        assert!(started.elapsed() >= Duration::from_millis(40));
    }
}

//! A deterministic simulation of cairn's metadata engine over etcd
//! (issue 18): simulated clients (each an `EtcdMeta` on its own thread)
//! over simulated etcd clusters (`meta_etcd::sim`), their every KV
//! request passing one [`turnstile::Turnstile`] that runs one client at a
//! time in an order drawn from the seed, with faults drawn from it too: a
//! request refused, a reply lost after the request applied, a client that
//! stops between the parts of an intent, shard moves running meanwhile.
//! After a run: every intent settled, the namespace's invariants
//! (`meta::conformance::consistent`: no loops, link counts, no dangling
//! entries; plus no inode without a name) and the clients' histories of
//! a few names linearizable ([`linear`]).

pub mod linear;
pub mod turnstile;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use meta::conformance::{consistent, kind, new, nokeep, t, PLAIN, ROOT};
use meta::{FileKind, InodeId, MetaError, MetaStore};
use meta_etcd::sim::SimCluster;
use meta_etcd::{EtcdError, EtcdMeta, EtcdOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use linear::{Event, Op, Ret};
use turnstile::{Faults, Turnstile};

/// The names of the model's slots: slot `s` is `NAMES[s % 3]` in the
/// root (`s < 3`) or in directory `d`.
const NAMES: [&str; 3] = ["a", "b", "c"];
const SLOTS: u8 = 6;
/// Directory names in the subtree `t` that directory clients shuffle.
const DIRS: [&str; 3] = ["x", "y", "z"];

/// What one run simulates.
#[derive(Debug, Clone)]
pub struct Config {
    /// Clients working on the model's names.
    pub file_clients: usize,
    /// Clients making, removing and moving directories under `t`.
    pub dir_clients: usize,
    pub ops: usize,
    /// Data clusters (0: one cluster, no shards).
    pub clusters: usize,
    pub shards: u32,
    /// Shard moves the coordinator makes during the run.
    pub moves: usize,
    pub faults: Faults,
    /// Per mille of a file client's operations before which it arms a
    /// stop between the parts of its next intent (at most once).
    pub stops: u32,
}

/// What a run did, to compare replays and to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Every request let through: actor, cluster, kind, fault.
    pub trace: Vec<String>,
    pub events: Vec<String>,
    pub final_slots: u64,
    pub revisions: Vec<i64>,
}

fn opts(seed: u64) -> EtcdOptions {
    EtcdOptions {
        rpc_timeout: Duration::from_secs(5),
        op_deadline: Duration::from_secs(60),
        client_ttl: Duration::from_secs(60),
        seed: Some(seed),
        retry_pause: Duration::from_millis(1),
    }
}

struct World {
    control: Option<Arc<SimCluster>>,
    clusters: Vec<Arc<SimCluster>>,
    fsid: String,
}

impl World {
    /// Clusters named after `name` and the seed: the shard map places
    /// shards by the clusters' names, so a replay needs the same names.
    fn new(name: &str, seed: u64, cfg: &Config, gate: &Arc<Turnstile>) -> World {
        let tag = format!("{name}{seed}");
        let cluster = |name: &str| SimCluster::new(&format!("{tag}-{name}"), gate.clone());
        let fsid = "simfs".to_string();
        if cfg.clusters == 0 {
            let world = World {
                control: None,
                clusters: vec![cluster("data")],
                fsid,
            };
            drop(world.open(0));
            return world;
        }
        let control = cluster("control");
        let clusters: Vec<_> = (0..cfg.clusters)
            .map(|i| cluster(&format!("data{i}")))
            .collect();
        let data: Vec<Vec<String>> = clusters.iter().map(|c| vec![c.endpoint()]).collect();
        meta_etcd::init_cluster(
            &[control.endpoint()],
            &data,
            &fsid,
            cfg.shards,
            0,
            0,
            &opts(seed),
        )
        .unwrap();
        World {
            control: Some(control),
            clusters,
            fsid,
        }
    }

    fn open(&self, seed: u64) -> EtcdMeta {
        match &self.control {
            None => EtcdMeta::open(&[self.clusters[0].endpoint()], &self.fsid, 0, 0, opts(seed)),
            Some(c) => EtcdMeta::open_cluster(&[c.endpoint()], &self.fsid, opts(seed)),
        }
        .unwrap()
    }
}

/// The directory and name of slot `s`.
fn slot(d: InodeId, s: u8) -> (InodeId, &'static [u8]) {
    let dir = if s < 3 { ROOT } else { d };
    (dir, NAMES[usize::from(s % 3)].as_bytes())
}

fn etcd(e: &MetaError) -> Option<&EtcdError> {
    match e {
        MetaError::Remote(src) => src.downcast_ref::<EtcdError>(),
        _ => None,
    }
}

fn stopped(e: &MetaError) -> bool {
    matches!(etcd(e), Some(EtcdError::Injected))
}

/// Whether `e` leaves the operation's outcome unknown to its client (the
/// engine gave up, or the client stopped): any other engine error (a
/// dangling entry, a damaged record) is a wrong answer.
fn unknown(e: &MetaError) -> bool {
    matches!(
        etcd(e),
        Some(EtcdError::Unavailable { .. } | EtcdError::Contended(_) | EtcdError::Injected)
    )
}

/// Runs one seed: panics (after printing the seed) when a check fails.
/// `name` names its clusters: runs at the same time need their own.
pub fn run(name: &str, seed: u64, cfg: &Config) -> Outcome {
    let trace = std::sync::Mutex::new(Vec::new());
    let out = std::panic::catch_unwind(|| run_inner(name, seed, cfg, &trace));
    match out {
        Ok(o) => o,
        Err(p) => {
            if std::env::var_os("CAIRN_SIM_TRACE").is_some() {
                for line in trace.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    eprintln!("{line}");
                }
            }
            eprintln!(
                "simulation failed: seed {seed} ({cfg:?}); replay it with CAIRN_SIM_SEED={seed} \
                 (and CAIRN_SIM_TRACE=1 to print every request)"
            );
            std::panic::resume_unwind(p)
        }
    }
}

fn run_inner(
    name: &str,
    seed: u64,
    cfg: &Config,
    trace: &std::sync::Mutex<Vec<String>>,
) -> Outcome {
    let gate = Turnstile::new(seed, cfg.faults);
    let world = World::new(name, seed, cfg, &gate);
    let setup = world.open(seed ^ 0x5e7);
    let d = setup
        .create(ROOT, b"d", new(FileKind::Dir), t(1))
        .unwrap()
        .id;
    let tdir = setup
        .create(ROOT, b"t", new(FileKind::Dir), t(1))
        .unwrap()
        .id;
    drop(setup);

    let clock = Arc::new(AtomicU64::new(0));
    let mut file_handles = Vec::new();
    let mut other_handles = Vec::new();
    let mut actor = 0;
    gate.hold();
    for i in 0..cfg.file_clients {
        let store = world.open(seed.wrapping_mul(31).wrapping_add(i as u64 + 1));
        let (gate2, clock, cfg) = (gate.clone(), clock.clone(), cfg.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ ((i as u64 + 1) << 32));
        file_handles.push(gate.spawn(actor, false, move || {
            file_client(i, store, &gate2, &clock, &cfg, d, &mut rng)
        }));
        actor += 1;
    }
    for i in 0..cfg.dir_clients {
        let store = world.open(seed.wrapping_mul(37).wrapping_add(i as u64 + 1));
        let cfg = cfg.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ ((i as u64 + 101) << 32));
        other_handles.push(gate.spawn(actor, false, move || {
            dir_client(store, &cfg, tdir, &mut rng)
        }));
        actor += 1;
    }
    if cfg.clusters > 1 && cfg.moves > 0 {
        let store = world.open(seed.wrapping_mul(41));
        let cfg = cfg.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc00d);
        other_handles.push(gate.spawn(actor, true, move || coordinator(store, &cfg, &mut rng)));
    }
    gate.release();
    let mut events: Vec<Event> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for h in file_handles {
        let (ev, pr, store) = h.join().expect("a file client panicked");
        events.extend(ev);
        problems.extend(pr);
        // Dropped here, where requests pass at once: its registration is
        // revoked for sure.
        drop(store);
    }
    for h in other_handles {
        let (pr, store) = h.join().expect("a client panicked");
        problems.extend(pr);
        drop(store);
    }
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");

    // Every intent settled, then the invariants.
    let checker = world.open(seed ^ 0xc4ec);
    if checker.is_sharded() {
        checker.settle_intents().unwrap();
        let control = world.control.as_ref().unwrap().endpoint();
        let st = checker.cluster_status(&[control]).unwrap();
        assert!(st.intents.is_empty(), "unsettled intents: {:?}", st.intents);
    }
    consistent(&checker);
    let mut inodes = 0u64;
    checker
        .view()
        .unwrap()
        .for_each_inode(&mut |_| inodes += 1)
        .unwrap();
    let counts = checker.counts().unwrap();
    assert_eq!(
        inodes,
        counts.files + counts.dirs,
        "every inode has a name (no orphan, no leftover of an intent)"
    );

    // The final names, as one more event after all, then the histories.
    let mut final_slots = 0u64;
    for s in 0..SLOTS {
        let (dir, name) = slot(d, s);
        match checker.lookup(dir, name) {
            Ok(i) => {
                assert_eq!(i.attr.kind, FileKind::File);
                final_slots |= 1 << s;
            }
            Err(MetaError::NotFound) => {}
            Err(e) => panic!("final lookup of slot {s}: {e}"),
        }
    }
    let now = clock.fetch_add(1, Ordering::SeqCst);
    events.push(Event {
        client: usize::MAX,
        op: Op::ReadAll,
        ret: Some(Ret::All(final_slots)),
        call: now,
        end: now + 1,
    });
    *trace.lock().unwrap() = gate.trace();
    if let Err(best) = linear::check(&events, 0) {
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.call);
        let lines = |v: &[Event]| v.iter().map(|e| format!("  {e:?}\n")).collect::<String>();
        panic!(
            "seed {seed}: the histories are not linearizable.\nevents:\n{}longest order found:\n{}",
            lines(&sorted),
            lines(&best)
        );
    }
    drop(checker);
    let mut revisions: Vec<i64> = world
        .clusters
        .iter()
        .map(|c| c.snapshot().revision())
        .collect();
    if let Some(c) = &world.control {
        revisions.push(c.snapshot().revision());
    }
    Outcome {
        trace: gate.trace(),
        events: events.iter().map(|e| format!("{e:?}")).collect(),
        final_slots,
        revisions,
    }
}

/// A client creating, unlinking, renaming and looking up the model's
/// names; its history. An operation failing with an engine error has an
/// unknown outcome; one stopped between the parts of its intent ends
/// the client (its registration is revoked, as when its lease lapses).
fn file_client(
    id: usize,
    store: EtcdMeta,
    gate: &Turnstile,
    clock: &AtomicU64,
    cfg: &Config,
    d: InodeId,
    rng: &mut StdRng,
) -> (Vec<Event>, Vec<String>, Option<EtcdMeta>) {
    let mut events = Vec::new();
    let mut problems = Vec::new();
    let mut armed = false;
    for _ in 0..cfg.ops {
        if !armed && rng.gen_range(0..1000) < cfg.stops {
            armed = true;
            if rng.gen_bool(0.5) {
                store.stop_after_first_part();
            } else {
                store.stop_after_locks();
            }
        }
        let a = rng.gen_range(0..SLOTS);
        let op = match rng.gen_range(0..4) {
            0 => Op::Create(a),
            1 => Op::Unlink(a),
            2 => Op::Rename(a, rng.gen_range(0..SLOTS)),
            _ => Op::Lookup(a),
        };
        let call = clock.fetch_add(1, Ordering::SeqCst);
        gate.note(format!("client {id} calls {op:?} at {call}"));
        let got: Result<Ret, MetaError> = match op {
            Op::Create(s) => {
                let (dir, name) = slot(d, s);
                store
                    .create(dir, name, new(FileKind::File), t(2))
                    .map(|_| Ret::Ok)
            }
            Op::Unlink(s) => {
                let (dir, name) = slot(d, s);
                store.unlink(dir, name, false, t(3)).map(|_| Ret::Ok)
            }
            Op::Rename(s, u) => {
                let ((sd, sn), (ud, un)) = (slot(d, s), slot(d, u));
                store
                    .rename(sd, sn, ud, un, PLAIN, &nokeep, t(4))
                    .map(|_| Ret::Ok)
            }
            Op::Lookup(s) => {
                let (dir, name) = slot(d, s);
                store.lookup(dir, name).map(|i| {
                    if i.attr.kind != FileKind::File {
                        problems.push(format!("slot {s} holds a {:?}", i.attr.kind));
                    }
                    Ret::Found
                })
            }
            Op::ReadAll => unreachable!("only the checker reads all"),
        };
        gate.note(format!("client {id}: {op:?} -> {got:?}"));
        let (ret, end) = match got {
            Ok(r) => (Some(r), clock.fetch_add(1, Ordering::SeqCst)),
            Err(MetaError::Exists) => (Some(Ret::Exists), clock.fetch_add(1, Ordering::SeqCst)),
            Err(MetaError::NotFound) => (Some(Ret::NotFound), clock.fetch_add(1, Ordering::SeqCst)),
            Err(e) if unknown(&e) => {
                let stop = stopped(&e);
                events.push(Event {
                    client: id,
                    op,
                    ret: None,
                    call,
                    end: u64::MAX,
                });
                if stop {
                    // The client is gone: its registration lapses (the
                    // revoke itself must not fail, or its intents would
                    // wait for the lease's 60 s).
                    gate.calm_me();
                    drop(store);
                    return (events, problems, None);
                }
                continue;
            }
            Err(e) => {
                problems.push(format!("client {id}: {op:?} failed: {} ({e})", kind(&e)));
                continue;
            }
        };
        events.push(Event {
            client: id,
            op,
            ret,
            call,
            end,
        });
    }
    (events, problems, Some(store))
}

/// The directory at `path` under `t`, if it is there now.
fn walk(store: &EtcdMeta, tdir: InodeId, path: &[&str]) -> Option<InodeId> {
    let mut at = tdir;
    for p in path {
        at = store.lookup(at, p.as_bytes()).ok()?.id;
    }
    Some(at)
}

/// A short random path of `DIRS` names.
fn path(rng: &mut StdRng) -> Vec<&'static str> {
    let n = rng.gen_range(1..=3);
    (0..n).map(|_| DIRS[rng.gen_range(0..DIRS.len())]).collect()
}

/// A client making, removing and moving directories under `t` (moves
/// into each other's subtrees race: never a loop); only the invariants
/// check it. Its problems: answers no engine may give.
fn dir_client(
    store: EtcdMeta,
    cfg: &Config,
    tdir: InodeId,
    rng: &mut StdRng,
) -> (Vec<String>, EtcdMeta) {
    let mut problems = Vec::new();
    for _ in 0..cfg.ops {
        let p = path(rng);
        let (last, parent) = p.split_last().expect("a path has a name");
        let Some(dir) = walk(&store, tdir, parent) else {
            continue;
        };
        let got = match rng.gen_range(0..3) {
            0 => store
                .create(dir, last.as_bytes(), new(FileKind::Dir), t(5))
                .map(drop),
            1 => store.rmdir(dir, last.as_bytes(), t(6)),
            _ => {
                let q = path(rng);
                let (qlast, qparent) = q.split_last().expect("a path has a name");
                let Some(qdir) = walk(&store, tdir, qparent) else {
                    continue;
                };
                store
                    .rename(
                        dir,
                        last.as_bytes(),
                        qdir,
                        qlast.as_bytes(),
                        PLAIN,
                        &nokeep,
                        t(7),
                    )
                    .map(drop)
            }
        };
        match got {
            Ok(())
            | Err(
                MetaError::NotFound
                | MetaError::Exists
                | MetaError::NotEmpty
                | MetaError::NotDir
                | MetaError::Invalid(_),
            ) => {}
            Err(e) if unknown(&e) => {}
            Err(e) => problems.push(format!("directory client: {}: {e}", kind(&e))),
        }
    }
    (problems, store)
}

/// Moves shards between data clusters while the clients work, and
/// settles intents now and then (what a coordinator does). Its requests
/// never fail: a move cut short stays fenced until run again.
fn coordinator(store: EtcdMeta, cfg: &Config, rng: &mut StdRng) -> (Vec<String>, EtcdMeta) {
    let mut problems = Vec::new();
    for _ in 0..cfg.moves {
        let shard = rng.gen_range(0..cfg.shards);
        let to = rng.gen_range(0..cfg.clusters);
        if let Err(e) = store.move_shard(shard, to) {
            problems.push(format!("moving shard {shard} to {to}: {e}"));
        }
        if let Err(e) = store.settle_intents() {
            problems.push(format!("settling intents: {e}"));
        }
    }
    (problems, store)
}

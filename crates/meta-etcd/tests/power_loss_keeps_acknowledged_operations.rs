//! The power of a whole three-member etcd cluster cut, three times, while
//! two clients create and delete: every operation acknowledged before the
//! cut is there after it (creates with their inode numbers, unlinks
//! gone), the operation in flight happened whole or not at all, and the
//! namespace is consistent.
//!
//! etcd runs with its fsyncs on, each member on its own ext4 disk whose
//! cut keeps only what was flushed plus a random part of the rest
//! (`testkit::powercut`); a SIGKILL would keep everything the kernel had
//! accepted and so could not tell. `CAIRN_POWERCUT_SEED=S` replays a seed.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use meta::conformance::{consistent, new, t, ROOT};
use meta::{FileKind, InodeId, MetaError, MetaStore};
use meta_etcd::EtcdMeta;
use testkit::powercut::{Disks, Keep};

const ROUNDS: u64 = 3;
/// Operations acknowledged per round before its cut.
const PER_ROUND: usize = 60;

/// What one client's acknowledged operations left, and the one that may
/// have applied or not.
#[derive(Default)]
struct Expect {
    names: BTreeMap<String, Option<InodeId>>,
    in_doubt: Option<String>,
}

fn work(
    m: &EtcdMeta,
    dir: InodeId,
    who: usize,
    round: u64,
    cut: &AtomicBool,
    acked: &AtomicUsize,
    e: &mut Expect,
) {
    let mut i = 0;
    loop {
        let name = format!("c{who}-r{round}-{i}");
        // Every third step unlinks the file made two steps before.
        let (target, result) = if i % 3 == 2 {
            let old = format!("c{who}-r{round}-{}", i - 2);
            let r = m.unlink(dir, old.as_bytes(), false, t(2)).map(|_| None);
            (old, r)
        } else {
            let r = m.create(dir, name.as_bytes(), new(FileKind::File), t(1));
            (name, r.map(|f| Some(f.id)))
        };
        i += 1;
        // Acknowledged before the cut only if the cut had not begun when
        // the answer was seen.
        let before_cut = !cut.load(Ordering::SeqCst);
        match result {
            Ok(state) if before_cut => {
                e.names.insert(target, state);
                acked.fetch_add(1, Ordering::SeqCst);
            }
            Ok(_) | Err(_) => {
                e.in_doubt = Some(target);
                return;
            }
        }
    }
}

fn seed() -> u64 {
    match std::env::var("CAIRN_POWERCUT_SEED") {
        Ok(s) => s.parse().expect("CAIRN_POWERCUT_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

#[test]
fn a_power_cut_loses_no_acknowledged_operation() {
    let seed = seed();
    eprintln!("CAIRN_POWERCUT_SEED={seed}");
    let mut disks = Disks::new(3, 1 << 30);
    let paths: Vec<_> = (0..3).map(|i| disks.path(i)).collect();
    let mut etcd = testkit::etcd::Etcd::cluster_on(&paths);
    let fs = common::fsid();
    let open = |etcd: &testkit::etcd::Etcd| {
        EtcdMeta::open(&etcd.endpoints(), &fs, 1000, 1000, common::quick()).unwrap()
    };
    let m = open(&etcd);
    let dirs: Vec<InodeId> = (0..2)
        .map(|c| {
            m.create(ROOT, format!("c{c}").as_bytes(), new(FileKind::Dir), t(0))
                .unwrap()
                .id
        })
        .collect();
    drop(m);
    let mut expect: Vec<Expect> = (0..2).map(|_| Expect::default()).collect();
    for round in 0..ROUNDS {
        let clients: Vec<EtcdMeta> = (0..2).map(|_| open(&etcd)).collect();
        let cut = AtomicBool::new(false);
        let acked = AtomicUsize::new(0);
        let stopped = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (who, (e, m)) in expect.iter_mut().zip(&clients).enumerate() {
                let (cut, acked, stopped, dir) = (&cut, &acked, &stopped, dirs[who]);
                s.spawn(move || {
                    work(m, dir, who, round, cut, acked, e);
                    stopped.fetch_add(1, Ordering::SeqCst);
                });
            }
            // (A client stops early at a failed operation.)
            while acked.load(Ordering::SeqCst) < PER_ROUND && stopped.load(Ordering::SeqCst) < 2 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            cut.store(true, Ordering::SeqCst);
            let (kept, dropped) = disks.cut(Keep::Random(seed.wrapping_add(round)));
            eprintln!("round {round}: cut kept {kept} unflushed writes, dropped {dropped}");
            etcd.kill_all();
        });
        drop(clients);
        disks.power_on();
        etcd.restart_all();

        let m = open(&etcd);
        for (who, e) in expect.iter_mut().enumerate() {
            for (name, state) in &e.names {
                if e.in_doubt.as_deref() == Some(name) {
                    continue;
                }
                let found = match m.lookup(dirs[who], name.as_bytes()) {
                    Ok(f) => Some(f.id),
                    Err(MetaError::NotFound) => None,
                    Err(err) => panic!("seed {seed}, round {round}: lookup {name}: {err}"),
                };
                assert_eq!(
                    found, *state,
                    "seed {seed}, round {round}: {name} after the power cut"
                );
            }
            // The operation in flight happened or not; from now on it is
            // what the store says.
            if let Some(name) = e.in_doubt.take() {
                let now = m.lookup(dirs[who], name.as_bytes()).ok().map(|f| f.id);
                e.names.insert(name, now);
            }
        }
        consistent(&m);
    }
    let live: usize = expect
        .iter()
        .map(|e| e.names.values().filter(|v| v.is_some()).count())
        .sum();
    let m = open(&etcd);
    assert_eq!(m.counts().unwrap().files as usize, live, "seed {seed}");
}

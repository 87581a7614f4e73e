//! The power cut under a mounted repository (its disk an ext4 that keeps
//! only what was flushed, plus a random part of the rest:
//! `testkit::powercut`) while files are written through the mount: after
//! the machine starts again, every file whose `fsync` returned before the
//! cut reads back byte-exact (small inline files, chunked ones, one
//! overwritten and fsynced again), and `check` is clean. Unlike `kill -9`,
//! this fails if an fsync returns before the chunk store's and the
//! metadata engine's writes are on the disk. `CAIRN_POWERCUT_SEED=S`
//! replays a seed.

mod common;

use std::collections::BTreeMap;

use common::{ok, random, write_synced, Mount};
use testkit::powercut::Keep;

#[test]
fn a_power_cut_under_a_mount_keeps_every_fsynced_file() {
    let common::PowerCutRepo {
        seed,
        mut disks,
        base: _base,
        repo,
        mnt,
    } = common::powercut_repo(2 << 30);
    let mut m = Mount::start(repo, mnt);
    let mut synced: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for round in 0..3u64 {
        let salt = seed ^ (round << 32);
        for i in 0..24u64 {
            let len = match i % 3 {
                0 => 2_000,
                1 => 300_000,
                _ => 3 << 20,
            };
            let name = format!("d{}/r{round}-f{i}", i % 4);
            let data = random(len, salt ^ (i + 1));
            write_synced(&m.path(&name), &data).unwrap();
            synced.insert(name, data);
            if i % 5 == 4 {
                // Written, never synced: may be lost, must break nothing.
                let loose = m.path(&format!("d0/r{round}-loose{i}"));
                std::fs::write(loose, random(100_000, salt ^ i)).unwrap();
            }
        }
        // A file of the round before, overwritten and fsynced again.
        if let Some(name) = synced.keys().find(|n| n.contains("-f1")).cloned() {
            let again = random(1 << 20, salt ^ 0xfeed);
            write_synced(&m.path(&name), &again).unwrap();
            synced.insert(name, again);
        }

        let (kept, dropped) = disks.cut(Keep::Random(salt));
        eprintln!("round {round}: cut kept {kept} unflushed writes, dropped {dropped}");
        let (repo, mnt) = m.kill();
        disks.power_on();
        m = Mount::start(repo, mnt);
        for (name, data) in &synced {
            let got = std::fs::read(m.path(name)).unwrap_or_else(|e| {
                panic!("seed {seed}, round {round}: fsynced {name} is lost: {e}")
            });
            assert!(
                &got == data,
                "seed {seed}, round {round}: fsynced {name} reads back different bytes"
            );
        }
    }
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}

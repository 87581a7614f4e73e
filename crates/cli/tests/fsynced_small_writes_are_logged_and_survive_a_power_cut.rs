//! A database's pattern under a mount on a disk whose power a test cuts
//! (`testkit::powercut`): a 1 MiB file, then rounds of a few 4 KiB
//! overwrites, an append and now and then a truncate, each round ended by
//! `fsync`, and a small journal kept in its inode whose header is rewritten
//! and fsynced. Those fsyncs go to the intent log: with the committer's
//! interval an hour, the store gains no container per fsync. After the cut
//! the file reads back exactly as at its last fsync (the log replayed when
//! the file system opens), and `check` is clean. `CAIRN_POWERCUT_SEED=S`
//! replays a seed.

mod common;

use std::os::unix::fs::FileExt;

use common::{edit_config, no_versions, ok, plain_containers, random, write_synced, Mount};
use rand::{rngs::StdRng, Rng, SeedableRng};
use testkit::powercut::Keep;

const ROUNDS: usize = 40;

#[test]
fn fsynced_small_writes_are_logged_and_survive_a_power_cut() {
    let mut pc = common::powercut_repo(1 << 30);
    let seed = pc.seed;
    edit_config(&pc.repo, &[("commit_seconds = 5", "commit_seconds = 3600")]);
    no_versions(&pc.repo);
    let m = Mount::start(pc.repo.clone(), pc.mnt.clone());

    let mut model = random(1 << 20, seed);
    write_synced(&m.path("db"), &model).unwrap();
    let before = plain_containers(&m.repo).len();

    let mut rng = StdRng::seed_from_u64(seed);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("db"))
        .unwrap();
    for round in 0..ROUNDS {
        for _ in 0..3 {
            let at = rng.gen_range(0..model.len() - 4096);
            let page = random(4096, rng.gen());
            file.write_all_at(&page, at as u64).unwrap();
            model[at..at + 4096].copy_from_slice(&page);
        }
        if round % 20 == 19 {
            let len = model.len() - 5000;
            file.set_len(len as u64).unwrap();
            model.truncate(len);
        }
        let tail = random(700, rng.gen());
        file.write_all_at(&tail, model.len() as u64).unwrap();
        model.extend_from_slice(&tail);
        file.sync_data().unwrap();
    }
    drop(file);
    // A journal small enough to live in its inode: its header rewritten
    // and fsynced is logged as those bytes.
    let mut journal = random(8_700, seed ^ 1);
    write_synced(&m.path("db-journal"), &journal).unwrap();
    let j = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("db-journal"))
        .unwrap();
    j.write_all_at(b"header=12 b.", 0).unwrap();
    journal[..12].copy_from_slice(b"header=12 b.");
    j.sync_data().unwrap();
    // Stored meanwhile: the first record of the file (its close above),
    // and the two truncates (a truncate records the file, with the state
    // a version would take of it): a few containers, not one per fsync.
    let added = plain_containers(&m.repo).len() - before;
    assert!(
        added < ROUNDS / 4,
        "{ROUNDS} fsyncs of a few pages each stored {added} containers: they were not logged"
    );

    let (kept, dropped) = pc.disks.cut(Keep::Random(seed));
    eprintln!("cut kept {kept} unflushed writes, dropped {dropped}");
    let (repo, mnt) = m.kill();
    pc.disks.power_on();
    let m = Mount::start(repo, mnt);
    let got = std::fs::read(m.path("db")).unwrap();
    assert_eq!(got.len(), model.len(), "seed {seed}: size after the cut");
    assert!(
        got == model,
        "seed {seed}: the file differs from its last fsync"
    );
    assert!(
        std::fs::read(m.path("db-journal")).unwrap() == journal,
        "seed {seed}: the inline journal differs from its last fsync"
    );
    let (repo, mnt) = m.unmount();
    ok(&repo, &["check"]);
    // Replayed once: a second start reads the same bytes.
    let m = Mount::start(repo, mnt);
    assert!(std::fs::read(m.path("db")).unwrap() == model);
    m.unmount();
}

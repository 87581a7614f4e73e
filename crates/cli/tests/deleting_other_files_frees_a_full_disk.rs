//! A full disk is recoverable without a remount, and nothing completed is
//! undone: files are written (each fsynced) until the disk is full, the
//! writes that fail leave their data waiting in memory; the files stored
//! before are deleted. The deletes are durable at once (a crash keeps
//! them), `cairn gc` drops the data that waited (those writes were never
//! acknowledged) and names the files, writes work again, and after an
//! unmount every delete stays done.

mod common;

use std::fs;
use std::path::Path;

use common::{is_enospc, ok, random, write_synced, Mount};

struct Filled {
    stored: Vec<String>,
    failed: Vec<String>,
}

/// 2 MB files, each fsynced, until three in a row fail with ENOSPC.
fn fill(m: &Mount) -> Filled {
    let (mut stored, mut failed) = (Vec::new(), Vec::new());
    for i in 0..100u64 {
        let name = format!("f{i:03}");
        match write_synced(&m.path(&name), &random(2_000_000, i)) {
            Ok(()) => stored.push(name),
            Err(e) => {
                assert!(is_enospc(&e), "{name}: {e}");
                failed.push(name);
                if failed.len() == 3 {
                    break;
                }
            }
        }
    }
    assert_eq!(failed.len(), 3, "100 files of 2 MB fit in 64 MiB");
    assert!(stored.len() > 10, "only {} files fit", stored.len());
    Filled { stored, failed }
}

fn fsync_dir(dir: &Path) {
    fs::File::open(dir).unwrap().sync_all().unwrap();
}

#[test]
fn deletes_survive_a_crash_and_gc_frees_the_disk_without_a_remount() {
    let base = tempfile::tempdir().unwrap();
    let (_disk, repo, mnt) = common::repo_on_tmpfs(base.path(), 64);

    // Full, then all but two stored files deleted; the directory's fsync
    // makes the deletes durable although data still waits for space.
    let m = Mount::start(repo.clone(), mnt.clone());
    let filled = fill(&m);
    let (kept, deleted) = filled.stored.split_at(2);
    for name in deleted {
        fs::remove_file(m.path(name)).unwrap();
    }
    fsync_dir(&mnt);
    let (repo, mnt) = m.kill();
    let m = Mount::start(repo.clone(), mnt.clone());
    for name in deleted {
        assert!(!m.path(name).exists(), "{name} came back after a crash");
    }
    for (i, name) in kept.iter().enumerate() {
        assert_eq!(fs::read(m.path(name)).unwrap(), random(2_000_000, i as u64));
    }
    // A file whose write failed has what was durable of it: nothing.
    for name in &filled.failed {
        assert_eq!(fs::metadata(m.path(name)).unwrap().len(), 0, "{name}");
    }
    m.unmount();

    // The same without a crash: gc drops what waits and frees the disk.
    let m = Mount::start(repo.clone(), mnt.clone());
    for name in kept {
        fs::remove_file(m.path(name)).unwrap();
    }
    let filled = fill(&m);
    // What holds the space can be asked while data waits for it.
    let stats = ok(&repo, &["stats"]);
    assert!(stats.contains("stored"), "{stats}");
    for name in &filled.stored {
        fs::remove_file(m.path(name)).unwrap();
    }
    let gc = ok(&repo, &["gc"]);
    assert!(gc.contains("waited in memory for space"), "{gc}");
    // The first failed write's data waited; later writes were refused
    // before taking any.
    let named: Vec<&String> = filled
        .failed
        .iter()
        .filter(|name| gc.contains(&format!("/{name} keeps its last durable content")))
        .collect();
    assert!(
        !named.is_empty(),
        "gc names no file whose writes it dropped:\n{gc}"
    );
    assert_eq!(
        gc.matches("keeps its last durable content").count(),
        named.len(),
        "{gc}"
    );
    let again = random(5_000_000, 1000);
    write_synced(&m.path("again"), &again).expect("a write after gc freed the disk");
    let (repo, mnt) = m.unmount();

    let m = Mount::start(repo.clone(), mnt);
    assert_eq!(fs::read(m.path("again")).unwrap(), again);
    for name in filled.stored.iter().chain(kept) {
        assert!(!m.path(name).exists(), "{name} came back after an unmount");
    }
    let (repo, _) = m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("no damage found"), "{check}");
    let log = fs::read_to_string(repo.join("log/cairn.log")).unwrap();
    assert!(
        log.contains("dropped the file's writes that waited for space"),
        "the log names no dropped write"
    );
}

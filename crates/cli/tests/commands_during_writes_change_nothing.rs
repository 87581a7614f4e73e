//! Every command run against a mounted repository while a writer fills it
//! with `dd ... conv=fsync`: the writer never sees an error, nothing it
//! wrote is lost, and the store checks clean afterwards.
//!
//! Before the repository lock, a refused `cairn roots` in a second shell
//! first emptied `.partial/` (the daemon's containers in flight): the
//! writer's fsync got EIO and its files came back short after a remount.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

mod common;
use common::{cairn, ok, Mount, CAIRN};

const FILES: usize = 3;
const FILE_MIB: usize = 112;
/// Rounds of every command, at least; more run while the writer is busy.
const MIN_ROUNDS: usize = 6;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A refused command must say why in terms a user can act on.
fn refused_clearly(what: &str, out: &Output, expect: &str) {
    let t = text(out);
    assert!(
        !out.status.success(),
        "{what} should have been refused: {t}"
    );
    assert!(t.contains(expect), "{what}: {t}");
    assert!(!t.contains("another cairn process"), "{what}: {t}");
}

fn random_file(path: &Path, seed: u64, len: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut f = fs::File::create(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..len.div_ceil(buf.len()) {
        rng.fill_bytes(&mut buf);
        f.write_all(&buf).unwrap();
    }
    f.set_len(len as u64).unwrap();
}

#[test]
fn commands_during_fsynced_writes_change_nothing_and_cause_no_eio() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    fs::create_dir(&src).unwrap();
    let sources: Vec<PathBuf> = (0..FILES)
        .map(|i| {
            let p = src.join(format!("big{i}"));
            random_file(&p, i as u64, FILE_MIB << 20);
            p
        })
        .collect();
    let small = src.join("small");
    random_file(&small, 99, 3 << 20);

    let m = Mount::new(base.path());
    let mnt = m.dir.canonicalize().unwrap();
    let writer = Command::new("bash")
        .arg("-c")
        .arg(r#"set -e; for i in $(seq 0 $(($N - 1))); do dd if="$SRC/big$i" of="$MNT/big$i" bs=1M conv=fsync status=none; done"#)
        .env("N", FILES.to_string())
        .env("SRC", &src)
        .env("MNT", &mnt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let repo = m.repo.clone();
    let run = |args: &[&str]| cairn(&repo, args);
    let got = base.path().join("got");
    let mut labels = Vec::new();
    let mut rounds = 0;
    let mut rounds_while_writing = 0;
    let mut writer = Some(writer);
    let mut writer_out = None;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while rounds < MIN_ROUNDS || writer_out.is_none() {
        assert!(Instant::now() < deadline, "rounds did not finish");
        let label = format!("round{rounds}");
        ok(&repo, &["put", small.to_str().unwrap(), "--name", &label]);
        let piped = Command::new(CAIRN)
            .args(["--repo", repo.to_str().unwrap(), "-q", "put", "-"])
            .args(["--name", &format!("{label}-stdin")])
            .stdin(fs::File::open(&small).unwrap())
            .output()
            .unwrap();
        assert!(piped.status.success(), "put -: {}", text(&piped));
        let roots = ok(&repo, &["roots"]);
        assert!(roots.contains(&label), "{roots}");
        let _ = fs::remove_file(&got);
        ok(&repo, &["get", &label, "-o", got.to_str().unwrap()]);
        assert!(fs::read(&got).unwrap() == fs::read(&small).unwrap());
        ok(&repo, &["rm", &format!("{label}-stdin")]);
        ok(&repo, &["stats"]);
        ok(&repo, &["status"]);
        ok(&repo, &["scrub"]);
        ok(&repo, &["gc"]);
        let check = run(&["check"]);
        assert!(check.status.success(), "check: {}", text(&check));
        refused_clearly("init", &run(&["init"]), "already exists");
        let mounted_at = format!("mounted at {}", mnt.display());
        refused_clearly(
            "repair --rebuild-index",
            &run(&["repair", "--rebuild-index"]),
            &mounted_at,
        );
        refused_clearly("recover", &run(&["recover"]), &mounted_at);
        labels.push(label);
        rounds += 1;
        if let Some(mut w) = writer.take() {
            match w.try_wait().unwrap() {
                Some(_) => writer_out = Some(w.wait_with_output().unwrap()),
                None => {
                    rounds_while_writing += 1;
                    writer = Some(w);
                }
            }
        }
    }
    assert!(
        rounds_while_writing > 0,
        "no round of commands ran while the writer was busy; write more"
    );
    let writer_out = writer_out.unwrap();
    assert!(
        writer_out.status.success(),
        "the writer failed (EIO?): {}",
        text(&writer_out)
    );

    let (repo, dir) = m.unmount();
    let check = cairn(&repo, &["check"]);
    assert!(check.status.success(), "check: {}", text(&check));
    assert!(text(&check).contains("no damage found"), "{}", text(&check));
    let m = Mount::start(repo.clone(), dir);
    for (i, s) in sources.iter().enumerate() {
        let back = fs::read(m.path(&format!("big{i}"))).unwrap();
        assert!(
            back == fs::read(s).unwrap(),
            "big{i} reads back wrong after a remount ({} bytes)",
            back.len()
        );
    }
    for label in &labels {
        let _ = fs::remove_file(&got);
        ok(&repo, &["get", label, "-o", got.to_str().unwrap()]);
        assert!(fs::read(&got).unwrap() == fs::read(&small).unwrap());
    }
    m.unmount();
}

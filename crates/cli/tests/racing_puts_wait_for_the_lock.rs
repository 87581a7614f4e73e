//! Commands racing on an unmounted repository: each waits for the
//! repository lock (bounded by `--lock-wait`), so racing puts all succeed;
//! one that gives up names the holder and has touched nothing.
//!
//! Before the lock, a second command emptied `.partial/` under a running
//! `cairn put`, which then failed with "move into place ... No such file".

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

mod common;
use common::{cairn, ok, CAIRN};

const ROUNDS: usize = 6;
const RACERS: usize = 3;

fn put(repo: &Path, file: &Path, label: &str) -> std::process::Child {
    Command::new(CAIRN)
        .args(["--repo", repo.to_str().unwrap(), "-q", "put"])
        .arg(file)
        .args(["--name", label])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn racing_puts_all_succeed_and_a_refused_command_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    ok(&repo, &["init"]);
    let mut rng = StdRng::seed_from_u64(7);
    let mut files = Vec::new();
    for i in 0..RACERS * 2 {
        let mut data = vec![0u8; rng.gen_range(1 << 20..8 << 20)];
        rng.fill_bytes(&mut data);
        let path = dir.path().join(format!("f{i}"));
        fs::write(&path, &data).unwrap();
        files.push((path, data));
    }

    let mut stored = Vec::new();
    for round in 0..ROUNDS {
        let racers: Vec<_> = (0..RACERS)
            .map(|i| {
                let f = (round + i) % files.len();
                let label = format!("r{round}-{i}");
                (put(&repo, &files[f].0, &label), label, f)
            })
            .collect();
        for (child, label, f) in racers {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "put {label} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            stored.push((label, f));
        }
    }

    // A put that holds the lock for as long as its input stays open.
    let mut holder = Command::new(CAIRN)
        .args(["--repo", repo.to_str().unwrap(), "-q", "put", "-"])
        .args(["--name", "held"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = holder.stdin.take().unwrap();
    input.write_all(&files[0].1).unwrap();
    let record = repo.join("run").join("holder");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fs::read_to_string(&record).is_ok_and(|t| t.contains("held")) {
        assert!(
            Instant::now() < deadline,
            "the holder never recorded itself"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A container in flight, as the holder's branch stages it.
    let partial = repo.join("branches/local/.partial/in-flight");
    fs::write(&partial, b"half a container").unwrap();
    let config = fs::read(repo.join("cairn.toml")).unwrap();
    for args in [
        &["put", files[1].0.to_str().unwrap(), "--name", "refused"][..],
        &["roots"],
        &["rm", "r0-0"],
        &["repair", "--rebuild-index"],
        &["gc"],
    ] {
        let mut all = vec!["--lock-wait", "0"];
        all.extend_from_slice(args);
        let out = cairn(&repo, &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran beside the holder");
        let named = format!("(pid {})", holder.id());
        assert!(
            err.contains("is in use by `cairn")
                && err.contains("--name held")
                && err.contains(&named),
            "{args:?}: {err}"
        );
    }
    assert!(
        partial.exists(),
        "a refused command removed a partial container"
    );
    assert_eq!(fs::read(repo.join("cairn.toml")).unwrap(), config);
    drop(input);
    let out = holder.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::remove_file(&partial).ok();

    stored.push(("held".into(), 0));
    let roots = ok(&repo, &["roots"]);
    assert!(!roots.contains("refused"), "{roots}");
    let got = dir.path().join("got");
    for (label, f) in &stored {
        ok(
            &repo,
            &["get", label, "-o", got.to_str().unwrap(), "--force"],
        );
        assert!(
            fs::read(&got).unwrap() == files[*f].1,
            "{label} reads back wrong"
        );
    }
    let check = cairn(&repo, &["check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

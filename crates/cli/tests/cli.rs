//! The `cairn` binary as a user runs it: real processes, a real repository.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

fn cairn(repo: &Path, args: &[&str]) -> Output {
    Command::new(CAIRN)
        .arg("--repo")
        .arg(repo)
        .args(args)
        .env_remove("CAIRN_REPO")
        .output()
        .expect("run cairn")
}

fn ok(repo: &Path, args: &[&str]) -> String {
    let out = cairn(repo, args);
    assert!(
        out.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(repo: &Path, args: &[&str]) -> String {
    let out = cairn(repo, args);
    assert!(!out.status.success(), "cairn {args:?} should have failed");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Data that is partly random and partly drawn from a shared pool, so files
/// compress a little and share chunks with each other.
fn make_file(rng: &mut StdRng, pool: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let n = rng.gen_range(1_000..200_000).min(len - out.len());
        if rng.gen_bool(0.5) {
            let start = rng.gen_range(0..pool.len() - n.min(pool.len() - 1));
            out.extend_from_slice(&pool[start..start + n.min(pool.len() - start)]);
        } else {
            let mut buf = vec![0u8; n];
            rng.fill_bytes(&mut buf);
            out.extend_from_slice(&buf);
        }
    }
    out.truncate(len);
    out
}

fn pool(rng: &mut StdRng) -> Vec<u8> {
    let mut p = vec![0u8; 1 << 20];
    rng.fill_bytes(&mut p);
    p
}

fn stats(repo: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap()
}

fn container_files(repo: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![repo.join("branches/local/containers")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn put_get_stats_and_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let mut rng = StdRng::seed_from_u64(1);
    let pool = pool(&mut rng);
    let data = make_file(&mut rng, &pool, 3 << 20);
    let file = dir.path().join("data");
    fs::write(&file, &data).unwrap();
    ok(&repo, &["init"]);
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "a"]);
    let first = stats(&repo);
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "b"]);
    let second = stats(&repo);
    assert_eq!(second["logical_bytes"], 2 * data.len() as u64);
    assert_eq!(
        second["stored_bytes"], first["stored_bytes"],
        "a second copy stores nothing"
    );
    assert!(second["dedup_ratio"].as_f64().unwrap() > 1.9);
    assert!(second["index_ram_bytes_per_chunk"].as_f64().unwrap() > 0.0);
    let out = dir.path().join("out");
    ok(&repo, &["get", "b", "-o", out.to_str().unwrap(), "--force"]);
    assert!(fs::read(&out).unwrap() == data);
    let stdout = Command::new(CAIRN)
        .args(["--repo", repo.to_str().unwrap(), "get", "a"])
        .output()
        .unwrap();
    assert!(stdout.status.success() && stdout.stdout == data);
    // Standard input works too.
    let mut child = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "put",
            "-",
            "--name",
            "stdin",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &data[..100_000]).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    ok(
        &repo,
        &["get", "stdin", "-o", out.to_str().unwrap(), "--force"],
    );
    assert!(fs::read(&out).unwrap() == data[..100_000]);
    let roots = ok(&repo, &["roots"]);
    assert!(roots.contains("a") && roots.contains("stdin"), "{roots}");
    let e = fails(&repo, &["put", file.to_str().unwrap(), "--name", "a"]);
    assert!(
        e.contains("already exists") && e.contains("--replace"),
        "{e}"
    );
    let e = fails(&repo, &["get", "nope"]);
    assert!(e.contains("no root named \"nope\""), "{e}");
    ok(&repo, &["rm", "b"]);
    assert_eq!(stats(&repo)["roots"], 2);
    let e = fails(&dir.path().join("elsewhere"), &["stats"]);
    assert!(
        e.contains("no cairn repository") && e.contains("cairn init"),
        "{e}"
    );
}

#[test]
fn kill_dash_nine_during_puts_loses_no_acknowledged_label() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    ok(&repo, &["init"]);
    let mut rng = StdRng::seed_from_u64(2);
    let pool = pool(&mut rng);
    const FILES: usize = 8;
    let mut files = Vec::new();
    for i in 0..FILES {
        let len = rng.gen_range(10_000..5_000_000);
        let data = make_file(&mut rng, &pool, len);
        let path = dir.path().join(format!("f{i}"));
        fs::write(&path, &data).unwrap();
        files.push(data);
    }
    let acked = dir.path().join("acked");
    let script = r#"for i in $(seq "$1" "$2"); do
        "$CAIRN" -q --repo "$REPO" put "$DIR/f$((i % 8))" --name "l$i" && echo "l$i" >> "$ACK"
    done"#;
    let mut start = 0;
    for round in 0..8 {
        let end = start + 40;
        let mut child = Command::new("bash")
            .args(["-c", script, "loop", &start.to_string(), &end.to_string()])
            .env("CAIRN", CAIRN)
            .env("REPO", &repo)
            .env("DIR", dir.path())
            .env("ACK", &acked)
            .process_group(0)
            .spawn()
            .unwrap();
        if round < 7 {
            // A real kill at a random moment: drawn from the seeded rng,
            // and printed so a failure names it.
            let delay = rng.gen_range(20..1500);
            println!("round {round}: kill -9 after {delay} ms");
            std::thread::sleep(Duration::from_millis(delay));
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            child.wait().unwrap();
        } else {
            assert!(
                child.wait().unwrap().success(),
                "the last round runs to completion"
            );
        }
        start = end + 1;
    }
    let labels = fs::read_to_string(&acked).unwrap();
    let labels: Vec<&str> = labels.lines().collect();
    assert!(
        labels.len() >= 41,
        "the final round alone acknowledges 41 labels"
    );
    let check = cairn(&repo, &["check"]);
    assert!(
        check.status.success(),
        "check after kill -9: {}",
        String::from_utf8_lossy(&check.stdout)
    );
    let out = dir.path().join("out");
    for label in labels {
        let i: usize = label[1..].parse().unwrap();
        ok(
            &repo,
            &["get", label, "-o", out.to_str().unwrap(), "--force"],
        );
        assert!(
            fs::read(&out).unwrap() == files[i % FILES],
            "label {label} reads back wrong"
        );
    }
}

#[test]
fn flipped_byte_is_detected_and_a_fresh_put_heals_it() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let mut rng = StdRng::seed_from_u64(3);
    let mut data = vec![0u8; 2 << 20];
    rng.fill_bytes(&mut data);
    let file = dir.path().join("data");
    fs::write(&file, &data).unwrap();
    ok(&repo, &["init"]);
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "a"]);
    assert!(ok(&repo, &["check"]).contains("no damage found"));
    let victim = &container_files(&repo)[0];
    let mut bytes = fs::read(victim).unwrap();
    bytes[100_000] ^= 0x01;
    fs::write(victim, &bytes).unwrap();
    let name = victim.file_name().unwrap().to_str().unwrap();
    let e = fails(
        &repo,
        &["get", "a", "-o", dir.path().join("out").to_str().unwrap()],
    );
    assert!(e.contains("corrupt") && e.contains(name), "{e}");
    let report = fails(&repo, &["check"]);
    assert!(
        report.contains("DAMAGE") && report.contains(name),
        "{report}"
    );
    assert!(report.contains("root \"a\""), "{report}");
    let repaired = fails(&repo, &["check", "--repair"]);
    assert!(repaired.contains("lost data"), "{repaired}");
    // The damaged chunk is out of the index, so storing the data again
    // stores it afresh and the old label reads back whole.
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "again"]);
    let out = dir.path().join("out");
    ok(&repo, &["get", "a", "-o", out.to_str().unwrap(), "--force"]);
    assert!(fs::read(&out).unwrap() == data);
}

#[test]
fn rebuilt_index_gives_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let mut rng = StdRng::seed_from_u64(4);
    let pool = pool(&mut rng);
    ok(&repo, &["init"]);
    let mut files = Vec::new();
    for i in 0..4 {
        let data = make_file(&mut rng, &pool, 1_500_000);
        let path = dir.path().join(format!("f{i}"));
        fs::write(&path, &data).unwrap();
        ok(
            &repo,
            &["put", path.to_str().unwrap(), "--name", &format!("f{i}")],
        );
        files.push(data);
    }
    let before = stats(&repo);
    let index = repo.join("meta/index.redb");
    fs::write(&index, b"this is not a redb file").unwrap();
    let e = fails(&repo, &["get", "f0"]);
    assert!(e.contains("repair --rebuild-index"), "{e}");
    let out = ok(&repo, &["repair", "--rebuild-index"]);
    assert!(out.contains("chunks indexed"), "{out}");
    let after = stats(&repo);
    for key in [
        "logical_bytes",
        "stored_bytes",
        "unique_bytes",
        "chunks",
        "containers",
        "roots",
    ] {
        assert_eq!(before[key], after[key], "{key}");
    }
    let got = dir.path().join("got");
    for (i, data) in files.iter().enumerate() {
        ok(
            &repo,
            &[
                "get",
                &format!("f{i}"),
                "-o",
                got.to_str().unwrap(),
                "--force",
            ],
        );
        assert!(fs::read(&got).unwrap() == *data);
    }
    assert!(ok(&repo, &["check"]).contains("no damage found"));
}

#[test]
fn malformed_config_and_truncated_containers_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    ok(&repo, &["init"]);
    let config = repo.join("cairn.toml");
    let good = fs::read_to_string(&config).unwrap();
    fs::write(&config, good.replace("level = 2", "levle = 2")).unwrap();
    let e = fails(&repo, &["stats"]);
    assert!(
        e.contains("cairn.toml") && e.contains("levle") && e.contains("line"),
        "{e}"
    );
    fs::write(&config, good.replace("avg = \"64KiB\"", "avg = \"1MiB\"")).unwrap();
    let e = fails(&repo, &["stats"]);
    assert!(e.contains("chunking.avg") && e.contains("line"), "{e}");
    fs::write(&config, &good).unwrap();

    let mut rng = StdRng::seed_from_u64(5);
    let mut data = vec![0u8; 1 << 20];
    rng.fill_bytes(&mut data);
    let file = dir.path().join("data");
    fs::write(&file, &data).unwrap();
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "a"]);
    let victim = &container_files(&repo)[0];
    let len = fs::metadata(victim).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(victim)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let name = victim.file_name().unwrap().to_str().unwrap();
    let report = fails(&repo, &["check"]);
    assert!(
        report.contains(name) && report.contains("truncated"),
        "{report}"
    );
}

#[test]
fn help_describes_every_command() {
    let out = Command::new(CAIRN).arg("--help").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for cmd in [
        "init", "put", "get", "roots", "stats", "check", "repair", "demo",
    ] {
        assert!(text.contains(cmd), "--help lacks {cmd}: {text}");
    }
    let out = Command::new(CAIRN)
        .args(["put", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("durable"));
}

#[test]
fn an_unwritable_stderr_costs_the_messages_not_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r");
    ok(&repo, &["init"]);
    let file = dir.path().join("f");
    fs::write(&file, b"kept").unwrap();
    // /dev/full fails every write with ENOSPC.
    let out = Command::new(CAIRN)
        .arg("--repo")
        .arg(&repo)
        .args(["put", "--name", "f"])
        .arg(&file)
        .stderr(fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(ok(&repo, &["get", "f"]), "kept");
}

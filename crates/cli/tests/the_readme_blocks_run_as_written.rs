//! The README's shell blocks, run as written, as a new user would type
//! them: every ```sh block is taken from README.md itself and run by bash
//! with `-e`, in a scratch directory (or the checkout, where the README
//! says "from this directory"), with `cairn` on the PATH and a scratch
//! HOME. A block this test does not know by its first line fails it: a
//! new block gets a place here.
//!
//! - The first command, `cargo run --release -- serve`, builds the release
//!   binary (CI has built it already, with protoc hidden) and serves; the
//!   AWS CLI block then runs with the key lines serve printed put in
//!   `~/.aws/credentials`, as the README asks; Ctrl-C unmounts. It runs at
//!   a pseudo-terminal (util-linux's `script`), as at a user's: only there
//!   does the first start print the key's secret.
//! - The install block runs in a mount namespace of its own with tmpfs
//!   over /usr/local/bin and /sbin, so it installs for real and leaves the
//!   machine as it was; the systemd unit must start the path it installs,
//!   and the binary must be the size the README states.
//! - The test command is not run from inside the tests; it must be the
//!   command `.ci/run` ends with.
//! - The Usage tour runs on a scratch repository.
//! - The cluster steps start three etcd clusters, chunkd, coord and two
//!   background mounts, and the stop block ends them all.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{is_cairn_mounted, random, CAIRN};

/// What a block is for, known by its first line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Serve,
    AwsCli,
    TestCommand,
    Install,
    Tour,
    Cluster,
    ClusterStop,
}

fn role(first_line: &str) -> Role {
    match first_line {
        "cargo run --release -- serve" => Role::Serve,
        l if l.starts_with("aws --profile cairn") => Role::AwsCli,
        l if l.starts_with("cargo clippy") => Role::TestCommand,
        l if l.starts_with("install -m 755 target/release/cairn") => Role::Install,
        l if l.starts_with("export CAIRN_REPO=") => Role::Tour,
        l if l.starts_with("for port in") => Role::Cluster,
        l if l.starts_with("cairn umount mnt-a") => Role::ClusterStop,
        other => panic!("the README has a shell block this test does not know: {other:?}"),
    }
}

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README's ```sh blocks, in order.
fn sh_blocks() -> Vec<(Role, String)> {
    let readme = fs::read_to_string(checkout().join("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in readme.lines() {
        match (&mut open, line) {
            (None, "```sh") => open = Some(String::new()),
            (Some(body), "```") => {
                let first = body.lines().next().unwrap_or_default().to_string();
                blocks.push((role(&first), std::mem::take(body)));
                open = None;
            }
            (Some(body), l) => {
                body.push_str(l);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(open.is_none(), "an unclosed ```sh block in the README");
    blocks
}

fn block(role: Role) -> String {
    let found: Vec<String> = sh_blocks()
        .into_iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(found.len(), 1, "one {role:?} block in the README");
    found.into_iter().next().unwrap()
}

/// A PATH with the tested `cairn` first.
fn path_with_cairn() -> String {
    let bin = Path::new(CAIRN).parent().unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// `bash -e -c BLOCK` in `dir` with HOME `home`, its own process group.
fn bash(block: &str, dir: &Path, home: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-e", "-c", block]);
    as_a_user(cmd, dir, home)
}

/// `cmd` in `dir` with HOME `home`, `cairn` first on the PATH, nothing of
/// this test's environment that a user would not have; its own process
/// group.
fn as_a_user(mut cmd: Command, dir: &Path, home: &Path) -> Command {
    cmd.current_dir(dir)
        .env("HOME", home)
        .env("PATH", path_with_cairn())
        .env_remove("CAIRN_REPO")
        .env_remove("RUST_LOG")
        // As a new user builds: into the checkout's target/, where the
        // README's install block takes the binary from.
        .env_remove("CARGO_TARGET_DIR");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd
}

/// Runs a block to its end, asserting success; what it printed. Its
/// standard output goes to a file: background jobs it starts keep theirs
/// open long after it ends.
fn run(block: &str, dir: &Path, home: &Path) -> String {
    let out_path = dir.join(".block.out");
    let out = fs::File::create(&out_path).unwrap();
    let status = bash(block, dir, home)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .status()
        .unwrap();
    let said = fs::read_to_string(&out_path).unwrap();
    assert!(
        status.success(),
        "README block failed ({status}):\n{block}\n--- it said:\n{said}"
    );
    said
}

/// Unmounts what a failed block left mounted, and kills its process group.
struct Cleanup {
    mounts: Vec<PathBuf>,
    group: Option<u32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for m in &self.mounts {
            if is_cairn_mounted(m) {
                let _ = Command::new("fusermount3").arg("-uz").arg(m).status();
            }
        }
        if let Some(pgid) = self.group {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .status();
        }
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not after 5 minutes");
}

#[test]
fn the_first_command_serves_and_the_aws_cli_block_uses_it_then_it_installs() {
    common::require_fuse();
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("home");
    fs::create_dir_all(&home).unwrap();
    let mount = home.join("cairn");
    let mut cleanup = Cleanup {
        mounts: vec![mount.clone()],
        group: None,
    };

    // At a terminal, as a user runs it (the key's secret is printed only
    // to a terminal): util-linux's `script` gives it a pseudo-terminal, and
    // a ^C written to it is Ctrl-C.
    let mut script = Command::new("script");
    script.args(["-qfec", block(Role::Serve).trim(), "/dev/null"]);
    let mut serve: Child = as_a_user(script, &checkout(), &home)
        .env("SHELL", "/bin/bash")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    cleanup.group = Some(serve.id());
    let (tx, said) = mpsc::channel::<String>();
    for stream in [
        Box::new(serve.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(serve.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line.trim_end_matches('\r').to_string());
            }
        });
    }
    // The key lines serve prints for ~/.aws/credentials, until it serves.
    let mut credentials = String::new();
    let mut printed = String::new();
    let mut in_credentials = false;
    while !(is_cairn_mounted(&mount) && credentials.contains("aws_secret_access_key")) {
        let line = said
            .recv_timeout(Duration::from_secs(900))
            .unwrap_or_else(|_| panic!("serve did not mount and print a key; it said:\n{printed}"));
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("Add to ~/.aws/credentials") {
            in_credentials = true;
        } else if in_credentials && (line.starts_with('[') || line.starts_with("aws_")) {
            credentials.push_str(&line);
            credentials.push('\n');
        } else {
            in_credentials = false;
        }
        if let Some(status) = serve.try_wait().unwrap() {
            panic!("serve ended ({status}); it said:\n{printed}");
        }
    }
    wait_for("the mount at ~/cairn", || is_cairn_mounted(&mount));
    fs::create_dir_all(home.join(".aws")).unwrap();
    fs::write(home.join(".aws/credentials"), &credentials).unwrap();

    let work = scratch.path().join("work");
    fs::create_dir_all(&work).unwrap();
    fs::write(work.join("pic.jpg"), random(300_000, 3)).unwrap();
    let listed = run(&block(Role::AwsCli), &work, &home);
    assert!(listed.contains("pic.jpg"), "{listed}");
    assert_eq!(
        fs::read(mount.join("photos/pic.jpg")).unwrap(),
        fs::read(work.join("pic.jpg")).unwrap()
    );

    // Ctrl-C at its terminal.
    {
        use std::io::Write as _;
        let mut tty = serve.stdin.take().unwrap();
        tty.write_all(b"\x03").unwrap();
        tty.flush().unwrap();
    }
    let status = serve.wait().unwrap();
    assert!(status.success(), "serve after Ctrl-C: {status}");
    assert!(!is_cairn_mounted(&mount), "Ctrl-C unmounts");
    cleanup.group = None;

    // The install block, in a mount namespace with scratch bin directories.
    let install = block(Role::Install);
    let script = format!(
        "mount -t tmpfs tmpfs /usr/local/bin && mount -t tmpfs tmpfs /sbin/\n{install}\n\
         /usr/local/bin/cairn --version\n\
         test \"$(readlink /sbin/mount.fuse.cairn)\" = /usr/local/bin/cairn\n"
    );
    let out = Command::new("unshare")
        .args(["--mount", "bash", "-e", "-c", &script])
        .current_dir(checkout())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("cairn "));
    let unit = fs::read_to_string(checkout().join("contrib/systemd/cairn.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l.starts_with("ExecStart=/usr/local/bin/cairn serve")),
        "the unit starts the installed binary"
    );

    // The size the README states, within a quarter.
    let readme = fs::read_to_string(checkout().join("README.md")).unwrap();
    let stated: f64 = readme
        .split("(about ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|n| n.parse().ok())
        .expect("the README states the binary's size as (about N MiB");
    let size = fs::metadata(checkout().join("target/release/cairn"))
        .unwrap()
        .len() as f64
        / (1 << 20) as f64;
    assert!(
        (size - stated).abs() <= stated / 4.0,
        "the binary is {size:.1} MiB, the README says about {stated} MiB"
    );
}

#[test]
fn the_readme_test_command_is_the_one_ci_runs() {
    let command = block(Role::TestCommand);
    let ci = fs::read_to_string(checkout().join(".ci/run")).unwrap();
    let command = command.trim();
    assert!(
        ci.lines().any(|l| l.trim() == command),
        ".ci/run runs the README's test command, {command:?}"
    );
}

#[test]
fn the_usage_tour_runs_on_a_scratch_repository() {
    common::require_fuse();
    let scratch = tempfile::tempdir().unwrap();
    let _cleanup = Cleanup {
        mounts: vec![scratch.path().join("mnt")],
        group: None,
    };
    let said = run(&block(Role::Tour), scratch.path(), scratch.path());
    assert!(
        said.lines().any(|l| l == "draft"),
        "the restored file reads back:\n{said}"
    );
    assert!(scratch.path().join("key-backup").is_file());
    assert!(!is_cairn_mounted(&scratch.path().join("mnt")));
}

#[test]
fn the_cluster_steps_share_one_file_system_and_stop() {
    common::require_fuse();
    let scratch = tempfile::tempdir().unwrap();
    let (a, b) = (scratch.path().join("mnt-a"), scratch.path().join("mnt-b"));
    let _cleanup = Cleanup {
        mounts: vec![a.clone(), b.clone()],
        group: None,
    };
    let said = run(&block(Role::Cluster), scratch.path(), scratch.path());
    assert!(
        said.lines().any(|l| l == "hello"),
        "B reads what A wrote:\n{said}"
    );
    assert!(is_cairn_mounted(&a) && is_cairn_mounted(&b));
    run(&block(Role::ClusterStop), scratch.path(), scratch.path());
    assert!(!is_cairn_mounted(&a) && !is_cairn_mounted(&b));
    wait_for("every process the steps started ends", || {
        let left = Command::new("pgrep")
            .args([
                "-f",
                "etcd --name etcd23|cairn chunkd --dir blobs|cairn coord --cluster",
            ])
            .output()
            .unwrap();
        left.stdout.is_empty()
    });
}

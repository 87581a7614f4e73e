//! The first start of the gateway makes an access key. With its output
//! going to a pipe (a service: the journal, a log file) the secret is
//! printed nowhere, not in the log either: it is in
//! `REPO/gateway/first-key`, mode 0600, as lines for `~/.aws/credentials`,
//! and the output says where. On a terminal (`script` gives it one) the
//! lines are printed as the README shows, and no such file is written.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::CAIRN;

/// SIGTERM to `pid` (a process this test started).
fn stop(pid: u32) {
    // SAFETY: a plain syscall on our own process.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
}

fn gateway(repo: &Path) -> Command {
    let mut c = Command::new(CAIRN);
    c.args([
        "--repo",
        repo.to_str().unwrap(),
        "gateway",
        "--listen",
        "127.0.0.1:0",
    ]);
    c
}

/// Reads `child`'s standard error up to the line starting `until`, then
/// stops it and returns all it wrote on both.
fn said_until(mut child: Child, until: &str) -> (String, String) {
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.lines().any(|l| l.starts_with(until)) {
        assert!(
            err.read_line(&mut said).unwrap() > 0,
            "no {until:?} in {said}"
        );
    }
    stop(child.id());
    err.read_to_string(&mut said).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    (out, said)
}

#[test]
fn without_a_terminal_the_secret_goes_to_a_file_only_root_reads() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    common::ok(&repo, &["init"]);
    let child = gateway(&repo)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, said) = said_until(child, "cairn: serving ");

    let file = repo.join("gateway/first-key");
    let text = fs::read_to_string(&file).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    let (id, secret) = (field("aws_access_key_id"), field("aws_secret_access_key"));
    assert!(text.starts_with("[cairn]\n"), "{text}");
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(
        out.contains(&format!("access key {id}")) && out.contains(file.to_str().unwrap()),
        "standard output does not say where the secret is: {out}"
    );
    let log = fs::read_to_string(repo.join("log/cairn.log")).unwrap();
    for (what, text) in [("stdout", &out), ("stderr", &said), ("the log", &log)] {
        assert!(!text.contains(&secret), "the secret is in {what}: {text}");
    }
    // The key in the file is the one the gateway knows.
    let listed = common::ok(&repo, &["access-key", "list"]);
    assert!(listed.contains(&id), "{listed}");

    // A second start makes no key and says nothing of one.
    let child = gateway(&repo)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, said) = said_until(child, "cairn: serving ");
    assert!(
        !out.contains("access key") && !said.contains("access key"),
        "{out}{said}"
    );
}

#[test]
fn on_a_terminal_the_first_start_prints_lines_for_aws_credentials() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    common::ok(&repo, &["init"]);
    let line = format!(
        "exec {CAIRN} --repo {} gateway --listen 127.0.0.1:0",
        repo.display()
    );
    // `script` runs the gateway on a terminal of its own and copies what
    // it prints to its standard output.
    let mut script = Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script (util-linux) not found");
    let mut out = BufReader::new(script.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.lines().any(|l| l.starts_with("then: ")) {
        assert!(out.read_line(&mut printed).unwrap() > 0, "{printed}");
    }
    let children = fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        script.id(),
        script.id()
    ))
    .unwrap();
    let gateway: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    stop(gateway);
    script.wait().unwrap();

    assert!(
        printed.contains("its secret is shown only now"),
        "{printed}"
    );
    assert!(printed.contains("\n[cairn]"), "{printed}");
    let secret = printed
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("aws_secret_access_key = "))
        .unwrap_or_else(|| panic!("no secret in {printed}"));
    assert_eq!(secret.len(), 40, "{printed}");
    assert!(!repo.join("gateway/first-key").exists());
}

//! A command that reaches a daemon speaking another control protocol (one
//! from before versioning, or a newer one) stops with a message naming both
//! versions and what to do, instead of misreading the answer; the request
//! line it sent carries its own version.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;

use common::{cairn, ok};

#[test]
fn an_old_or_new_daemon_is_named_by_its_protocol() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let socket = repo.join("run").join("control.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    // What a daemon of protocol 0 (no version) and of protocol 9 answer.
    let answers = [
        (0, "{\"error\":\"malformed request: missing field `op`\"}\n"),
        (
            9,
            "{\"protocol\":9,\"error\":\"this daemon speaks control protocol 9\"}\n",
        ),
    ];
    for (daemon, answer) in answers {
        let listener = UnixListener::bind(&socket).unwrap();
        let fake = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut request = String::new();
            BufReader::new(&conn).read_line(&mut request).unwrap();
            (&conn).write_all(answer.as_bytes()).unwrap();
            request
        });
        let out = cairn(&repo, &["stats", "--json"]);
        let request = fake.join().unwrap();
        let request: serde_json::Value = serde_json::from_str(&request).unwrap();
        assert_eq!(request["request"]["op"], "stats", "{request}");
        let ours = request["protocol"].as_u64().unwrap();
        assert_ne!(ours, daemon);
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "the mounted daemon speaks control protocol {daemon}, this cairn speaks {ours}; \
                 restart the mount"
            )),
            "{stderr}"
        );
        std::fs::remove_file(&socket).unwrap();
    }
    // With no daemon, the same command opens the repository itself.
    let stats: serde_json::Value = serde_json::from_str(&ok(&repo, &["stats", "--json"])).unwrap();
    assert_eq!(stats["roots"], 0, "{stats}");
    ok(&repo, &["check"]);
}

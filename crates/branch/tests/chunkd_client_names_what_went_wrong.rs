//! `ChunkdBranch` against servers that are not a healthy chunkd: nothing
//! listening, a server that fails, one that answers what is not the
//! protocol, and one that never answers. Each gives its own typed error,
//! naming the branch and the blob, never substitute data.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use branch::{
    BlobKey, Branch, BranchError, ChunkdBranch, ChunkdConfig, ChunkdFailure, RemoteFailure,
};

/// A server answering every request with `answer` (or never, for None).
fn canned(answer: Option<&'static str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || serve(conn, answer));
        }
    });
    url
}

fn serve(conn: TcpStream, answer: Option<&str>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        match answer {
            Some(a) => {
                if (&conn).write_all(a.as_bytes()).is_err() {
                    return;
                }
            }
            None => std::thread::sleep(Duration::from_secs(30)),
        }
    }
}

fn config(url: &str, dir: &tempfile::TempDir) -> ChunkdConfig {
    let token = dir.path().join("token");
    std::fs::write(&token, "a-token-of-sixteen-bytes\n").unwrap();
    let mut c = ChunkdConfig::new(url, token);
    c.request_timeout = Duration::from_millis(500);
    c.open_timeout = Duration::from_millis(500);
    c
}

fn failure(e: BranchError) -> ChunkdFailure {
    match e {
        BranchError::Remote {
            source: RemoteFailure::Chunkd(f),
            ..
        } => f,
        other => panic!("not a chunkd failure: {other}"),
    }
}

#[test]
fn each_failure_has_its_own_error() {
    let dir = tempfile::tempdir().unwrap();
    let key = BlobKey::new("c/1").unwrap();

    // Nothing listens: refused at open, and every call of an unprobed
    // branch says it cannot reach the server.
    let nobody = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let err = ChunkdBranch::open("gone", &config(&nobody, &dir))
        .err()
        .unwrap();
    assert!(
        matches!(err, BranchError::ChunkdUnreachable { .. }),
        "{err}"
    );
    let b = ChunkdBranch::open_unprobed("gone", &config(&nobody, &dir)).unwrap();
    let e = b.get(&key).unwrap_err();
    assert!(
        e.to_string().contains("gone") && e.to_string().contains("c/1"),
        "{e}"
    );
    assert!(matches!(failure(e), ChunkdFailure::Unreachable { .. }));

    // A failing server: its status and reason.
    let url = canned(Some(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 12\r\n\r\ndisk on fire",
    ));
    let b = ChunkdBranch::open_unprobed("sick", &config(&url, &dir)).unwrap();
    match failure(b.put(&key, b"data").unwrap_err()) {
        ChunkdFailure::Refused { status, message } => {
            assert_eq!((status, message.as_str()), (500, "disk on fire"))
        }
        other => panic!("{other}"),
    }

    // 200 with "{}" to everything: opens (space answers 200), but a listing
    // that does not parse, a size without its header and a range answered
    // whole are garbage, not data.
    let url = canned(Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"));
    let b = ChunkdBranch::open_unprobed("liar", &config(&url, &dir)).unwrap();
    assert!(matches!(
        failure(b.list("c/").unwrap_err()),
        ChunkdFailure::Garbage(_)
    ));
    assert!(matches!(
        failure(b.size(&key).unwrap_err()),
        ChunkdFailure::Garbage(_)
    ));
    assert!(matches!(
        failure(b.read_range(&key, 0, 2).unwrap_err()),
        ChunkdFailure::Garbage(_)
    ));
    assert!(matches!(
        failure(b.put(&key, b"x").unwrap_err()),
        ChunkdFailure::Garbage(_)
    ));

    // A server that never answers: the request's timeout, as unreachable.
    let url = canned(None);
    let b = ChunkdBranch::open_unprobed("mute", &config(&url, &dir)).unwrap();
    assert!(matches!(
        failure(b.get(&key).unwrap_err()),
        ChunkdFailure::Unreachable { .. }
    ));
}

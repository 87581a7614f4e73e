//! Requests to a chunkd without the token get 401, with a wrong one 403,
//! and neither changes anything; a body over --max-body is refused (413)
//! by its announced length. Plain HTTP over a TCP socket, as an attacker
//! would send it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use branch::{BlobKey, Branch, ChunkdBranch, ChunkdConfig};
use common::chunkd::{token_file, Chunkd, TOKEN};

/// Sends one HTTP/1.0 request; the status code of the answer.
fn status(url: &str, request: &str) -> u16 {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("answer {out:?}"))
}

#[test]
fn requests_without_the_token_change_nothing() {
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let dir = base.path().join("served");
    let server = Chunkd::start_with(&dir, &token, "127.0.0.1:0", &["--max-body", "1000"]);
    let good = ChunkdBranch::open("remote", &server.config()).unwrap();
    let kept = BlobKey::new("c/kept").unwrap();
    good.put(&kept, b"kept").unwrap();

    let put =
        |auth: &str| format!("PUT /v1/blob/c/new HTTP/1.0\r\n{auth}Content-Length: 3\r\n\r\nabc");
    let delete = |auth: &str| format!("DELETE /v1/blob/c/kept HTTP/1.0\r\n{auth}\r\n");
    assert_eq!(status(&server.url, &put("")), 401);
    assert_eq!(
        status(
            &server.url,
            &put("Authorization: Bearer wrong-token-0123456789\r\n")
        ),
        403
    );
    assert_eq!(status(&server.url, &delete("")), 401);
    assert_eq!(
        status(
            &server.url,
            &delete("Authorization: Basic Zm9vOmJhcg==\r\n")
        ),
        401
    );
    assert_eq!(
        status(&server.url, "GET /v1/blob/c/kept HTTP/1.0\r\n\r\n"),
        401
    );
    let lookup =
        "POST /v1/index/lookup HTTP/1.0\r\nAuthorization: Bearer nope\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(status(&server.url, lookup), 403);
    // Refused by the announced length alone: no body is sent at all.
    let big = format!("PUT /v1/blob/c/big HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 5000\r\n\r\n");
    assert_eq!(status(&server.url, &big), 413);

    // A branch opened with the wrong token is refused at open.
    let wrong = base.path().join("wrong.token");
    std::fs::write(&wrong, "wrong-token-0123456789\n").unwrap();
    let err = ChunkdBranch::open("remote", &ChunkdConfig::new(server.url.clone(), wrong))
        .err()
        .expect("a wrong token is refused");
    assert!(err.to_string().contains("403"), "{err}");

    // Nothing changed.
    assert_eq!(good.list("").unwrap(), vec![kept.clone()]);
    assert_eq!(good.get(&kept).unwrap(), b"kept");
}

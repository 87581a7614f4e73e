//! Static files: `cairn bucket public site on` lets a plain HTTP client
//! (curl, as a browser would) GET and HEAD the bucket's objects without a
//! signature — files written through the mount and objects PUT with a
//! Content-Type alike, ranges too — while listing it, writing or deleting
//! in it, and reading any other bucket stay 403 and change nothing. `off`
//! closes it again. The repository then checks clean.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::fs;
use std::process::Command;

use common::{cairn, ok};

/// `curl` with `args`: the status code and the body.
fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl");
    let text = out.stdout;
    let cut = text.iter().rposition(|&b| b == b'\n').unwrap();
    let code = std::str::from_utf8(&text[cut + 1..])
        .unwrap()
        .parse()
        .unwrap();
    (code, text[..cut].to_vec())
}

#[test]
fn a_public_bucket_answers_plain_gets_and_nothing_else() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let s = serve::serve(&repo, &dir);
    let page = b"<html><body>cairn</body></html>".to_vec();
    fs::create_dir_all(dir.join("site/css")).unwrap();
    fs::create_dir_all(dir.join("private")).unwrap();
    fs::write(dir.join("site/index.html"), &page).unwrap();
    fs::write(dir.join("private/secret.txt"), b"not for you").unwrap();
    let css = b"body { color: black }".to_vec();
    let put = Command::new("python3")
        .args([
            "-c",
            "import boto3, os, sys\n\
             s3 = boto3.client('s3', endpoint_url=os.environ['ENDPOINT'], \
             aws_access_key_id=os.environ['KEY_ID'], aws_secret_access_key=os.environ['SECRET'], \
             region_name='us-east-1')\n\
             s3.put_object(Bucket='site', Key='css/app.css', Body=sys.stdin.buffer.read(), ContentType='text/css')",
        ])
        .env("ENDPOINT", &s.endpoint)
        .env("KEY_ID", &s.key_id)
        .env("SECRET", &s.secret)
        .stdin(fs::File::open({
            let p = base.path().join("css");
            fs::write(&p, &css).unwrap();
            p
        }).unwrap())
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let url = |path: &str| format!("{}/{path}", s.endpoint);

    // Off by default.
    assert_eq!(curl(&[&url("site/index.html")]).0, 403);
    let said = ok(&repo, &["bucket", "public", "site", "on"]);
    assert!(said.contains("site is now public-read"), "{said}");
    assert_eq!(ok(&repo, &["bucket", "list-public"]).trim(), "site");

    assert_eq!(curl(&[&url("site/index.html")]), (200, page.clone()));
    assert_eq!(curl(&[&url("site/css/app.css")]), (200, css.clone()));
    let (code, head) = curl(&["-I", &url("site/css/app.css")]);
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert_eq!(code, 200);
    assert!(head.contains("content-type: text/css"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", css.len())),
        "{head}"
    );
    assert_eq!(
        curl(&["-r", "6-10", &url("site/index.html")]),
        (206, page[6..11].to_vec())
    );
    assert_eq!(curl(&[&url("site/missing.html")]).0, 404);

    // Everything else still needs a key, and changes nothing.
    assert_eq!(curl(&[&url("site")]).0, 403);
    assert_eq!(curl(&[&url("site/?list-type=2")]).0, 403);
    assert_eq!(
        curl(&["-X", "PUT", "--data-binary", "x", &url("site/new.html")]).0,
        403
    );
    assert_eq!(curl(&["-X", "DELETE", &url("site/index.html")]).0, 403);
    assert_eq!(curl(&[&url("private/secret.txt")]).0, 403);
    assert!(!dir.join("site/new.html").exists());
    assert_eq!(fs::read(dir.join("site/index.html")).unwrap(), page);

    ok(&repo, &["bucket", "public", "site", "off"]);
    assert_eq!(curl(&[&url("site/index.html")]).0, 403);
    assert!(ok(&repo, &["bucket", "list-public"]).trim().is_empty());
    let bad = cairn(&repo, &["bucket", "public", "Not_A_Bucket", "on"]);
    assert_eq!(bad.status.code(), Some(1));

    let (repo, _) = s.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}

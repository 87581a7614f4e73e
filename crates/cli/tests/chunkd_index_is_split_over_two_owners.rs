//! The fingerprint index over two chunkds, each owning half of the space
//! (range table in a real etcd): adds and lookups are split by owner; a
//! range reassigned at a new epoch makes the owner refuse a client that
//! holds the old table, which reads the table again and gets its answer;
//! with one chunkd down, lookups answer "not found" for its half only and
//! adds to that half fail with a typed error; once it is back, what it
//! had committed is found again.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use chunkd::{ClientConfig, ClientError, Fingerprint, IndexClient, Location};
use common::chunkd::{token_file, Chunkd, TOKEN};
use common::etcd::Etcd;
use common::{cairn, random};

fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `n` fingerprints whose first byte is below 0x80 (`low`) or not.
fn fingerprints(n: usize, seed: u64, low: bool) -> Vec<Fingerprint> {
    random(n * 32, seed)
        .chunks(32)
        .map(|c| {
            let mut b: [u8; 32] = c.try_into().unwrap();
            b[0] = if low { b[0] & 0x7f } else { b[0] | 0x80 };
            Fingerprint::new(b)
        })
        .collect()
}

fn location(i: usize) -> Location {
    Location::new(format!("container-location-{i:010}").into_bytes()).unwrap()
}

/// Asserts equal answers, naming the first that differs (not all of them).
fn assert_same(got: &[Option<Location>], wanted: &[Option<Location>]) {
    assert_eq!(got.len(), wanted.len());
    let wrong: Vec<usize> = (0..got.len()).filter(|&i| got[i] != wanted[i]).collect();
    if let Some(&i) = wrong.first() {
        panic!(
            "{} answers wrong; the first, #{i}: got {:?}, wanted {:?}",
            wrong.len(),
            got[i],
            wanted[i]
        );
    }
}

fn ranges(args: &[&str]) -> String {
    let out = cairn(std::path::Path::new("/nonexistent"), args);
    assert!(
        out.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_index_is_split_over_two_owners() {
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let etcd = Etcd::start();
    let endpoint = etcd
        .url("x")
        .replace("etcd://", "http://")
        .replace("/x", "");
    let (addr_a, addr_b) = (free_addr(), free_addr());
    let (url_a, url_b) = (format!("http://{addr_a}"), format!("http://{addr_b}"));
    let cluster = ["--etcd", &endpoint, "--fsid", "fs1"];
    let mut init = vec!["chunkd", "ranges", "init"];
    init.extend(cluster);
    init.extend(["--owner", &url_a, "--owner", &url_b]);
    let table = ranges(&init);
    assert!(
        table.contains(&format!(
            "0000000000000000 7fffffffffffffff {url_a} epoch 1"
        )),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "8000000000000000 ffffffffffffffff {url_b} epoch 1"
        )),
        "{table}"
    );

    let extra = [&cluster[..], &["--refresh", "1"]].concat();
    let _a = Chunkd::start_with(&base.path().join("a"), &token, &addr_a, &extra);
    let mut b = Chunkd::start_with(&base.path().join("b"), &token, &addr_b, &extra);

    let client =
        IndexClient::connect(&ClientConfig::new(vec![endpoint.clone()], "fs1", &token)).unwrap();
    let (low, high) = (fingerprints(100, 11, true), fingerprints(100, 21, false));
    let one: Vec<(Fingerprint, Location)> = low
        .iter()
        .chain(&high[..50])
        .enumerate()
        .map(|(i, fp)| (*fp, location(i)))
        .collect();
    let two: Vec<(Fingerprint, Location)> = high[50..]
        .iter()
        .enumerate()
        .map(|(i, fp)| (*fp, location(1000 + i)))
        .collect();
    client.add(1, &one).unwrap();
    client.add(2, &two).unwrap();
    let unknown = fingerprints(20, 31, false);
    let everything: Vec<(Fingerprint, Option<Location>)> = one
        .iter()
        .chain(&two)
        .map(|(fp, l)| (*fp, Some(l.clone())))
        .chain(unknown.iter().map(|fp| (*fp, None)))
        .collect();
    let asked: Vec<Fingerprint> = everything.iter().map(|(fp, _)| *fp).collect();
    let found = client.lookup(&asked);
    assert!(found.unavailable.is_empty(), "{:?}", found.unavailable);
    let wanted: Vec<Option<Location>> = everything.iter().map(|(_, l)| l.clone()).collect();
    assert_same(&found.locations, &wanted);

    // A new epoch for b's range: b refuses the client's old table, the
    // client reads the table again and is answered.
    let mut assign = vec!["chunkd", "ranges", "assign"];
    assign.extend(cluster);
    assign.extend(["--start", "8000000000000000", "--owner", &url_b]);
    assert!(ranges(&assign).contains(&format!("{url_b} epoch 2")));
    let started = Instant::now();
    while chunkd::fetch_view(&url_b, TOKEN, Duration::from_secs(2))
        .map(|t| t.ranges[1].epoch)
        .ok()
        != Some(2)
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "b never saw epoch 2"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(client.table().ranges[1].epoch, 1);
    let found = client.lookup(&asked);
    assert_same(&found.locations, &wanted);
    assert!(client.stale_refusals() >= 1);
    assert_eq!(client.table().ranges[1].epoch, 2);

    // gc forgets container 1: its entries go, container 2's stay.
    assert_eq!(client.forget(&[1]).unwrap(), one.len() as u64);
    let found = client.lookup(&asked);
    for (i, (fp, l)) in everything.iter().enumerate() {
        let in_one = one.iter().any(|(f, _)| f == fp);
        let expect = if in_one { None } else { l.clone() };
        assert!(found.locations[i] == expect, "fingerprint {fp}");
    }

    // b down: its half is "not found", a's still answers; adds to b fail.
    b.kill();
    let found = client.lookup(&asked);
    assert_eq!(found.unavailable.len(), 1, "{:?}", found.unavailable);
    assert_eq!(found.unavailable[0].0, url_b);
    assert!(
        found.locations.iter().all(Option::is_none),
        "only container 2 was left, all on b"
    );
    let low_entries: Vec<(Fingerprint, Location)> =
        low.iter().map(|fp| (*fp, location(7))).collect();
    client.add(3, &low_entries).unwrap();
    let err = client.add(4, &two).unwrap_err();
    assert!(
        matches!(&err, ClientError::Owner { op: "add", owner, .. } if *owner == url_b),
        "{err}"
    );
    let found = client.lookup(&low);
    assert!(found.locations.iter().all(|l| *l == Some(location(7))));
    assert!(
        client.forget(&[3]).is_err(),
        "forget must fail while an owner is down"
    );

    let mut show = vec!["chunkd", "ranges", "show"];
    show.extend(cluster);
    let token_arg = token.to_str().unwrap().to_string();
    show.extend(["--token-file", &token_arg]);
    let shown = ranges(&show);
    assert!(
        shown.contains(&format!("owner {url_b}: not answering")),
        "{shown}"
    );
    assert!(shown.contains(&format!("owner {url_a}: ok")), "{shown}");
    show.push("--json");
    let v: serde_json::Value = serde_json::from_str(&ranges(&show)).unwrap();
    assert_eq!(v["ranges"][1]["start"], "8000000000000000");
    assert_eq!(v["ranges"][1]["epoch"], 2);
    let owners = v["owners"].as_array().unwrap();
    let down = owners
        .iter()
        .find(|o| o["owner"] == url_b.as_str())
        .unwrap();
    assert_eq!(down["ok"], false);
    assert!(down["error"].as_str().is_some_and(|e| !e.is_empty()));
    let up = owners
        .iter()
        .find(|o| o["owner"] == url_a.as_str())
        .unwrap();
    assert_eq!(up["ranges"][0]["start"], "0000000000000000");

    // b back: what it committed before the kill is there.
    b.restart();
    let found = client.lookup(&high[50..]);
    assert!(found.unavailable.is_empty());
    let back: Vec<Option<Location>> = two.iter().map(|(_, l)| Some(l.clone())).collect();
    assert_same(&found.locations, &back);
    assert!(client.table().ranges.iter().all(|r| r.epoch >= 1));
}

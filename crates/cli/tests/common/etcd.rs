//! A real one-member `etcd` (Debian's etcd-server) on free loopback ports
//! (`testkit::etcd`), as the cli tests name it: by the URLs `cairn` takes.
#![allow(dead_code)]

use std::path::Path;

pub struct Etcd(testkit::etcd::Etcd);

impl Etcd {
    pub fn start() -> Etcd {
        Etcd(testkit::etcd::Etcd::start())
    }

    /// `etcd://127.0.0.1:PORT/FSID`, as `cairn mount --meta` takes it.
    pub fn url(&self, fsid: &str) -> String {
        format!("{}/{fsid}", self.hosts())
    }

    /// `etcd://127.0.0.1:PORT`, as `cairn cluster init` takes a cluster.
    pub fn hosts(&self) -> String {
        format!("etcd://{}", self.0.hosts())
    }
}

/// `cairn cluster init` of file system `fsid` in `repo`'s name, its shard
/// map in `control` and its shards over `data` (with `more` arguments):
/// what `--json` printed.
pub fn cluster_init(
    repo: &Path,
    control: &Etcd,
    data: &[&Etcd],
    fsid: &str,
    more: &[&str],
) -> serde_json::Value {
    let control = control.hosts();
    let data: Vec<String> = data.iter().map(|d| d.hosts()).collect();
    let mut args = vec![
        "cluster",
        "init",
        "--control",
        &control,
        "--fsid",
        fsid,
        "--json",
    ];
    for d in &data {
        args.extend(["--data", d.as_str()]);
    }
    args.extend(more);
    serde_json::from_str(&super::ok(repo, &args)).unwrap()
}

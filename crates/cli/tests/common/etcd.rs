//! A real one-member `etcd` (Debian's etcd-server) on free loopback ports
//! (`testkit::etcd`), as the cli tests name it: by the URLs `cairn` takes.

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

//! A client forgotten by the others (`cairn cluster forget-client`) while
//! it was only hung writes no version and no snapshot once it is back:
//! a collection may have run without it, so a root it wrote then could
//! name chunks that are gone. Before it was forgotten it wrote both; a
//! client whose registration lapsed but whom nobody forgot writes on.
//! Over a real etcd (a registration lapses by etcd's clock).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cas::RepoKey;
use common::clients::{client_on, write};
use common::random;
use fs::Fs;
use meta::Forget;
use meta_etcd::{EtcdMeta, EtcdOptions};
use testkit::wait::until;

fn options() -> EtcdOptions {
    EtcdOptions {
        rpc_timeout: Duration::from_secs(2),
        op_deadline: Duration::from_secs(4),
        client_ttl: Duration::from_secs(2),
        seed: None,
        retry_pause: Duration::from_millis(100),
    }
}

fn client(dir: &Path, key: &RepoKey, n: u16, etcd: &[String]) -> (Arc<Fs>, Arc<EtcdMeta>) {
    let (fs, meta) = client_on(dir, key, n, etcd, options());
    fs.board().unwrap().mounted(u64::from(n)).unwrap();
    (fs, meta)
}

#[test]
fn a_forgotten_client_writes_no_version_or_snapshot() {
    let etcd = testkit::etcd::Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (a, _) = client(dir.path(), &key, 0, &etcd.endpoints());
    let (b, b_meta) = client(dir.path(), &key, 1, &etcd.endpoints());
    let (c, c_meta) = client(dir.path(), &key, 2, &etcd.endpoints());

    write(&b, "from-b", &random(300_000, 1));
    b.write_version().unwrap();
    b.snapshot_create("before").unwrap();
    let roots = b.store().list_roots().unwrap();

    // B hangs; once its registration lapsed A forgets it.
    b_meta.stop_renewing();
    until("B forgotten", || {
        matches!(gc::peers::forget_client(a.board().unwrap(), 1), Ok(true))
    });
    write(&a, "from-a", &random(300_000, 2));
    let e = b.write_version().unwrap_err();
    assert!(
        e.to_string().contains("forgotten"),
        "a forgotten client's version is refused naming why: {e}"
    );
    let e = b.snapshot_create("after").unwrap_err();
    assert!(e.to_string().contains("forgotten"), "{e}");
    assert_eq!(
        b.store().list_roots().unwrap(),
        roots,
        "B wrote a root after it was forgotten"
    );

    // C's registration lapses too, but nobody forgets it: it writes on.
    c_meta.stop_renewing();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        a.board().unwrap().forget(7).unwrap(),
        Forget::NotMounted,
        "the board still answers"
    );
    c.write_version().unwrap();
    c.snapshot_create("c-after").unwrap();
}

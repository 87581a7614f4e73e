//! [`EtcdMeta`]: opening a file system in etcd (one cluster, or several
//! with a control cluster), reads retried on a stale map, inode-number
//! reservations and the leases of the result records. Mutations run in
//! `mutate`, registrations in `register`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_model::{Cmp as CompareOp, Compare, Op as TxnOp, Txn};
use meta::{Attr, Content, FileKind, Inode, InodeId, MetaError, Result, Timestamp};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::keys::Keys;
use crate::record::{encode, Rec};
use crate::register::Registration;
use crate::route::Ring;
use crate::rpc::{GetOptions, Rpc};
use crate::shard::{ino_in, shard_for_dir, shard_of};
use crate::view::Reader;
use crate::EtcdError;

/// Inode numbers one reservation takes (one transaction on the counter
/// key per this many creates of a client).
pub const INO_BATCH: u64 = 1024;
/// Attempts of one operation whose transaction found a key changed since
/// it was read, before it gives up with [`EtcdError::Contended`].
pub const MAX_CONFLICTS: u32 = 64;
/// Seconds a result record lives (its lease's TTL). A lease is used for
/// half of it, so a record outlives every retry of its operation (at most
/// the operation deadline, far shorter).
pub(crate) const RESULT_TTL: i64 = 120;

/// How the store talks to etcd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Longest wait for one request.
    pub rpc_timeout: Duration,
    /// Longest one operation keeps retrying an unreachable cluster before
    /// it fails with [`EtcdError::Unavailable`].
    pub op_deadline: Duration,
    /// The TTL of the client's registration (whole seconds, at least 2):
    /// renewed every third of it while the store is open; once it lapses
    /// (the client closed, died or lost etcd that long) other clients
    /// purge the orphans it kept.
    pub client_ttl: Duration,
    /// Seeds the store's random choices (its client id, intent ids,
    /// back-offs), so that a simulation replays exactly; `None`: from
    /// the operating system.
    pub seed: Option<u64>,
    /// The pause before another try after an unreachable cluster (100
    /// ms); a stale shard map waits a fifth of it, a lock a tenth, and
    /// colliding intents back off at random up to a tenth.
    pub retry_pause: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            rpc_timeout: Duration::from_secs(5),
            op_deadline: Duration::from_secs(30),
            client_ttl: Duration::from_secs(60),
            seed: None,
            retry_pause: Duration::from_millis(100),
        }
    }
}

/// The metadata of one file system in one etcd cluster, or over several
/// data clusters and a control cluster.
pub struct EtcdMeta {
    pub(crate) ring: Ring,
    pub(crate) keys: Keys,
    pub(crate) opts: EtcdOptions,
    /// This client's id in its result records' and orphan marks' keys,
    /// registered under `c/<client>` (random per open).
    pub(crate) client: u64,
    /// The lease of the client's registration (in the control cluster,
    /// or the one data cluster), renewed in the background, revoked on
    /// drop.
    pub(crate) registrations: Mutex<Vec<(Arc<Rpc>, Arc<Registration>)>>,
    /// The chunk-store client number this store marked mounted on the
    /// collection board (`board`), taken away on drop.
    pub(crate) mounted_as: Mutex<Option<u64>>,
    /// Another client took this one's mounted mark away while its
    /// registration had lapsed: it writes nothing more (`register`).
    pub(crate) forgotten: AtomicBool,
    /// Fault injection: the registration is no longer renewed.
    pub(crate) stop_renewing: Arc<AtomicBool>,
    pub(crate) seq: AtomicU64,
    /// Reserved inode numbers not handed out yet: `[next, end)`.
    inos: Mutex<(u64, u64)>,
    /// Per cluster, the lease result records are written under, and when
    /// it was granted.
    pub(crate) leases: Mutex<HashMap<usize, (i64, Instant)>>,
    /// Fault injection: the next transaction's reply is dropped.
    pub(crate) lose_reply: AtomicBool,
    /// Fault injection: where the next intent stops ([`crate::intent`]'s
    /// `STOP_*`; 0: nowhere).
    pub(crate) stop_at: std::sync::atomic::AtomicU8,
    /// The store's random choices ([`EtcdOptions::seed`]).
    rng: Mutex<StdRng>,
}

impl std::fmt::Debug for EtcdMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMeta")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// The etcd endpoints (`http://HOST:PORT`) and file-system id of
/// `etcd://HOST:PORT[,HOST:PORT...]/FSID`.
pub fn parse_url(url: &str) -> Result<(Vec<String>, String), EtcdError> {
    let bad = || EtcdError::BadUrl(url.to_string());
    let rest = url.strip_prefix("etcd://").ok_or_else(bad)?;
    let (hosts, fsid) = rest.split_once('/').ok_or_else(bad)?;
    let endpoints: Vec<String> = hosts
        .split(',')
        .map(|h| match h.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(format!("http://{h}"))
            }
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    Ok((endpoints, fsid.to_string()))
}

/// Whether an error is the cluster not answering (worth another try
/// before the deadline), not an answer.
pub(crate) fn transient(e: &MetaError) -> bool {
    match e {
        MetaError::Remote(src) => matches!(
            src.downcast_ref::<EtcdError>(),
            Some(EtcdError::Rpc(_) | EtcdError::Timeout { .. } | EtcdError::Refused(_))
        ),
        _ => false,
    }
}

impl EtcdMeta {
    /// Opens file system `fsid` in the etcd cluster at `endpoints`
    /// (`http://host:port`), creating its root directory (owned by
    /// `root_uid`/`root_gid`, mode 0755) if the file system has no inodes
    /// yet. A file system with inodes but no root is refused
    /// ([`MetaError::RootMissing`]). `fsid` is letters, digits, `-`, `_`.
    pub fn open(
        endpoints: &[String],
        fsid: &str,
        root_uid: u32,
        root_gid: u32,
        opts: EtcdOptions,
    ) -> Result<Self> {
        check_fsid(fsid)?;
        let rpc = Rpc::connect(endpoints, opts.rpc_timeout)?;
        let store = Self::with_ring(Ring::single(rpc, opts.rpc_timeout), fsid, opts);
        store.register_all()?;
        store.make_root(root_uid, root_gid)?;
        Ok(store)
    }

    /// Opens file system `fsid` over several etcd clusters: its shard map
    /// is read from the control cluster at `control` (made by
    /// [`crate::init_cluster`], which also made the root directory).
    pub fn open_cluster(control: &[String], fsid: &str, opts: EtcdOptions) -> Result<Self> {
        check_fsid(fsid)?;
        let keys = Keys::new(fsid);
        let rpc = Rpc::connect(control, opts.rpc_timeout)?;
        let ring = Ring::sharded(rpc, &keys, opts.rpc_timeout)?;
        let store = Self::with_ring(ring, fsid, opts);
        store.register_all()?;
        store
            .read(|r| r.get(InodeId::ROOT).map(drop))
            .map_err(|e| match e {
                MetaError::NotFound => MetaError::RootMissing(0),
                e => e,
            })?;
        // Intents left by clients that died (what a coordinator does).
        if let Err(e) = crate::intent::settle_all(&store) {
            tracing::warn!(error = %e, "unfinished intents were not settled at open");
        }
        Ok(store)
    }

    /// [`EtcdMeta::open_cluster`] of `etcd://HOST:PORT[,HOST:PORT...]/FSID`
    /// (the control cluster) with the default options.
    pub fn open_cluster_url(url: &str) -> Result<Self> {
        let (endpoints, fsid) = parse_url(url)?;
        Self::open_cluster(&endpoints, &fsid, EtcdOptions::default())
    }

    fn with_ring(ring: Ring, fsid: &str, opts: EtcdOptions) -> Self {
        let mut rng = match opts.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        EtcdMeta {
            ring,
            keys: Keys::new(fsid),
            opts,
            client: rng.gen(),
            rng: Mutex::new(rng),
            registrations: Mutex::new(Vec::new()),
            mounted_as: Mutex::new(None),
            forgotten: AtomicBool::new(false),
            stop_renewing: Arc::new(AtomicBool::new(false)),
            seq: AtomicU64::new(0),
            inos: Mutex::new((0, 0)),
            leases: Mutex::new(HashMap::new()),
            lose_reply: AtomicBool::new(false),
            stop_at: std::sync::atomic::AtomicU8::new(0),
        }
    }

    /// Whether the file system is over several clusters.
    /// [`EtcdOptions::retry_pause`] divided by `by`.
    pub(crate) fn pause(&self, by: u32) -> Duration {
        self.opts.retry_pause / by
    }

    /// A random number from the store's generator.
    pub(crate) fn random(&self) -> u64 {
        self.rng.lock().gen()
    }

    pub fn is_sharded(&self) -> bool {
        self.ring.control.is_some()
    }

    /// Reads the shard map again (a fence said it is stale), connecting
    /// to clusters added since.
    pub(crate) fn refresh(&self) -> Result<()> {
        self.ring.reload(&self.keys)?;
        Ok(())
    }

    /// Runs a read, again on a fresh map when the map was stale, until the
    /// operation deadline.
    pub(crate) fn read<T>(&self, mut f: impl FnMut(&mut Reader<'_>) -> Result<T>) -> Result<T> {
        let deadline = Instant::now() + self.opts.op_deadline;
        let mut skews = 0;
        loop {
            let route = self.ring.route();
            let mut r = match &self.ring.control {
                Some(ctl) => Reader::strict(&route, &self.keys, ctl),
                None => Reader::new(&route, &self.keys, HashMap::new()),
            };
            match f(&mut r) {
                Err(e) if crate::is(&e, |e| matches!(e, EtcdError::Stale(_))) => {
                    if Instant::now() >= deadline {
                        return Err(e);
                    }
                    if let Err(e) = self.refresh() {
                        if !transient(&e) {
                            return Err(e);
                        }
                    }
                    std::thread::sleep(self.pause(5));
                }
                Err(e) if transient(&e) => {
                    if Instant::now() >= deadline {
                        tracing::error!(error = %e, "etcd unreachable; the metadata read failed");
                        return Err(EtcdError::Unavailable {
                            after: self.opts.op_deadline,
                            last: e.to_string(),
                        }
                        .into());
                    }
                    std::thread::sleep(self.pause(1));
                }
                Err(e) if crate::is(&e, |e| matches!(e, EtcdError::Locked { .. })) => {
                    if Instant::now() >= deadline {
                        return Err(e);
                    }
                    if let MetaError::Remote(src) = &e {
                        if let Some(&EtcdError::Locked { intent, shard }) = src.downcast_ref() {
                            match crate::intent::settle_lock(self, intent, shard) {
                                Err(e) if !transient(&e) => return Err(e),
                                _ => {}
                            }
                        }
                    }
                    std::thread::sleep(self.pause(10));
                }
                // Read over several clusters, the answer may come from a
                // state that never was: read again (bounded).
                other => match r.still_holds() {
                    Ok(true) => return other,
                    Ok(false) => {
                        skews += 1;
                        if skews >= MAX_CONFLICTS {
                            return Err(EtcdError::Contended(skews).into());
                        }
                    }
                    Err(e) if transient(&e) && Instant::now() < deadline => {
                        std::thread::sleep(self.pause(1));
                    }
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// [`EtcdMeta::open`] of `etcd://HOST:PORT[,HOST:PORT...]/FSID` (see
    /// [`parse_url`]) with the default options.
    pub fn open_url(url: &str, root_uid: u32, root_gid: u32) -> Result<Self> {
        let (endpoints, fsid) = parse_url(url)?;
        Self::open(
            &endpoints,
            &fsid,
            root_uid,
            root_gid,
            EtcdOptions::default(),
        )
    }

    /// Fault injection for tests: the next transaction is sent and
    /// applied, and its reply is dropped, as when the connection breaks
    /// after the request left. The operation then retries as after any
    /// unknown outcome.
    pub fn lose_next_reply(&self) {
        self.lose_reply.store(true, Ordering::SeqCst);
    }

    fn make_root(&self, uid: u32, gid: u32) -> Result<()> {
        let route = self.ring.route();
        let rpc = route.rpc(0);
        let root = self.keys.inode(InodeId::ROOT);
        loop {
            let mut resp = rpc.get(root.clone(), GetOptions::new())?;
            if !resp.take_kvs().is_empty() {
                return Ok(());
            }
            // Counted at the revision the root was missing at: another
            // client's root made since is not taken for other inodes.
            let rev = resp.revision();
            let inodes = self.keys.inodes();
            let count = rpc
                .get(
                    inodes.clone(),
                    GetOptions::new()
                        .with_range(crate::keys::prefix_end(&inodes))
                        .with_revision(rev)
                        .with_count_only(),
                )?
                .count();
            if count > 0 {
                return Err(MetaError::RootMissing(count as u64));
            }
            let rec = root_rec(uid, gid);
            // The counter starts after the root, unless numbers were handed
            // out before (they are never handed out again).
            let next = self.keys.next_ino();
            let counted = rpc
                .get(next.clone(), GetOptions::new().with_revision(rev))?
                .kvs()
                .first()
                .map_or(0, |kv| kv.mod_revision);
            let mut ops = vec![
                TxnOp::put(root.clone(), encode(&rec), 0),
                TxnOp::put(self.keys.dir_mark(InodeId::ROOT), Vec::new(), 0),
            ];
            if counted == 0 {
                ops.push(TxnOp::put(next.clone(), 2u64.to_le_bytes().to_vec(), 0));
            }
            // Another client may create it at once: one of the two wins,
            // the other reads the winner's root.
            let txn = Txn::new()
                .when([
                    Compare::version(root.clone(), CompareOp::Equal, 0),
                    Compare::mod_revision(next, CompareOp::Equal, counted),
                ])
                .and_then(ops);
            if rpc.txn(txn)?.succeeded {
                return Ok(());
            }
        }
    }

    /// A number for a new inode in `parent` (a directory's shard is a
    /// hash, a file's its parent's). No client ever had it: from this
    /// client's reserved batch, reserving the next batch in one transaction
    /// when it is used up.
    pub(crate) fn alloc_ino(&self, parent: InodeId, dir: bool) -> Result<InodeId> {
        let seq = self.alloc_seq()?;
        let shard = match &self.ring.route().map {
            None => return Ok(InodeId(seq)),
            Some(_) if !dir => shard_of(parent),
            Some(map) => shard_for_dir(seq, map.shards.len() as u32),
        };
        Ok(ino_in(shard, seq))
    }

    fn alloc_seq(&self) -> Result<u64> {
        let rpc = self.ring.counter_rpc();
        let mut inos = self.inos.lock();
        if inos.0 == inos.1 {
            let key = self.keys.next_ino();
            let mut conflicts = 0;
            loop {
                let mut resp = rpc.get(key.clone(), GetOptions::new())?;
                let (modrev, next) = match resp.take_kvs().pop() {
                    Some(kv) => {
                        let v: [u8; 8] = kv
                            .value
                            .as_slice()
                            .try_into()
                            .map_err(|_| EtcdError::BadCounter)?;
                        (kv.mod_revision, u64::from_le_bytes(v))
                    }
                    None => (0, 2),
                };
                let end = next.checked_add(INO_BATCH).ok_or(EtcdError::BadCounter)?;
                let txn = Txn::new()
                    .when([Compare::mod_revision(key.clone(), CompareOp::Equal, modrev)])
                    .and_then([TxnOp::put(key.clone(), end.to_le_bytes().to_vec(), 0)]);
                // An unknown outcome only wastes numbers: the next read
                // sees the counter moved, whoever moved it.
                if rpc.txn(txn)?.succeeded {
                    *inos = (next, end);
                    break;
                }
                conflicts += 1;
                if conflicts >= MAX_CONFLICTS {
                    return Err(EtcdError::Contended(conflicts).into());
                }
            }
        }
        let seq = inos.0;
        inos.0 += 1;
        Ok(seq)
    }

    /// The lease of result records in `cluster`, granted anew when half
    /// its TTL is gone.
    pub(crate) fn lease(&self, rpc: &Rpc, cluster: usize) -> Result<i64, EtcdError> {
        let mut slots = self.leases.lock();
        if let Some(&(id, at)) = slots.get(&cluster) {
            if at.elapsed() < Duration::from_secs(RESULT_TTL as u64 / 2) {
                return Ok(id);
            }
        }
        let at = Instant::now();
        let id = rpc.grant(RESULT_TTL)?;
        slots.insert(cluster, (id, at));
        Ok(id)
    }
}

/// A new root directory's record (mode 0755, `nlink` 2, its own parent).
pub(crate) fn root_rec(uid: u32, gid: u32) -> Rec {
    let now = Timestamp::now();
    Rec {
        inode: Inode {
            id: InodeId::ROOT,
            attr: Attr {
                kind: FileKind::Dir,
                perm: 0o755,
                uid,
                gid,
                size: 0,
                nlink: 2,
                rdev: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
            },
            content: Content::Empty,
        },
        parent: InodeId::ROOT,
        entries: 0,
    }
}

pub(crate) fn check_fsid(fsid: &str) -> Result<(), EtcdError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if fsid.is_empty() || fsid.len() > 64 || !fsid.chars().all(ok) {
        return Err(EtcdError::BadFsid(fsid.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_endpoints_and_a_file_system() {
        let (eps, fsid) = parse_url("etcd://127.0.0.1:2379,db2:2380/home").unwrap();
        assert_eq!(eps, ["http://127.0.0.1:2379", "http://db2:2380"]);
        assert_eq!(fsid, "home");
        for bad in [
            "http://h:1/fs",
            "etcd://h/fs",
            "etcd://h:port/fs",
            "etcd://:1/fs",
            "etcd://h:1",
        ] {
            assert!(matches!(parse_url(bad), Err(EtcdError::BadUrl(_))), "{bad}");
        }
        assert!(check_fsid("a-b_9").is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_fsid(bad).is_err(), "{bad}");
        }
    }
}

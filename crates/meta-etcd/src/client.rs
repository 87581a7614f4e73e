//! [`EtcdClient`]: the [`KvBackend`] of a real etcd cluster, and the
//! bridge from the synchronous engine to the async etcd client: a small
//! tokio runtime owned by the client runs each request, under a timeout,
//! and the caller waits on a channel. Waiting on a channel (never
//! `Runtime::block_on`) works from any thread, also one inside another
//! tokio runtime (the gateway's blocking threads).
//!
//! One client per member: requests go to one member until one fails, then
//! to the next (the client's own balancing kept sending requests to a
//! killed member).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, PutOptions, TxnOp,
    TxnOpResponse,
};
use etcd_model::{Cmp, Get, GetResult, KeyValue, Op, OpResult, Range, Target, Txn, TxnResult};

use crate::register::Registration;
use crate::rpc::{KvBackend, MemberStatus};
use crate::EtcdError;

pub(crate) struct EtcdClient {
    /// Taken only by `drop`.
    rt: Option<tokio::runtime::Runtime>,
    /// A client per member endpoint, and the one requests go to.
    clients: Vec<Client>,
    at: AtomicUsize,
    timeout: Duration,
    endpoints: String,
}

impl EtcdClient {
    pub(crate) fn connect(endpoints: &[String], timeout: Duration) -> Result<Self, EtcdError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("meta-etcd")
            .enable_all()
            .build()
            .map_err(EtcdError::Runtime)?;
        let joined = endpoints.join(",");
        let mut clients = Vec::with_capacity(endpoints.len());
        for ep in endpoints {
            let ep = ep.clone();
            let opts = ConnectOptions::new()
                .with_connect_timeout(timeout)
                .with_timeout(timeout);
            clients.push(run_on(&rt, timeout, &joined, async move {
                Client::connect([ep], Some(opts)).await
            })?);
        }
        Ok(EtcdClient {
            rt: Some(rt),
            clients,
            at: AtomicUsize::new(0),
            timeout,
            endpoints: joined,
        })
    }

    /// Runs one request of the client on the runtime, waiting at most the
    /// timeout.
    fn call<T, F, Fut>(&self, f: F) -> Result<T, EtcdError>
    where
        T: Send + 'static,
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        // Taken only by `drop`, after which nothing calls.
        let rt = self.rt.as_ref().expect("the runtime lives until drop");
        let at = self.at.load(Ordering::Relaxed);
        let out = run_on(
            rt,
            self.timeout,
            &self.endpoints,
            f(self.clients[at].clone()),
        );
        if out.is_err() {
            // The next request tries the next member.
            let next = (at + 1) % self.clients.len();
            let _ = self
                .at
                .compare_exchange(at, next, Ordering::Relaxed, Ordering::Relaxed);
        }
        out
    }
}

impl KvBackend for EtcdClient {
    fn range(&self, get: Get) -> Result<(i64, GetResult), EtcdError> {
        let (key, opts) = get_options(get);
        let resp = self.call(|mut c| async move { c.get(key, Some(opts)).await })?;
        let rev = resp.header().map_or(0, |h| h.revision());
        Ok((rev, get_result(resp.kvs(), resp.count(), resp.more())))
    }

    fn txn(&self, txn: Txn) -> Result<TxnResult, EtcdError> {
        let txn = etcd_client::Txn::new()
            .when(txn.compares.into_iter().map(compare).collect::<Vec<_>>())
            .and_then(txn.success.into_iter().map(op).collect::<Vec<_>>())
            .or_else(txn.failure.into_iter().map(op).collect::<Vec<_>>());
        let resp = self.call(|mut c| async move { c.txn(txn).await })?;
        Ok(TxnResult {
            succeeded: resp.succeeded(),
            revision: resp.header().map_or(0, |h| h.revision()),
            results: resp
                .op_responses()
                .into_iter()
                .map(|r| match r {
                    TxnOpResponse::Get(g) => {
                        OpResult::Get(get_result(g.kvs(), g.count(), g.more()))
                    }
                    TxnOpResponse::Delete(d) => OpResult::Delete(d.deleted() as usize),
                    TxnOpResponse::Put(_) | TxnOpResponse::Txn(_) => OpResult::Put,
                })
                .collect(),
        })
    }

    fn grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        Ok(self
            .call(|mut c| async move { c.lease_grant(ttl, None).await })?
            .id())
    }

    fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.call(|mut c| async move { c.lease_revoke(lease).await })
            .map(drop)
    }

    fn keep_alive(&self, lease: i64) -> Result<bool, EtcdError> {
        let left = self.call(move |c| renew(c, lease))?;
        Ok(left > 0)
    }

    fn keep_registered(
        &self,
        key: Vec<u8>,
        ttl: i64,
        reg: Arc<Registration>,
        stop: Arc<AtomicBool>,
    ) {
        let rt = self.rt.as_ref().expect("the runtime lives until drop");
        rt.spawn(keep_registered(self.clients.clone(), key, ttl, reg, stop));
    }

    fn status(&self, _endpoint: &str) -> Result<MemberStatus, EtcdError> {
        let st = self.call(|mut c| async move { c.status().await })?;
        Ok(MemberStatus {
            leader: st.header().is_some_and(|h| h.member_id() == st.leader()),
            errors: st.errors().to_vec(),
        })
    }
}

impl Drop for EtcdClient {
    /// Stops the runtime without waiting for it: a runtime dropped the
    /// usual way inside another one's task (the gateway's) panics.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn get_options(get: Get) -> (Vec<u8>, GetOptions) {
    let mut opts = GetOptions::new().with_revision(get.revision);
    if let Some(end) = get.range.end {
        opts = opts.with_range(end);
    }
    if get.limit > 0 {
        opts = opts.with_limit(get.limit as i64);
    }
    (get.range.key, opts)
}

fn get_result(kvs: &[etcd_client::KeyValue], count: i64, more: bool) -> GetResult {
    GetResult {
        kvs: kvs
            .iter()
            .map(|kv| KeyValue {
                key: kv.key().to_vec(),
                value: kv.value().to_vec(),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                version: kv.version(),
                lease: kv.lease(),
            })
            .collect(),
        count: count as usize,
        more,
    }
}

fn compare(c: etcd_model::Compare) -> Compare {
    let cmp = match c.cmp {
        Cmp::Equal => CompareOp::Equal,
        Cmp::NotEqual => CompareOp::NotEqual,
        Cmp::Greater => CompareOp::Greater,
        Cmp::Less => CompareOp::Less,
    };
    match c.target {
        Target::ModRevision(r) => Compare::mod_revision(c.key, cmp, r),
        Target::CreateRevision(r) => Compare::create_revision(c.key, cmp, r),
        Target::Version(v) => Compare::version(c.key, cmp, v),
        Target::Value(v) => Compare::value(c.key, cmp, v),
    }
}

fn op(o: Op) -> TxnOp {
    match o {
        Op::Get(g) => {
            let (key, opts) = get_options(g);
            TxnOp::get(key, Some(opts))
        }
        Op::Put { key, value, lease } => TxnOp::put(
            key,
            value,
            (lease != 0).then(|| PutOptions::new().with_lease(lease)),
        ),
        Op::Delete(Range { key, end }) => {
            TxnOp::delete(key, end.map(|e| DeleteOptions::new().with_range(e)))
        }
    }
}

/// Renews the registration's lease every third of its TTL, for as long as
/// the store's runtime runs. A lease found expired (the cluster was away
/// longer than the TTL) is replaced and the registration put again: other
/// clients may have purged this client's orphans meanwhile (logged).
async fn keep_registered(
    members: Vec<Client>,
    key: Vec<u8>,
    ttl: i64,
    reg: Arc<Registration>,
    stop: Arc<AtomicBool>,
) {
    let period = Duration::from_millis(ttl as u64 * 1000 / 3);
    let mut at = 0;
    loop {
        tokio::time::sleep(period).await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let c = &members[at % members.len()];
        let id = reg.lease();
        match tokio::time::timeout(period, renew(c.clone(), id)).await {
            Ok(Ok(left)) if left > 0 => reg.renewed(),
            Ok(Ok(_)) => {
                tracing::error!(
                    "the client's registration in etcd expired: other clients may have purged its orphans, and it writes nothing until it finds itself still mounted"
                );
                reg.lapsed();
                if let Ok(Ok(id)) =
                    tokio::time::timeout(period, grant_and_put(c.clone(), key.clone(), ttl)).await
                {
                    reg.replaced(id);
                }
            }
            // Unreachable: the next period tries the next member.
            Ok(Err(_)) | Err(_) => at += 1,
        }
    }
}

/// Renews `lease` once: the seconds it has left, 0 when it lapsed. etcd
/// answers an unknown lease's renewal with TTL 0, which the client
/// library turns into an error of its own ("lease not found").
async fn renew(mut c: Client, lease: i64) -> Result<i64, etcd_client::Error> {
    let (mut keeper, mut stream) = match c.lease_keep_alive(lease).await {
        Ok(kept) => kept,
        Err(etcd_client::Error::LeaseKeepAliveError(m)) if m == "lease not found" => return Ok(0),
        Err(e) => return Err(e),
    };
    keeper.keep_alive().await?;
    Ok(stream.message().await?.map_or(0, |r| r.ttl()))
}

/// A new lease of `ttl` seconds with `key` put under it; the lease's id.
async fn grant_and_put(mut c: Client, key: Vec<u8>, ttl: i64) -> Result<i64, etcd_client::Error> {
    let id = c.lease_grant(ttl, None).await?.id();
    c.put(key, Vec::new(), Some(PutOptions::new().with_lease(id)))
        .await?;
    Ok(id)
}

fn run_on<T, Fut>(
    rt: &tokio::runtime::Runtime,
    timeout: Duration,
    endpoints: &str,
    fut: Fut,
) -> Result<T, EtcdError>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(tokio::time::timeout(timeout, fut).await);
    });
    // The task's own timeout answers first; this one only guards against
    // a runtime that stopped running tasks.
    match rx.recv_timeout(timeout + Duration::from_secs(5)) {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(e))) => Err(EtcdError::Rpc(e)),
        Ok(Err(_)) | Err(_) => Err(EtcdError::Timeout {
            endpoints: endpoints.to_string(),
            after: timeout,
        }),
    }
}

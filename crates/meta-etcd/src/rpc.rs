//! The bridge from the synchronous [`meta::MetaStore`] to the async etcd
//! client: a small tokio runtime owned by the store runs each request,
//! under a timeout, and the caller waits on a channel. Waiting on a channel
//! (never `Runtime::block_on`) works from any thread, also one inside
//! another tokio runtime (the gateway's blocking threads).
//!
//! One client per member: requests go to one member until one fails, then
//! to the next (the client's own balancing kept sending requests to a
//! killed member). A failed request is not sent again here: the caller
//! decides, as its outcome may be unknown.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, GetResponse, KeyValue, Txn, TxnResponse};

use crate::EtcdError;

/// Keys read per page of a range (a directory listing, a view's scan), so
/// that no response nears gRPC's message limit.
pub(crate) const PAGE: i64 = 512;

pub(crate) struct Rpc {
    /// Taken only by `drop`.
    rt: Option<tokio::runtime::Runtime>,
    /// A client per member endpoint, and the one requests go to.
    clients: Vec<Client>,
    at: AtomicUsize,
    timeout: Duration,
    /// Read requests sent so far ([`meta::MetaStore::storage_reads`]).
    reads: AtomicU64,
    endpoints: String,
}

impl Rpc {
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
        Ok(Rpc {
            rt: Some(rt),
            clients,
            at: AtomicUsize::new(0),
            timeout,
            reads: AtomicU64::new(0),
            endpoints: joined,
        })
    }

    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Runs one request of the client on the runtime, waiting at most the
    /// timeout.
    pub(crate) fn call<T, F, Fut>(&self, f: F) -> Result<T, EtcdError>
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

    /// Runs `f`'s future (given a client per member) in the background on
    /// the store's runtime, until it ends or the store is dropped.
    pub(crate) fn spawn<F, Fut>(&self, f: F)
    where
        F: FnOnce(Vec<Client>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let rt = self.rt.as_ref().expect("the runtime lives until drop");
        rt.spawn(f(self.clients.clone()));
    }

    /// A range read (`opts` says which keys and at which revision).
    pub(crate) fn get(&self, key: Vec<u8>, opts: GetOptions) -> Result<GetResponse, EtcdError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.call(|mut c| async move { c.get(key, Some(opts)).await })
    }

    pub(crate) fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.call(|mut c| async move { c.txn(txn).await })
    }

    /// Every key in `[start, end)` at `rev`, in key order, page by page,
    /// until `f` says stop or `limit` keys were given.
    pub(crate) fn scan(
        &self,
        mut start: Vec<u8>,
        end: &[u8],
        rev: i64,
        limit: usize,
        f: &mut dyn FnMut(KeyValue) -> Result<bool, EtcdError>,
    ) -> Result<(), EtcdError> {
        let mut given = 0usize;
        loop {
            let want = PAGE.min((limit - given).try_into().unwrap_or(PAGE));
            let opts = GetOptions::new()
                .with_range(end.to_vec())
                .with_revision(rev)
                .with_limit(want);
            let mut resp = self.get(start.clone(), opts)?;
            let more = resp.more();
            let kvs = resp.take_kvs();
            let Some(last) = kvs.last() else {
                return Ok(());
            };
            start = crate::keys::key_after(last.key());
            for kv in kvs {
                given += 1;
                if !f(kv)? || given == limit {
                    return Ok(());
                }
            }
            if !more {
                return Ok(());
            }
        }
    }
}

impl Drop for Rpc {
    /// Stops the runtime without waiting for it: a runtime dropped the
    /// usual way inside another one's task (the gateway's) panics.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
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

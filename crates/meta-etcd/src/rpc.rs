//! The engine's one way to etcd: [`Rpc`], a cluster's requests as the
//! engine makes them (range reads at a revision, transactions with
//! compares, leases), in `etcd_model`'s request and response types, over
//! a [`KvBackend`]: a real etcd cluster ([`crate::client::EtcdClient`]) or
//! a simulated one ([`crate::sim::SimCluster`]). The engine's code is
//! written once, against `Rpc`.
//!
//! A failed request is not sent again here: the caller decides, as its
//! outcome may be unknown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_model::{Get, GetResult, KeyValue, Op, OpResult, Range, Txn, TxnResult};

use crate::register::Registration;
use crate::EtcdError;

/// Keys read per page of a range (a directory listing, a view's scan), so
/// that no response nears gRPC's message limit.
pub(crate) const PAGE: i64 = 512;

/// One member's answer to a status request.
#[derive(Debug, Clone)]
pub struct MemberStatus {
    /// Whether the member answering leads its cluster.
    pub leader: bool,
    /// The errors the member reports (alarms).
    pub errors: Vec<String>,
}

/// The requests the engine makes of one etcd cluster. Implemented for a
/// real cluster and for a simulated one; every request either applies
/// whole or not at all, and an error may leave its outcome unknown (the
/// caller's retry reads its result record).
pub trait KvBackend: Send + Sync {
    /// A range read; with the cluster's current revision (the response
    /// header's).
    fn range(&self, get: Get) -> Result<(i64, GetResult), EtcdError>;
    fn txn(&self, txn: Txn) -> Result<TxnResult, EtcdError>;
    /// A new lease of `ttl` seconds; its id.
    fn grant(&self, ttl: i64) -> Result<i64, EtcdError>;
    fn revoke(&self, lease: i64) -> Result<(), EtcdError>;
    /// Renews `lease` once: whether it still lived (a lapsed or revoked
    /// lease cannot be renewed).
    fn keep_alive(&self, lease: i64) -> Result<bool, EtcdError>;
    /// Keeps the registration `key` alive until `stop` (in the
    /// background): each renewal is noted in `reg`; a lapsed lease is
    /// noted there too, then replaced by a new one.
    /// A simulated cluster's leases lapse only when the simulation says.
    fn keep_registered(
        &self,
        key: Vec<u8>,
        ttl: i64,
        reg: Arc<Registration>,
        stop: Arc<AtomicBool>,
    );
    /// The status of each member endpoint (`cluster status`).
    fn status(&self, endpoint: &str) -> Result<MemberStatus, EtcdError>;
}

/// A range read's options, as etcd clients give them.
#[derive(Debug, Clone, Default)]
pub(crate) struct GetOptions {
    end: Option<Vec<u8>>,
    limit: usize,
    revision: i64,
}

impl GetOptions {
    pub(crate) fn new() -> Self {
        GetOptions::default()
    }

    pub(crate) fn with_range(mut self, end: Vec<u8>) -> Self {
        self.end = Some(end);
        self
    }

    pub(crate) fn with_revision(mut self, revision: i64) -> Self {
        self.revision = revision;
        self
    }

    pub(crate) fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// For [`GetResponse::count`] only: the count is of every key in the
    /// range whatever the limit, so one key is sent.
    pub(crate) fn with_count_only(self) -> Self {
        self.with_limit(1)
    }
}

/// What a range read returned, with the revision it was answered at.
#[derive(Debug, Clone)]
pub(crate) struct GetResponse {
    revision: i64,
    result: GetResult,
}

impl GetResponse {
    pub(crate) fn revision(&self) -> i64 {
        self.revision
    }

    pub(crate) fn kvs(&self) -> &[KeyValue] {
        &self.result.kvs
    }

    pub(crate) fn take_kvs(&mut self) -> Vec<KeyValue> {
        std::mem::take(&mut self.result.kvs)
    }

    /// Keys in the range, whatever the limit.
    pub(crate) fn count(&self) -> usize {
        self.result.count
    }
}

/// One cluster, as the engine uses it.
/// What [`Rpc::get_many`] read: the revision it read at, and each key's
/// value with its revisions (`None`: absent).
pub(crate) type ReadMany = (i64, Vec<Option<KeyValue>>);

pub(crate) struct Rpc {
    backend: Box<dyn KvBackend>,
    /// Read requests sent so far ([`meta::MetaStore::storage_reads`]).
    reads: AtomicU64,
}

impl Rpc {
    /// Connects to the cluster of `endpoints`: members `http://HOST:PORT`,
    /// or one simulated cluster `sim://NAME` ([`crate::sim`]).
    pub(crate) fn connect(endpoints: &[String], timeout: Duration) -> Result<Self, EtcdError> {
        let backend: Box<dyn KvBackend> = match crate::sim::lookup(endpoints) {
            Some(sim) => Box::new(sim),
            None => Box::new(crate::client::EtcdClient::connect(endpoints, timeout)?),
        };
        Ok(Rpc {
            backend,
            reads: AtomicU64::new(0),
        })
    }

    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// A range read from `key` (`opts` say to where and at which revision).
    pub(crate) fn get(&self, key: Vec<u8>, opts: GetOptions) -> Result<GetResponse, EtcdError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let (revision, result) = self.backend.range(Get {
            range: Range { key, end: opts.end },
            limit: opts.limit,
            revision: opts.revision,
        })?;
        Ok(GetResponse { revision, result })
    }

    /// The key-value at `key` now, if there is one.
    pub(crate) fn get_one(&self, key: Vec<u8>) -> Result<Option<KeyValue>, EtcdError> {
        Ok(self.get(key, GetOptions::new())?.kvs().first().cloned())
    }

    pub(crate) fn txn(&self, txn: Txn) -> Result<TxnResult, EtcdError> {
        self.backend.txn(txn)
    }

    /// The values of `keys` (at most `MAX_TXN_OPS`) at `revision`
    /// (0: the current one) in one request: a transaction of reads only.
    /// The revision read at, and each key's value.
    pub(crate) fn get_many(
        &self,
        keys: Vec<Vec<u8>>,
        revision: i64,
    ) -> Result<ReadMany, EtcdError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let n = keys.len();
        let txn = Txn {
            success: keys
                .into_iter()
                .map(|key| {
                    Op::Get(Get {
                        range: Range { key, end: None },
                        limit: 0,
                        revision,
                    })
                })
                .collect(),
            ..Txn::default()
        };
        let done = self.backend.txn(txn)?;
        let values: Vec<Option<KeyValue>> = done
            .results
            .into_iter()
            .map(|r| match r {
                OpResult::Get(mut g) => g.kvs.pop(),
                _ => None,
            })
            .collect();
        if values.len() != n {
            return Err(EtcdError::ShortAnswer {
                asked: n,
                got: values.len(),
            });
        }
        let at = if revision == 0 {
            done.revision
        } else {
            revision
        };
        Ok((at, values))
    }

    pub(crate) fn grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        self.backend.grant(ttl)
    }

    pub(crate) fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.backend.revoke(lease)
    }

    pub(crate) fn keep_alive(&self, lease: i64) -> Result<bool, EtcdError> {
        self.backend.keep_alive(lease)
    }

    pub(crate) fn keep_registered(
        &self,
        key: Vec<u8>,
        ttl: i64,
        reg: Arc<Registration>,
        stop: Arc<AtomicBool>,
    ) {
        self.backend.keep_registered(key, ttl, reg, stop);
    }

    pub(crate) fn status(&self, endpoint: &str) -> Result<MemberStatus, EtcdError> {
        self.backend.status(endpoint)
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
                .with_limit(want as usize);
            let mut resp = self.get(start.clone(), opts)?;
            let more = resp.result.more;
            let kvs = resp.take_kvs();
            let Some(last) = kvs.last() else {
                return Ok(());
            };
            start = crate::keys::key_after(&last.key);
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

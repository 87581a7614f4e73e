//! Simulated etcd clusters for a deterministic simulation (issue 18):
//! a [`SimCluster`] is an [`etcd_model::Kv`] (what a linearizable etcd
//! cluster looks like to its clients) that [`EtcdMeta`] instances reach
//! at the endpoint `sim://NAME`, as they reach a real cluster at
//! `http://HOST:PORT`; the engine's code is the same. Before each request
//! applies, the cluster asks its [`Gate`] what happens: the simulation's
//! scheduler decides there which client goes next (so a seed replays
//! exactly), and may refuse the request or lose its reply after it applied.
//!
//! [`EtcdMeta`]: crate::EtcdMeta

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, Weak};

use etcd_model::{Get, GetResult, Kv, Txn, TxnResult};
use parking_lot::Mutex;

use crate::register::Registration;
use crate::rpc::{KvBackend, MemberStatus};
use crate::EtcdError;

/// The kind of a request, as a [`Gate`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Range,
    /// A transaction that writes (a put or a delete in a branch).
    Txn,
    /// A transaction of reads only, which etcd serves as a read (no raft
    /// proposal, nothing replicated).
    ReadTxn,
    Grant,
    Revoke,
    KeepAlive,
}

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It applies and its reply arrives.
    Pass,
    /// It does not apply: the cluster is unavailable.
    Refuse,
    /// It applies and its reply is lost: the client's outcome is unknown.
    LoseReply,
}

/// Decides the fate of each request before it applies, and when: a
/// scheduler blocks in [`Gate::pass`] until the calling thread's turn.
pub trait Gate: Send + Sync {
    fn pass(&self, cluster: &str, request: Request) -> Fault;
}

/// A gate that lets every request through at once.
pub struct Open;

impl Gate for Open {
    fn pass(&self, _: &str, _: Request) -> Fault {
        Fault::Pass
    }
}

/// One simulated etcd cluster.
pub struct SimCluster {
    name: String,
    kv: Mutex<Kv>,
    gate: Arc<dyn Gate>,
}

impl SimCluster {
    /// A new empty cluster, reachable at `sim://NAME` while it lives.
    /// Names are process-wide: give each simulation's clusters their own.
    pub fn new(name: &str, gate: Arc<dyn Gate>) -> Arc<SimCluster> {
        let c = Arc::new(SimCluster {
            name: name.to_string(),
            kv: Mutex::new(Kv::default()),
            gate,
        });
        registry().lock().insert(c.endpoint(), Arc::downgrade(&c));
        c
    }

    pub fn endpoint(&self) -> String {
        format!("sim://{}", self.name)
    }

    /// A copy of the store now (for checks after a run).
    pub fn snapshot(&self) -> Kv {
        self.kv.lock().clone()
    }

    /// Ends a lease as when its time runs out (a client that stopped).
    pub fn expire(&self, lease: i64) -> Result<(), EtcdError> {
        self.kv.lock().expire(lease)?;
        Ok(())
    }

    fn gate(&self, request: Request) -> Result<Fault, EtcdError> {
        match self.gate.pass(&self.name, request) {
            Fault::Refuse => Err(EtcdError::Refused(self.endpoint())),
            f => Ok(f),
        }
    }

    fn reply<T>(&self, fault: Fault, v: T) -> Result<T, EtcdError> {
        match fault {
            Fault::LoseReply => Err(EtcdError::Timeout {
                endpoints: self.endpoint(),
                after: std::time::Duration::ZERO,
            }),
            _ => Ok(v),
        }
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        registry().lock().remove(&self.endpoint());
    }
}

fn registry() -> &'static Mutex<HashMap<String, Weak<SimCluster>>> {
    static REG: OnceLock<Mutex<HashMap<String, Weak<SimCluster>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
}

/// The simulated cluster `endpoints` name, if they name one.
pub(crate) fn lookup(endpoints: &[String]) -> Option<Arc<SimCluster>> {
    match endpoints {
        [ep] if ep.starts_with("sim://") => registry().lock().get(ep).and_then(Weak::upgrade),
        _ => None,
    }
}

impl KvBackend for Arc<SimCluster> {
    fn range(&self, get: Get) -> Result<(i64, GetResult), EtcdError> {
        let fault = self.gate(Request::Range)?;
        let out = {
            let kv = self.kv.lock();
            (kv.revision(), kv.get(&get)?)
        };
        self.reply(fault, out)
    }

    fn txn(&self, txn: Txn) -> Result<TxnResult, EtcdError> {
        let writes = txn
            .success
            .iter()
            .chain(&txn.failure)
            .any(|op| !matches!(op, etcd_model::Op::Get(_)));
        let fault = self.gate(if writes {
            Request::Txn
        } else {
            Request::ReadTxn
        })?;
        let out = self.kv.lock().txn(&txn)?;
        self.reply(fault, out)
    }

    fn grant(&self, _ttl: i64) -> Result<i64, EtcdError> {
        let fault = self.gate(Request::Grant)?;
        let out = self.kv.lock().grant();
        self.reply(fault, out)
    }

    fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        let fault = self.gate(Request::Revoke)?;
        let out = self.kv.lock().revoke(lease).map(drop);
        self.reply(fault, out?)
    }

    fn keep_alive(&self, lease: i64) -> Result<bool, EtcdError> {
        let fault = self.gate(Request::KeepAlive)?;
        let out = self.kv.lock().has_lease(lease);
        self.reply(fault, out)
    }

    fn keep_registered(&self, _: Vec<u8>, _: i64, _: Arc<Registration>, _: Arc<AtomicBool>) {}

    fn status(&self, _endpoint: &str) -> Result<MemberStatus, EtcdError> {
        Ok(MemberStatus {
            leader: true,
            errors: Vec::new(),
        })
    }
}

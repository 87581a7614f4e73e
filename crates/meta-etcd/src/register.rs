//! A client's registration (`c/<client>`, in the control cluster or the
//! one data cluster): put under a lease at open, renewed in the
//! background every third of its TTL (by the backend), revoked on drop.
//! Other clients read it to tell a live client from a dead one (its
//! orphans, its intents, and whether its mounted mark may be forgotten:
//! `board`).
//!
//! A client marked mounted writes only while it knows its registration
//! lives ([`EtcdMeta::may_write`]): its mark can be forgotten only once
//! the registration is gone, so a client that was hung or cut off past
//! its TTL checks that its mark is still there before it writes again,
//! and writes nothing more if it is not.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use etcd_model::{Op, Txn};
use meta::Result;

use crate::rpc::{GetOptions, Rpc};
use crate::store::EtcdMeta;
use crate::EtcdError;

/// Milliseconds since the first call in this process: a monotonic clock
/// cheap to keep in an atomic.
fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A client's registration as its renewer and its writers see it.
#[derive(Debug)]
pub struct Registration {
    /// The lease it is under (a new one after a lapse).
    lease: AtomicI64,
    /// When it was last known to live ([`now_ms`]).
    renewed_ms: AtomicU64,
    /// It lapsed, and the client has not yet found its mounted mark
    /// still there.
    lapsed: AtomicBool,
}

impl Registration {
    fn new(lease: i64) -> Registration {
        Registration {
            lease: AtomicI64::new(lease),
            renewed_ms: AtomicU64::new(now_ms()),
            lapsed: AtomicBool::new(false),
        }
    }

    pub(crate) fn lease(&self) -> i64 {
        self.lease.load(Ordering::SeqCst)
    }

    /// The lease was renewed just now.
    pub(crate) fn renewed(&self) {
        self.renewed_ms.store(now_ms(), Ordering::SeqCst);
    }

    /// The lease was found lapsed.
    pub(crate) fn lapsed(&self) {
        self.lapsed.store(true, Ordering::SeqCst);
    }

    /// The registration is under a new lease, put just now.
    pub(crate) fn replaced(&self, lease: i64) {
        self.lease.store(lease, Ordering::SeqCst);
        self.renewed();
    }

    fn age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.renewed_ms.load(Ordering::SeqCst)))
    }
}

impl EtcdMeta {
    /// Registers the client where registrations are: the control
    /// cluster, or the one data cluster.
    pub(crate) fn register_all(&self) -> Result<()> {
        self.register(self.ring.counter_rpc())
    }

    /// Whether `client` is registered (its registration's lease has not
    /// lapsed): this client always is.
    pub(crate) fn registered(&self, client: u64) -> Result<bool> {
        if client == self.client {
            return Ok(true);
        }
        let resp = self
            .ring
            .counter_rpc()
            .get(self.keys.client(client), GetOptions::new())?;
        Ok(!resp.kvs().is_empty())
    }

    /// Puts `c/<client>` in one cluster under a lease of
    /// [`EtcdOptions::client_ttl`] and starts renewing it in the background.
    fn register(&self, rpc: Arc<Rpc>) -> Result<()> {
        let ttl = self.opts.client_ttl.as_secs().max(2) as i64;
        let key = self.keys.client(self.client);
        let id = rpc.grant(ttl)?;
        rpc.txn(Txn::new().and_then([Op::put(key.clone(), Vec::new(), id)]))?;
        let reg = Arc::new(Registration::new(id));
        rpc.keep_registered(key, ttl, reg.clone(), self.stop_renewing.clone());
        self.registrations.lock().push((rpc, reg));
        Ok(())
    }

    /// Whether this client may write now. A client not marked mounted
    /// always may. A mounted one may while its registration is known to
    /// live (renewed within half its TTL, never lapsed since it last
    /// looked at its mark); else it renews at once, and after a lapse it
    /// registers again and then looks for its mark: found, it writes on
    /// (no one can forget it from then on); gone, someone forgot it
    /// (`cairn cluster forget-client`) and a collection may have run
    /// without it, so it writes nothing more until it is mounted again.
    pub(crate) fn may_write(&self) -> Result<()> {
        let Some(me) = *self.mounted_as.lock() else {
            return Ok(());
        };
        if self.forgotten.load(Ordering::SeqCst) {
            return Err(EtcdError::Forgotten(me).into());
        }
        let Some((rpc, reg)) = self.registrations.lock().first().cloned() else {
            return Ok(());
        };
        let lapsed = reg.lapsed.load(Ordering::SeqCst);
        if !lapsed && reg.age() <= self.opts.client_ttl / 2 {
            return Ok(());
        }
        if rpc.keep_alive(reg.lease())? {
            reg.renewed();
            if !lapsed {
                return Ok(());
            }
        } else {
            if !lapsed {
                tracing::error!(client = me, "the client's registration in etcd expired; it looks for its mounted mark before it writes again");
                reg.lapsed();
            }
            let ttl = self.opts.client_ttl.as_secs().max(2) as i64;
            let id = rpc.grant(ttl)?;
            let key = self.keys.client(self.client);
            rpc.txn(Txn::new().and_then([Op::put(key, Vec::new(), id)]))?;
            reg.replaced(id);
        }
        // Registered again: from now on no one can forget this client,
        // so its mark still there means no one did.
        if self.holds_mark(me)? {
            reg.lapsed.store(false, Ordering::SeqCst);
            return Ok(());
        }
        self.forgotten.store(true, Ordering::SeqCst);
        tracing::error!(
            client = me,
            "this client was forgotten by another (its registration lapsed and its mounted mark was taken away): it writes nothing more; unmount and mount it again"
        );
        Err(EtcdError::Forgotten(me).into())
    }

    /// Stops renewing (a renewer finding its lease gone would register
    /// again) and revokes every registration of this client.
    pub(crate) fn revoke_registrations(&self) {
        self.stop_renewing.store(true, Ordering::SeqCst);
        for (rpc, reg) in self.registrations.lock().drain(..) {
            if let Err(e) = rpc.revoke(reg.lease()) {
                tracing::warn!(error = %e, "the client's registration was not revoked; it lapses with its lease");
            }
        }
    }

    /// Fault injection for tests: the client's registration is no longer
    /// renewed, as when the client hangs; it lapses after its TTL.
    pub fn stop_renewing(&self) {
        self.stop_renewing.store(true, Ordering::SeqCst);
    }
}

impl Drop for EtcdMeta {
    /// Takes the client's mounted mark away (`board`) and revokes its
    /// registrations (best effort: unrevoked, they
    /// lapse after their TTL), so that other clients may purge its orphans
    /// and settle its intents now.
    fn drop(&mut self) {
        let mounted = *self.mounted_as.lock();
        if let Some(me) = mounted {
            if let Err(e) = meta::CollectionBoard::unmounted(self, me) {
                tracing::warn!(error = %e, client = me, "the client's mounted mark was not taken away; a collection across clients waits until it mounts again");
            }
        }
        self.revoke_registrations();
    }
}

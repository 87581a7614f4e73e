//! A client's registration (`c/<client>`, in the control cluster or the
//! one data cluster): put under a lease at open, renewed in the
//! background every third of its TTL (by the backend), revoked on drop.
//! Other clients read it to tell a live client from a dead one (its
//! orphans, its intents).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use etcd_model::{Op, Txn};
use meta::Result;

use crate::rpc::{GetOptions, Rpc};
use crate::store::EtcdMeta;

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
        let lease = Arc::new(AtomicI64::new(id));
        rpc.keep_registered(key, ttl, lease.clone(), self.stop_renewing.clone());
        self.registrations.lock().push((rpc, lease));
        Ok(())
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
        for (rpc, lease) in self.registrations.lock().drain(..) {
            let id = lease.load(Ordering::SeqCst);
            if let Err(e) = rpc.revoke(id) {
                tracing::warn!(error = %e, "the client's registration was not revoked; it lapses with its lease");
            }
        }
    }
}

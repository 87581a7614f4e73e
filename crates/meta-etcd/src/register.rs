//! A client's registration (`c/<client>`, in the control cluster or the
//! one data cluster): put under a lease at open, renewed in the
//! background every third of its TTL, revoked on drop. Other clients read
//! it to tell a live client from a dead one (its orphans, its intents).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::GetOptions;
use meta::Result;

use crate::rpc::Rpc;
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
        let id = rpc.call({
            let key = key.clone();
            move |c| grant_and_put(c, key, ttl)
        })?;
        let lease = Arc::new(AtomicI64::new(id));
        let stop = self.stop_renewing.clone();
        rpc.spawn({
            let lease = lease.clone();
            move |c| keep_registered(c, key, ttl, lease, stop)
        });
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
    /// Revokes the client's registrations (best effort: unrevoked, they
    /// lapse after their TTL), so that other clients may purge its orphans
    /// and settle its intents now.
    fn drop(&mut self) {
        for (rpc, lease) in self.registrations.lock().drain(..) {
            let id = lease.load(Ordering::SeqCst);
            if let Err(e) = rpc.call(move |mut c| async move { c.lease_revoke(id).await }) {
                tracing::warn!(error = %e, "the client's registration was not revoked; it lapses with its lease");
            }
        }
    }
}

/// A new lease of `ttl` seconds with `key` put under it; the lease's id.
async fn grant_and_put(
    mut c: etcd_client::Client,
    key: Vec<u8>,
    ttl: i64,
) -> Result<i64, etcd_client::Error> {
    let id = c.lease_grant(ttl, None).await?.id();
    c.put(
        key,
        Vec::new(),
        Some(etcd_client::PutOptions::new().with_lease(id)),
    )
    .await?;
    Ok(id)
}

/// Renews the registration's lease every third of its TTL, for as long as
/// the store's runtime runs. A lease found expired (the cluster was away
/// longer than the TTL) is replaced and the registration put again: other
/// clients may have purged this client's orphans meanwhile (logged).
async fn keep_registered(
    members: Vec<etcd_client::Client>,
    key: Vec<u8>,
    ttl: i64,
    lease: Arc<AtomicI64>,
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
        let id = lease.load(Ordering::SeqCst);
        let renewed = async {
            let (mut keeper, mut stream) = c.clone().lease_keep_alive(id).await?;
            keeper.keep_alive().await?;
            Ok::<_, etcd_client::Error>(stream.message().await?.map_or(0, |r| r.ttl()))
        };
        match tokio::time::timeout(period, renewed).await {
            Ok(Ok(left)) if left > 0 => {}
            Ok(Ok(_)) => {
                tracing::error!(
                    "the client's registration in etcd expired: other clients may have purged its orphans"
                );
                if let Ok(Ok(id)) =
                    tokio::time::timeout(period, grant_and_put(c.clone(), key.clone(), ttl)).await
                {
                    lease.store(id, Ordering::SeqCst);
                }
            }
            // Unreachable: the next period tries the next member.
            Ok(Err(_)) | Err(_) => at += 1,
        }
    }
}

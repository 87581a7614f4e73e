//! [`EtcdMeta::mutate`]: the loop that runs one operation as one
//! transaction (its keys in one cluster) or as one intent (several), with
//! its retries: conflicts, unknown outcomes, an unreachable cluster, a
//! stale shard map, a shard locked by an intent.

use std::sync::atomic::Ordering;
use std::time::Instant;

use meta::{MetaError, Result};

use crate::record::Outcome;
use crate::route::Route;
use crate::rpc::GetOptions;
use crate::store::{transient, EtcdMeta, MAX_CONFLICTS};
use crate::tx::{Part, Tx};
use crate::EtcdError;

impl EtcdMeta {
    /// Runs one operation: `f` reads what it needs through a [`Tx`] and
    /// computes; the attempt then commits as one transaction (its keys in
    /// one cluster) or as one intent (`intent`, keys in several). A
    /// conflict runs `f` again (bounded); an unknown outcome first looks
    /// for the operation's result record (or its intent); an unreachable
    /// cluster, a stale shard map and a shard locked by an intent are
    /// waited out until the deadline (a map is reloaded, an intent
    /// settled). An error of `f` itself is the operation's answer.
    pub(crate) fn mutate<T: Outcome>(
        &self,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let op_key = self.keys.op(self.client, seq);
        let deadline = Instant::now() + self.opts.op_deadline;
        // The cluster of a transaction whose reply was lost.
        let mut unknown: Option<usize> = None;
        // An intent of this operation whose end is not known, with the
        // outcome it would give.
        let mut pending: Option<(u64, Vec<u8>)> = None;
        let mut conflicts = 0;
        // The last error, and the divisor of the pause before the next try.
        let mut last: Option<(MetaError, u32)> = None;
        loop {
            if let Some((e, pause)) = last.take() {
                if Instant::now() >= deadline {
                    tracing::error!(error = %e, "etcd unreachable; the metadata operation failed");
                    return Err(EtcdError::Unavailable {
                        after: self.opts.op_deadline,
                        last: e.to_string(),
                    }
                    .into());
                }
                std::thread::sleep(self.pause(pause));
            }
            let attempt = (|| -> Result<Option<T>> {
                self.may_write()?;
                let route = self.ring.route();
                if let Some(c) = unknown {
                    let mut resp = route.rpc(c).get(op_key.clone(), GetOptions::new())?;
                    if let Some(kv) = resp.take_kvs().pop() {
                        return Ok(Some(T::decode(&kv.value)?));
                    }
                }
                if let Some((id, out)) = &pending {
                    if crate::intent::settle(self, *id, true)? == Some(true) {
                        return Ok(Some(T::decode(out)?));
                    }
                    pending = None;
                }
                let mut tx = Tx::new(&route, &self.keys, self.client);
                let out = match f(&mut tx) {
                    Ok(out) => out,
                    // An answer read from several clusters, each at its
                    // own time, holds only if nothing it read changed
                    // since: else it may come from a state that never
                    // was (an entry read before an intent, its inode
                    // after), and the operation runs again.
                    Err(e) if answer(&e) => {
                        return match tx.still_holds()? {
                            true => Err(e),
                            false => Ok(None),
                        }
                    }
                    Err(e) => return Err(e),
                };
                let mut parts = tx.into_parts()?;
                if parts.len() > 1 {
                    let id = self.random() | 1;
                    pending = Some((id, out.encode()));
                    let applied = crate::intent::run(self, &route, id, parts)?;
                    pending = None;
                    return Ok(applied.then_some(out));
                }
                let part = parts.pop().unwrap_or_default();
                self.commit(&route, part, &op_key, out, &mut unknown)
            })();
            match attempt {
                Ok(Some(out)) => return Ok(out),
                Ok(None) => {
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICTS {
                        tracing::error!(conflicts, "a metadata operation met too many conflicts");
                        return Err(EtcdError::Contended(conflicts).into());
                    }
                    if self.is_sharded() {
                        // Intents that collide back off at random.
                        std::thread::sleep(
                            self.pause(10)
                                .mul_f64((self.random() % 1000) as f64 / 1000.0),
                        );
                    }
                }
                Err(e) if crate::is(&e, |e| matches!(e, EtcdError::Stale(_))) => {
                    last = Some(match self.refresh() {
                        Ok(()) => (e, 5),
                        Err(r) => (r, 1),
                    });
                }
                Err(e) if crate::is(&e, |e| matches!(e, EtcdError::Locked { .. })) => {
                    let Some(&EtcdError::Locked { intent, shard }) = etcd_error(&e) else {
                        unreachable!()
                    };
                    last = Some(match crate::intent::settle_lock(self, intent, shard) {
                        Ok(_) => (e, 10),
                        Err(r) => (r, 1),
                    });
                }
                Err(e) if transient(&e) || is_reply_lost(&e) => last = Some((e, 1)),
                Err(e) => {
                    if let MetaError::Remote(src) = &e {
                        tracing::error!(error = %src, "a metadata operation failed in etcd");
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Commits an attempt whose keys are all in one cluster: one
    /// transaction, with the operation's result record.
    fn commit<T: Outcome>(
        &self,
        route: &Route,
        part: Part,
        op_key: &[u8],
        out: T,
        unknown: &mut Option<usize>,
    ) -> Result<Option<T>> {
        let c = part.cluster;
        let rpc = route.rpc(c);
        let txn = part.into_txn(op_key.to_vec(), out.encode(), self.lease(rpc, c)?)?;
        let sent = rpc.txn(txn);
        if self.lose_reply.swap(false, Ordering::SeqCst) {
            *unknown = Some(c);
            return Err(EtcdError::ReplyLost.into());
        }
        match sent {
            Ok(resp) if resp.succeeded => Ok(Some(out)),
            Ok(_) => Ok(None),
            Err(e) => {
                *unknown = Some(c);
                // The lease may be what failed (expired while the cluster
                // was away): take a new one.
                self.leases.lock().remove(&c);
                Err(e.into())
            }
        }
    }
}

/// Whether `e` is an answer about the namespace (`NotFound`, `Exists`,
/// ...), as opposed to the engine failing.
fn answer(e: &MetaError) -> bool {
    !matches!(e, MetaError::Remote(_))
}

fn etcd_error(e: &MetaError) -> Option<&EtcdError> {
    match e {
        MetaError::Remote(src) => src.downcast_ref::<EtcdError>(),
        _ => None,
    }
}

fn is_reply_lost(e: &MetaError) -> bool {
    matches!(e, MetaError::Remote(src) if matches!(src.downcast_ref::<EtcdError>(), Some(EtcdError::ReplyLost)))
}

//! Operations across data clusters: a durable intent in the control
//! cluster (`t/<id>`), then one idempotent transaction per cluster.
//!
//! 1. **Prepare.** The intent (every part: its compares, shards and
//!    writes) is written in the control cluster, state `Preparing`.
//! 2. **Lock**, cluster by cluster in order: one transaction compares
//!    every key the part read (and its shards' fences) and sets the lock
//!    of each fence to the intent. From then on no other transaction
//!    writes those shards: each compares the fence it read. A compare
//!    that fails (another client wrote, or holds a lock) aborts: never
//!    waits, so two intents cannot deadlock.
//! 3. **Commit**: the intent's state becomes `Committed` (a compare on
//!    its revision): the one point that decides.
//! 4. **Apply**, part by part: the writes and the unlock, in a
//!    transaction that compares the fences still locked by this intent
//!    (so applying twice is a no-op). Parts that create inode records go
//!    first and parts that delete them last, so a reader never meets an
//!    entry whose inode is missing: a crash in between leaks, never loses.
//! 5. **Done**: the intent becomes a small `Done` record under the result
//!    lease (so the client's retry after an unknown outcome knows).
//!
//! Anyone who finds a shard locked settles the intent: a `Committed` one
//! is rolled forward (apply is idempotent), an `Aborted` one released,
//! and a `Preparing` one whose owner is no longer registered in the
//! control cluster aborted. The leader-elected coordinator (`cairn coord`,
//! [`crate::coord`]) runs the same [`settle`] over every intent it finds,
//! so that intents of clients that died are settled even when no client
//! meets their locks.

use std::sync::atomic::Ordering;

use etcd_model::{Cmp as CompareOp, Compare, KeyValue, Op as TxnOp, Range, Txn};
use meta::codec::Reader;
use meta::Result;

use crate::keys::prefix_end;
use crate::route::Route;
use crate::rpc::{GetOptions, Rpc};
use crate::shard::Fence;
use crate::store::EtcdMeta;
use crate::tx::{check_size, Part};
use crate::EtcdError;

/// Fault injection points (`EtcdMeta::stop_after_locks`, `stop_after_first_part`).
pub(crate) const STOP_AFTER_LOCKS: u8 = 1;
pub(crate) const STOP_AFTER_PART: u8 = 2;

/// Whether the fault injected at `point` is due now (it fires once).
fn stop_at(store: &EtcdMeta, point: u8) -> bool {
    store
        .stop_at
        .compare_exchange(point, 0, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

const PREPARING: u8 = 0;
const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;
const DONE: u8 = 3;

/// An intent as stored: its state, its owner and its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Intent {
    pub state: u8,
    pub owner: u64,
    pub parts: Vec<Part>,
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn get_bytes(r: &mut Reader<'_>) -> Result<Vec<u8>, EtcdError> {
    let n = r.u32().map_err(|_| EtcdError::BadIntent)? as usize;
    Ok(r.take(n).map_err(|_| EtcdError::BadIntent)?.to_vec())
}

impl Intent {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.state];
        out.extend_from_slice(&self.owner.to_le_bytes());
        if self.state == DONE {
            return out;
        }
        out.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        for p in &self.parts {
            out.extend_from_slice(&(p.cluster as u32).to_le_bytes());
            out.extend_from_slice(&(p.compares.len() as u32).to_le_bytes());
            for (k, rev) in &p.compares {
                put_bytes(&mut out, k);
                out.extend_from_slice(&rev.to_le_bytes());
            }
            out.extend_from_slice(&(p.shards.len() as u32).to_le_bytes());
            for (s, e) in &p.shards {
                out.extend_from_slice(&s.to_le_bytes());
                out.extend_from_slice(&e.to_le_bytes());
            }
            out.extend_from_slice(&(p.writes.len() as u32).to_le_bytes());
            for (k, v) in &p.writes {
                put_bytes(&mut out, k);
                match v {
                    Some(v) => {
                        out.push(1);
                        put_bytes(&mut out, v);
                    }
                    None => out.push(0),
                }
            }
            out.extend_from_slice(&(p.prefixes.len() as u32).to_le_bytes());
            for k in &p.prefixes {
                put_bytes(&mut out, k);
            }
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, EtcdError> {
        let bad = |_| EtcdError::BadIntent;
        let mut r = Reader::new(b);
        let state = r.u8().map_err(bad)?;
        let owner = r.u64().map_err(bad)?;
        let mut parts = Vec::new();
        if state != DONE {
            for _ in 0..r.u32().map_err(bad)? {
                let mut p = Part {
                    cluster: r.u32().map_err(bad)? as usize,
                    ..Part::default()
                };
                for _ in 0..r.u32().map_err(bad)? {
                    let k = get_bytes(&mut r)?;
                    p.compares
                        .push((k, i64::from_le_bytes(r.array().map_err(bad)?)));
                }
                for _ in 0..r.u32().map_err(bad)? {
                    p.shards
                        .push((r.u32().map_err(bad)?, r.u64().map_err(bad)?));
                }
                for _ in 0..r.u32().map_err(bad)? {
                    let k = get_bytes(&mut r)?;
                    let v = match r.u8().map_err(bad)? {
                        1 => Some(get_bytes(&mut r)?),
                        _ => None,
                    };
                    p.writes.push((k, v));
                }
                for _ in 0..r.u32().map_err(bad)? {
                    p.prefixes.push(get_bytes(&mut r)?);
                }
                parts.push(p);
            }
        }
        if state > DONE || !r.rest().is_empty() {
            return Err(EtcdError::BadIntent);
        }
        Ok(Intent {
            state,
            owner,
            parts,
        })
    }
}

/// Whether an intent record says preparing (nothing of it applied).
pub(crate) fn preparing(record: &[u8]) -> Result<bool, EtcdError> {
    Ok(Intent::decode(record)?.state == PREPARING)
}

fn control(store: &EtcdMeta) -> Result<&Rpc, EtcdError> {
    store.ring.control.as_deref().ok_or(EtcdError::NotSharded)
}

fn locked(epoch: u64, id: u64) -> Vec<u8> {
    Fence {
        epoch,
        lock: id,
        moved: false,
    }
    .encode()
}

/// Runs an operation whose parts are in several clusters as intent `id`.
/// `Ok(false)`: a compare failed (another client changed what it read)
/// and nothing was applied; run the operation again.
pub(crate) fn run(store: &EtcdMeta, route: &Route, id: u64, mut parts: Vec<Part>) -> Result<bool> {
    let ctl = control(store)?;
    let key = store.keys.intent(id);
    let intent = Intent {
        state: PREPARING,
        owner: store.client,
        parts: std::mem::take(&mut parts),
    };
    let bytes = intent.encode();
    check_size(1, 1, bytes.len() + key.len())?;
    let resp = ctl.txn(
        Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), bytes, 0)]),
    )?;
    let rev = resp.revision;
    for (i, p) in intent.parts.iter().enumerate() {
        let compares: Vec<Compare> = p
            .compares
            .iter()
            .map(|(k, r)| Compare::mod_revision(k.clone(), CompareOp::Equal, *r))
            .collect();
        let ops: Vec<TxnOp> = p
            .shards
            .iter()
            .map(|&(s, e)| TxnOp::put(store.keys.fence(s), locked(e, id), 0))
            .collect();
        check_size(compares.len(), ops.len(), 0)?;
        if !route
            .rpc(p.cluster)
            .txn(Txn::new().when(compares).and_then(ops))?
            .succeeded
        {
            abort(store, id, rev, &intent, &intent.parts[..i])?;
            return Ok(false);
        }
    }
    if stop_at(store, STOP_AFTER_LOCKS) {
        return Err(EtcdError::Injected.into());
    }
    let committed = Intent {
        state: COMMITTED,
        ..intent
    };
    let resp = ctl.txn(
        Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(key.clone(), committed.encode(), 0)]),
    )?;
    if !resp.succeeded {
        // Aborted by another client that took this one for dead.
        release(store, route, id, &committed.parts)?;
        return Ok(false);
    }
    apply(store, route, id, &committed.parts, true)?;
    finish(store, id, committed.owner)?;
    Ok(true)
}

/// Aborts a `Preparing` intent (at revision `rev` of its key), releases
/// the parts locked so far, and deletes it.
fn abort(store: &EtcdMeta, id: u64, rev: i64, intent: &Intent, locked: &[Part]) -> Result<()> {
    let ctl = control(store)?;
    let key = store.keys.intent(id);
    let aborted = Intent {
        state: ABORTED,
        ..intent.clone()
    };
    let resp = ctl.txn(
        Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(key.clone(), aborted.encode(), 0)]),
    )?;
    if !resp.succeeded {
        // Someone else settled it meanwhile.
        return Ok(());
    }
    release(store, &store.ring.route(), id, locked)?;
    ctl.txn(Txn::new().and_then([TxnOp::delete(Range::key(key))]))?;
    Ok(())
}

/// Unlocks every part's shards still locked by intent `id`.
fn release(store: &EtcdMeta, route: &Route, id: u64, parts: &[Part]) -> Result<()> {
    for p in parts {
        let (when, mut ops) = fenced(store, id, p);
        ops.truncate(p.shards.len());
        route
            .rpc(p.cluster)
            .txn(Txn::new().when(when).and_then(ops))?;
    }
    Ok(())
}

/// The compares of a part's fences locked by `id`, and the unlocks (then
/// nothing else: the caller adds the writes).
fn fenced(store: &EtcdMeta, id: u64, p: &Part) -> (Vec<Compare>, Vec<TxnOp>) {
    let when = p
        .shards
        .iter()
        .map(|&(s, e)| Compare::value(store.keys.fence(s), CompareOp::Equal, locked(e, id)))
        .collect();
    let ops = p
        .shards
        .iter()
        .map(|&(s, e)| TxnOp::put(store.keys.fence(s), Fence::open(e).encode(), 0))
        .collect();
    (when, ops)
}

/// Where a part goes in the order of application: creates of inode
/// records first, deletes of them last.
fn rank(store: &EtcdMeta, p: &Part) -> u8 {
    let new = |k: &Vec<u8>| {
        p.compares
            .iter()
            .find(|(c, _)| c == k)
            .is_none_or(|&(_, r)| r == 0)
    };
    if p.writes
        .iter()
        .any(|(k, v)| store.keys.is_inode(k) && v.is_some() && new(k))
    {
        0
    } else if p
        .writes
        .iter()
        .any(|(k, v)| store.keys.is_inode(k) && v.is_none())
    {
        2
    } else {
        1
    }
}

/// Applies every part still locked by `id` (a part applied already is
/// skipped: its fences are no longer locked by `id`).
fn apply(store: &EtcdMeta, route: &Route, id: u64, parts: &[Part], owner: bool) -> Result<()> {
    let mut order: Vec<&Part> = parts.iter().collect();
    order.sort_by_key(|p| (rank(store, p), p.cluster));
    for (i, p) in order.iter().enumerate() {
        let (when, mut ops) = fenced(store, id, p);
        let mut bytes = 0;
        ops.extend(p.ops(&mut bytes));
        check_size(when.len(), ops.len(), bytes)?;
        route
            .rpc(p.cluster)
            .txn(Txn::new().when(when).and_then(ops))?;
        if owner && i == 0 && stop_at(store, STOP_AFTER_PART) {
            return Err(EtcdError::Injected.into());
        }
    }
    Ok(())
}

/// Replaces a settled intent by a `Done` record under the result lease.
fn finish(store: &EtcdMeta, id: u64, owner: u64) -> Result<()> {
    let ctl = control(store)?;
    let lease = store.lease(ctl, usize::MAX)?;
    let done = Intent {
        state: DONE,
        owner,
        parts: Vec::new(),
    };
    ctl.txn(Txn::new().and_then([TxnOp::put(store.keys.intent(id), done.encode(), lease)]))?;
    Ok(())
}

/// Settles intent `id`: rolls a committed one forward, releases an
/// aborted one, and aborts a preparing one when `own` (the caller is its
/// owner, retrying) or its owner is no longer registered. `Some(applied)`
/// once settled, `None` while a live owner is still preparing it.
pub(crate) fn settle(store: &EtcdMeta, id: u64, own: bool) -> Result<Option<bool>> {
    let ctl = control(store)?;
    let key = store.keys.intent(id);
    let route = store.ring.route();
    loop {
        let mut resp = ctl.get(key.clone(), GetOptions::new())?;
        let Some(kv) = resp.take_kvs().pop() else {
            return Ok(Some(false));
        };
        let intent = Intent::decode(&kv.value)?;
        match intent.state {
            DONE => return Ok(Some(true)),
            COMMITTED => {
                apply(store, &route, id, &intent.parts, false)?;
                finish(store, id, intent.owner)?;
                return Ok(Some(true));
            }
            ABORTED => {
                release(store, &route, id, &intent.parts)?;
                ctl.txn(Txn::new().and_then([TxnOp::delete(Range::key(key.clone()))]))?;
                return Ok(Some(false));
            }
            _ => {
                if !own && owner_registered(store, intent.owner)? {
                    return Ok(None);
                }
                abort(store, id, kv.mod_revision, &intent, &intent.parts)?;
            }
        }
    }
}

fn owner_registered(store: &EtcdMeta, owner: u64) -> Result<bool> {
    store.registered(owner)
}

/// Settles intent `id`, found holding `shard` locked. An intent settled
/// as not applied whose lock is still on the shard left it there by dying
/// between its lock and its abort (an intent is written before its locks
/// and ends after releasing them): that lock is released.
pub(crate) fn settle_lock(store: &EtcdMeta, id: u64, shard: u32) -> Result<()> {
    if settle(store, id, false)? != Some(false) {
        return Ok(());
    }
    let route = store.ring.route();
    let Some(map) = &route.map else {
        return Ok(());
    };
    let (cluster, _) = map.owner(shard)?;
    let rpc = route.rpc(cluster);
    let key = store.keys.fence(shard);
    let mut resp = rpc.get(key.clone(), GetOptions::new())?;
    let Some(kv) = resp.take_kvs().pop() else {
        return Ok(());
    };
    let fence = Fence::decode(&kv.value)?;
    if fence.lock == id {
        tracing::warn!(
            intent = id,
            shard,
            "a lock left by an abandoned intent is released"
        );
        rpc.txn(
            Txn::new()
                .when([Compare::value(
                    key.clone(),
                    CompareOp::Equal,
                    kv.value.clone(),
                )])
                .and_then([TxnOp::put(key, Fence { lock: 0, ..fence }.encode(), 0)]),
        )?;
    }
    Ok(())
}

/// The unfinished intents (not `Done`): id, state name and owner.
pub(crate) fn unfinished(store: &EtcdMeta) -> Result<Vec<Unfinished>> {
    let ctl = control(store)?;
    let prefix = store.keys.intents();
    let mut out = Vec::new();
    ctl.scan(
        prefix.clone(),
        &prefix_end(&prefix),
        0,
        usize::MAX,
        &mut |kv| {
            out.extend(unfinished_one(store, &kv)?);
            Ok(true)
        },
    )?;
    Ok(out)
}

/// An unfinished intent: id, state name and owner.
pub(crate) type Unfinished = (u64, &'static str, u64);

/// The intent record `kv` (a key under `t/`), unless it is `Done`.
pub(crate) fn unfinished_one(
    store: &EtcdMeta,
    kv: &KeyValue,
) -> Result<Option<Unfinished>, EtcdError> {
    let id = kv
        .key
        .get(store.keys.intents().len()..)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or(EtcdError::BadIntent)?;
    let intent = Intent::decode(&kv.value)?;
    let state = match intent.state {
        PREPARING => "preparing",
        COMMITTED => "committed",
        ABORTED => "aborted",
        _ => return Ok(None),
    };
    Ok(Some((id, state, intent.owner)))
}

/// Settles every unfinished intent that can be: what a coordinator does.
/// Returns how many were settled.
pub(crate) fn settle_all(store: &EtcdMeta) -> Result<u64> {
    settle_each(store, &unfinished(store)?)
}

/// Settles each of `found` that can be; how many were.
pub(crate) fn settle_each(store: &EtcdMeta, found: &[Unfinished]) -> Result<u64> {
    let mut n = 0;
    for &(id, _, _) in found {
        if settle(store, id, false)?.is_some() {
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_read_back_as_written() {
        let p = Part {
            cluster: 2,
            compares: vec![(b"k1".to_vec(), 0), (b"k2".to_vec(), 77)],
            shards: vec![(5, 9)],
            writes: vec![(b"a".to_vec(), Some(b"v".to_vec())), (b"b".to_vec(), None)],
            prefixes: vec![b"x/".to_vec()],
        };
        let i = Intent {
            state: COMMITTED,
            owner: 42,
            parts: vec![p.clone(), Part::default()],
        };
        assert_eq!(Intent::decode(&i.encode()).unwrap(), i);
        let d = Intent {
            state: DONE,
            owner: 1,
            parts: Vec::new(),
        };
        assert_eq!(Intent::decode(&d.encode()).unwrap(), d);
        assert!(Intent::decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}

//! An in-memory model of etcd's key-value store ([`Kv`]): revisions,
//! multi-version ranges, transactions with compares, leases and
//! compaction, as etcd 3.4 answers them. A deterministic simulation of
//! cairn's cluster (issue 18) runs its clients against this model instead
//! of real etcd processes; `tests/differential_against_etcd.rs` checks the
//! model against a real etcd on random operation sequences, so that a
//! simulation's verdicts hold for the real thing.
//!
//! **Owns:** the store's state: every key's history of versions, the
//! current and compacted revisions, leases and the keys attached to them.
//!
//! **Never:** models replication, elections or time: one [`Kv`] is what a
//! linearizable etcd cluster looks like to its clients, and leases expire
//! only when the simulation says so ([`Kv::expire`]).
//!
//! **Invariants** (etcd's):
//! - The revision starts at 1 and grows by exactly one for each request
//!   that changes something (a transaction, a put, a delete that deleted a
//!   key, a revoke that removed a key); every key a request writes gets
//!   that revision as its `mod_revision`.
//! - A key's `version` counts its puts since it was (re)created; a put to
//!   an absent key sets its `create_revision` and `version` 1.
//! - A read at revision `r` sees exactly the writes of revisions `<= r`; a
//!   revision older than the last compaction is [`ModelError::Compacted`],
//!   one newer than the current is [`ModelError::FutureRevision`].
//! - Compares on an absent key see revision and version 0 and fail on
//!   value; a transaction's branch may not write one key twice
//!   ([`ModelError::DuplicateKey`]); its reads see its earlier writes.
//!
//! Written by hand: it is the specification a simulation needs, small, and
//! there is no maintained Rust model of etcd's semantics to use.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// What etcd refuses, as the model refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("revision {rev} has been compacted (compacted at {compacted})")]
    Compacted { rev: i64, compacted: i64 },
    #[error("revision {rev} is in the future (current {current})")]
    FutureRevision { rev: i64, current: i64 },
    #[error("duplicate key given in txn request: {0:?}")]
    DuplicateKey(Vec<u8>),
    #[error("requested lease not found: {0}")]
    LeaseNotFound(i64),
}

/// A key's value at one revision, as a range returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    /// 0: no lease.
    pub lease: i64,
}

/// The keys a request names: one key, or `[key, end)`; an `end` of
/// `[0]` means every key from `key` on, as in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub key: Vec<u8>,
    pub end: Option<Vec<u8>>,
}

impl Range {
    pub fn key(key: impl Into<Vec<u8>>) -> Range {
        Range {
            key: key.into(),
            end: None,
        }
    }

    /// Every key starting with `prefix` (etcd's `with_prefix`).
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Range {
        let key = prefix.into();
        let end = prefix_end(&key);
        Range {
            key,
            end: Some(end),
        }
    }

    fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        match &self.end {
            None => (Bound::Included(&self.key), Bound::Included(&self.key)),
            Some(e) if e.as_slice() == [0] => (Bound::Included(&self.key), Bound::Unbounded),
            Some(e) => (Bound::Included(&self.key), Bound::Excluded(e)),
        }
    }

    fn contains(&self, k: &[u8]) -> bool {
        match &self.end {
            None => k == self.key.as_slice(),
            Some(e) if e.as_slice() == [0] => k >= self.key.as_slice(),
            Some(e) => k >= self.key.as_slice() && k < e.as_slice(),
        }
    }
}

/// The first key after every key starting with `prefix`; for a prefix of
/// 0xff bytes only, `[0]`: etcd's "every key from the start on".
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A range read: `limit` 0 reads every key; `revision` 0 reads the
/// current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    pub range: Range,
    pub limit: usize,
    pub revision: i64,
}

/// What a range read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetResult {
    pub kvs: Vec<KeyValue>,
    /// Keys in the range, whatever the limit.
    pub count: usize,
    pub more: bool,
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Get(Get),
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    Delete(Range),
}

impl Op {
    /// A put; `lease` 0 for none.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease,
        }
    }

    /// A delete of one key or a range.
    pub fn delete(range: Range) -> Op {
        Op::Delete(range)
    }
}

/// What one operation of a transaction returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    Get(GetResult),
    Put,
    /// Keys deleted.
    Delete(usize),
}

/// What a compare looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    ModRevision(i64),
    CreateRevision(i64),
    Version(i64),
    Value(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Equal,
    NotEqual,
    Greater,
    Less,
}

/// `key`'s target compared with `cmp` to the value in `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    pub key: Vec<u8>,
    pub cmp: Cmp,
    pub target: Target,
}

impl Compare {
    /// `key`'s `mod_revision` (0: absent) compared to `rev`.
    pub fn mod_revision(key: impl Into<Vec<u8>>, cmp: Cmp, rev: i64) -> Compare {
        Compare {
            key: key.into(),
            cmp,
            target: Target::ModRevision(rev),
        }
    }

    /// `key`'s `version` (0: absent) compared to `version`.
    pub fn version(key: impl Into<Vec<u8>>, cmp: Cmp, version: i64) -> Compare {
        Compare {
            key: key.into(),
            cmp,
            target: Target::Version(version),
        }
    }

    /// `key`'s value compared to `value` (fails on an absent key).
    pub fn value(key: impl Into<Vec<u8>>, cmp: Cmp, value: impl Into<Vec<u8>>) -> Compare {
        Compare {
            key: key.into(),
            cmp,
            target: Target::Value(value.into()),
        }
    }
}

/// A transaction: `success` runs when every compare holds, else `failure`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

/// Builds a transaction as etcd clients do.
impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Txn {
        self.compares.extend(compares);
        self
    }

    pub fn and_then(mut self, ops: impl IntoIterator<Item = Op>) -> Txn {
        self.success.extend(ops);
        self
    }

    pub fn or_else(mut self, ops: impl IntoIterator<Item = Op>) -> Txn {
        self.failure.extend(ops);
        self
    }
}

/// What a transaction did: which branch ran, the revision after it, and
/// each operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResult {
    pub succeeded: bool,
    pub revision: i64,
    pub results: Vec<OpResult>,
}

/// One key's versions, oldest first; `None` is a deletion.
type History = Vec<(i64, Option<KeyValue>)>;

/// The store. See the crate doc for what it keeps true.
#[derive(Debug, Clone)]
pub struct Kv {
    revision: i64,
    compacted: i64,
    keys: BTreeMap<Vec<u8>, History>,
    leases: BTreeMap<i64, BTreeSet<Vec<u8>>>,
    next_lease: i64,
}

impl Default for Kv {
    fn default() -> Self {
        Kv::starting_at(1)
    }
}

impl Kv {
    /// An empty store whose current revision is `revision` (1 for a new
    /// cluster; a differential test starts at the real cluster's).
    pub fn starting_at(revision: i64) -> Kv {
        Kv {
            revision,
            compacted: 0,
            keys: BTreeMap::new(),
            leases: BTreeMap::new(),
            next_lease: 1,
        }
    }

    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// A range read.
    pub fn get(&self, get: &Get) -> Result<GetResult, ModelError> {
        let at = match get.revision {
            0 => self.revision,
            r if r > self.revision => {
                return Err(ModelError::FutureRevision {
                    rev: r,
                    current: self.revision,
                })
            }
            r if r < self.compacted => {
                return Err(ModelError::Compacted {
                    rev: r,
                    compacted: self.compacted,
                })
            }
            r => r,
        };
        let mut kvs: Vec<KeyValue> = self
            .keys
            .range::<[u8], _>(get.range.bounds())
            .filter_map(|(_, h)| value_at(h, at).cloned())
            .collect();
        let count = kvs.len();
        if get.limit > 0 && kvs.len() > get.limit {
            kvs.truncate(get.limit);
        }
        Ok(GetResult {
            more: kvs.len() < count,
            kvs,
            count,
        })
    }

    /// A put outside a transaction; the revision after it.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, ModelError> {
        let txn = Txn {
            success: vec![Op::Put {
                key: key.to_vec(),
                value: value.to_vec(),
                lease,
            }],
            ..Txn::default()
        };
        self.txn(&txn).map(|r| r.revision)
    }

    /// A delete outside a transaction: keys deleted and the revision after.
    pub fn delete(&mut self, range: &Range) -> Result<(usize, i64), ModelError> {
        let txn = Txn {
            success: vec![Op::Delete(range.clone())],
            ..Txn::default()
        };
        let r = self.txn(&txn)?;
        match r.results.as_slice() {
            [OpResult::Delete(n)] => Ok((*n, r.revision)),
            _ => unreachable!("one delete, one result"),
        }
    }

    /// A transaction, applied whole or (on an error) not at all.
    pub fn txn(&mut self, txn: &Txn) -> Result<TxnResult, ModelError> {
        check_duplicates(&txn.success)?;
        check_duplicates(&txn.failure)?;
        let succeeded = txn.compares.iter().all(|c| self.holds(c));
        let ops = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        // An operation that would fail (an unknown lease, a compacted or
        // future read) fails the transaction before anything applies, so
        // the store changes in place (a copy per transaction made a long
        // simulation quadratic).
        for op in ops {
            self.check(op)?;
        }
        let before = self.revision;
        let rev = before + 1;
        let mut wrote = false;
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(match op {
                Op::Get(g) => {
                    let mut g = g.clone();
                    if g.revision == 0 && wrote {
                        // Reads in a transaction see its earlier writes.
                        self.revision = rev;
                        let r = self.get(&g);
                        self.revision = before;
                        OpResult::Get(r.expect("checked"))
                    } else {
                        if g.revision == 0 {
                            g.revision = before;
                        }
                        OpResult::Get(self.get(&g).expect("checked"))
                    }
                }
                Op::Put { key, value, lease } => {
                    self.write(key, value, *lease, rev).expect("checked");
                    wrote = true;
                    OpResult::Put
                }
                Op::Delete(range) => {
                    let n = self.remove(range, rev);
                    wrote |= n > 0;
                    OpResult::Delete(n)
                }
            });
        }
        if wrote {
            self.revision = rev;
        }
        Ok(TxnResult {
            succeeded,
            revision: self.revision,
            results,
        })
    }

    /// The error `op` would meet in a transaction now, if any (leases do
    /// not change inside a transaction, nor does a read's revision check).
    fn check(&self, op: &Op) -> Result<(), ModelError> {
        match op {
            Op::Get(g) if g.revision > self.revision => Err(ModelError::FutureRevision {
                rev: g.revision,
                current: self.revision,
            }),
            Op::Get(g) if g.revision != 0 && g.revision < self.compacted => {
                Err(ModelError::Compacted {
                    rev: g.revision,
                    compacted: self.compacted,
                })
            }
            Op::Put { lease, .. } if *lease != 0 && !self.leases.contains_key(lease) => {
                Err(ModelError::LeaseNotFound(*lease))
            }
            _ => Ok(()),
        }
    }

    /// A new lease's id.
    pub fn grant(&mut self) -> i64 {
        let id = self.next_lease;
        self.next_lease += 1;
        self.leases.insert(id, BTreeSet::new());
        id
    }

    /// Whether lease `lease` lives (granted, neither revoked nor expired).
    pub fn has_lease(&self, lease: i64) -> bool {
        self.leases.contains_key(&lease)
    }

    /// Revokes a lease, deleting its keys (one revision for all of them).
    pub fn revoke(&mut self, lease: i64) -> Result<i64, ModelError> {
        let keys = self
            .leases
            .remove(&lease)
            .ok_or(ModelError::LeaseNotFound(lease))?;
        let rev = self.revision + 1;
        let mut wrote = false;
        for k in keys {
            wrote |= self.remove(&Range::key(k), rev) > 0;
        }
        if wrote {
            self.revision = rev;
        }
        Ok(self.revision)
    }

    /// A lease whose time ran out (the simulation's clock says when): as
    /// a revoke.
    pub fn expire(&mut self, lease: i64) -> Result<i64, ModelError> {
        self.revoke(lease)
    }

    /// Drops the history older than `revision`: reads before it fail.
    pub fn compact(&mut self, revision: i64) -> Result<(), ModelError> {
        if revision > self.revision {
            return Err(ModelError::FutureRevision {
                rev: revision,
                current: self.revision,
            });
        }
        if revision <= self.compacted {
            return Err(ModelError::Compacted {
                rev: revision,
                compacted: self.compacted,
            });
        }
        self.compacted = revision;
        for h in self.keys.values_mut() {
            // The newest version at or before the compaction stays: reads
            // at `revision` still see it.
            let keep = h.iter().rposition(|(r, _)| *r <= revision).unwrap_or(0);
            h.drain(..keep);
        }
        self.keys
            .retain(|_, h| !(h.len() == 1 && h[0].1.is_none() && h[0].0 <= revision));
        Ok(())
    }

    fn current(&self, key: &[u8]) -> Option<&KeyValue> {
        self.keys.get(key).and_then(|h| value_at(h, self.revision))
    }

    fn holds(&self, c: &Compare) -> bool {
        let kv = self.current(&c.key);
        let ord = match (&c.target, kv) {
            (Target::Value(_), None) => return false,
            (Target::Value(v), Some(kv)) => kv.value.as_slice().cmp(v.as_slice()),
            (Target::ModRevision(r), kv) => kv.map_or(0, |k| k.mod_revision).cmp(r),
            (Target::CreateRevision(r), kv) => kv.map_or(0, |k| k.create_revision).cmp(r),
            (Target::Version(v), kv) => kv.map_or(0, |k| k.version).cmp(v),
        };
        match c.cmp {
            Cmp::Equal => ord.is_eq(),
            Cmp::NotEqual => ord.is_ne(),
            Cmp::Greater => ord.is_gt(),
            Cmp::Less => ord.is_lt(),
        }
    }

    fn write(&mut self, key: &[u8], value: &[u8], lease: i64, rev: i64) -> Result<(), ModelError> {
        if lease != 0 && !self.leases.contains_key(&lease) {
            return Err(ModelError::LeaseNotFound(lease));
        }
        let old = self
            .keys
            .get(key)
            .and_then(|h| h.last())
            .and_then(|(_, v)| v.clone());
        if let Some(o) = &old {
            if o.lease != 0 {
                if let Some(keys) = self.leases.get_mut(&o.lease) {
                    keys.remove(key);
                }
            }
        }
        if lease != 0 {
            self.leases
                .get_mut(&lease)
                .expect("checked")
                .insert(key.to_vec());
        }
        let kv = KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            create_revision: old.as_ref().map_or(rev, |o| o.create_revision),
            mod_revision: rev,
            version: old.as_ref().map_or(1, |o| o.version + 1),
            lease,
        };
        self.keys
            .entry(key.to_vec())
            .or_default()
            .push((rev, Some(kv)));
        Ok(())
    }

    fn remove(&mut self, range: &Range, rev: i64) -> usize {
        let live: Vec<(Vec<u8>, i64)> = self
            .keys
            .range::<[u8], _>(range.bounds())
            .filter_map(|(k, h)| {
                h.last()
                    .and_then(|(_, v)| v.as_ref())
                    .map(|v| (k.clone(), v.lease))
            })
            .collect();
        for (k, lease) in &live {
            if *lease != 0 {
                if let Some(keys) = self.leases.get_mut(lease) {
                    keys.remove(k);
                }
            }
            self.keys.get_mut(k).expect("listed").push((rev, None));
        }
        live.len()
    }
}

fn value_at(h: &History, rev: i64) -> Option<&KeyValue> {
    h.iter()
        .rev()
        .find(|(r, _)| *r <= rev)
        .and_then(|(_, v)| v.as_ref())
}

/// etcd refuses a branch that puts one key twice, or puts a key a delete
/// of the same branch covers.
fn check_duplicates(ops: &[Op]) -> Result<(), ModelError> {
    let mut puts = BTreeSet::new();
    for op in ops {
        if let Op::Put { key, .. } = op {
            if !puts.insert(key.clone()) {
                return Err(ModelError::DuplicateKey(key.clone()));
            }
        }
    }
    for op in ops {
        if let Op::Delete(range) = op {
            if let Some(k) = puts.iter().find(|k| range.contains(k)) {
                return Err(ModelError::DuplicateKey(k.clone()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(kv: &Kv, key: &str, rev: i64) -> Option<KeyValue> {
        kv.get(&Get {
            range: Range::key(key),
            limit: 0,
            revision: rev,
        })
        .unwrap()
        .kvs
        .pop()
    }

    #[test]
    fn revisions_versions_and_history() {
        let mut kv = Kv::default();
        assert_eq!(kv.put(b"a", b"1", 0).unwrap(), 2);
        assert_eq!(kv.put(b"a", b"2", 0).unwrap(), 3);
        let now = get(&kv, "a", 0).unwrap();
        assert_eq!(
            (now.create_revision, now.mod_revision, now.version),
            (2, 3, 2)
        );
        assert_eq!(get(&kv, "a", 2).unwrap().value, b"1");
        assert_eq!(kv.delete(&Range::key("a")).unwrap(), (1, 4));
        assert_eq!(
            kv.delete(&Range::key("a")).unwrap(),
            (0, 4),
            "nothing deleted, no revision"
        );
        assert_eq!(get(&kv, "a", 0), None);
        kv.put(b"a", b"3", 0).unwrap();
        let again = get(&kv, "a", 0).unwrap();
        assert_eq!((again.create_revision, again.version), (5, 1));
        kv.compact(4).unwrap();
        assert!(matches!(
            kv.get(&Get {
                range: Range::key("a"),
                limit: 0,
                revision: 3
            }),
            Err(ModelError::Compacted { .. })
        ));
        assert_eq!(get(&kv, "a", 4), None);
    }

    #[test]
    fn a_transaction_is_whole_or_nothing() {
        let mut kv = Kv::default();
        kv.put(b"x", b"1", 0).unwrap();
        let txn = Txn {
            compares: vec![Compare {
                key: b"y".to_vec(),
                cmp: Cmp::Equal,
                target: Target::ModRevision(0),
            }],
            success: vec![
                Op::Put {
                    key: b"y".to_vec(),
                    value: b"n".to_vec(),
                    lease: 0,
                },
                Op::Put {
                    key: b"z".to_vec(),
                    value: b"n".to_vec(),
                    lease: 99,
                },
            ],
            failure: vec![],
        };
        assert_eq!(kv.txn(&txn), Err(ModelError::LeaseNotFound(99)));
        assert_eq!(kv.revision(), 2);
        assert_eq!(
            get(&kv, "y", 0),
            None,
            "nothing of a refused transaction applies"
        );
    }

    #[test]
    fn the_builders_make_what_the_fields_say() {
        let built = Txn::new()
            .when([Compare::version("k", Cmp::Equal, 0)])
            .and_then([Op::put("k", "v", 0)])
            .or_else([Op::delete(Range::prefix("p"))]);
        let spelled = Txn {
            compares: vec![Compare {
                key: b"k".to_vec(),
                cmp: Cmp::Equal,
                target: Target::Version(0),
            }],
            success: vec![Op::Put {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                lease: 0,
            }],
            failure: vec![Op::Delete(Range {
                key: b"p".to_vec(),
                end: Some(b"q".to_vec()),
            })],
        };
        assert_eq!(built, spelled);
        let mut kv = Kv::default();
        assert!(kv.txn(&built).unwrap().succeeded);
        let checks = Txn::new().when([
            Compare::mod_revision("k", Cmp::Equal, 2),
            Compare::value("k", Cmp::Equal, "v"),
        ]);
        let r = kv.txn(&checks).unwrap();
        assert!(r.succeeded);
        assert_eq!(
            r.revision, 2,
            "a transaction of compares only writes nothing"
        );
    }

    #[test]
    fn a_revoke_deletes_its_keys_in_one_revision() {
        let mut kv = Kv::default();
        let l = kv.grant();
        kv.put(b"a", b"1", l).unwrap();
        kv.put(b"b", b"1", l).unwrap();
        kv.put(b"b", b"2", 0).unwrap(); // detached
        assert_eq!(kv.revoke(l).unwrap(), 5);
        assert_eq!(get(&kv, "a", 0), None);
        assert_eq!(get(&kv, "b", 0).unwrap().value, b"2");
        assert_eq!(kv.revoke(l), Err(ModelError::LeaseNotFound(l)));
    }
}

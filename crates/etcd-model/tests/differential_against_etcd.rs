//! The model against a real etcd (Debian's etcd-server, started here):
//! random sequences of puts, deletes, ranges (limits, old revisions),
//! transactions with every compare target and both branches, lease grants
//! and revokes and compactions give the same answers, revisions and
//! errors from both. Each case writes under a prefix of its own and starts
//! the model at the real cluster's revision.

use std::collections::HashMap;

use etcd_client::{
    Client, Compare as ECompare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn as ETxn,
    TxnOp, TxnOpResponse,
};
use etcd_model::{
    prefix_end, Cmp, Compare, Get, GetResult, KeyValue, Kv, ModelError, Op, OpResult, Range,
    Target, Txn,
};
use proptest::prelude::*;
use testkit::etcd::Etcd;

const KEYS: &[&str] = &["a", "b", "c", "d"];
const VALUES: &[&str] = &["", "v1", "v2", "zz"];

/// A request of a case, with keys as indexes into [`KEYS`], revisions as
/// offsets from the case's first revision and leases as indexes into the
/// leases the case granted.
#[derive(Debug, Clone)]
enum Step {
    Put(usize, usize, Option<usize>),
    Delete(usize, bool),
    Get(usize, bool, usize, Option<i64>),
    Txn(Vec<(usize, u8, Cmp, i64)>, Vec<SimpleOp>, Vec<SimpleOp>),
    Grant,
    Revoke(usize),
    Compact(i64),
}

#[derive(Debug, Clone)]
enum SimpleOp {
    Put(usize, usize),
    Delete(usize, bool),
    /// A read inside a transaction, at the current revision or at an old
    /// one (an offset from the case's first).
    Get(usize, bool, Option<i64>),
}

fn cmp() -> impl Strategy<Value = Cmp> {
    prop_oneof![
        Just(Cmp::Equal),
        Just(Cmp::NotEqual),
        Just(Cmp::Greater),
        Just(Cmp::Less)
    ]
}

fn simple() -> impl Strategy<Value = SimpleOp> {
    prop_oneof![
        (0..KEYS.len(), 0..VALUES.len()).prop_map(|(k, v)| SimpleOp::Put(k, v)),
        (0..KEYS.len(), any::<bool>()).prop_map(|(k, p)| SimpleOp::Delete(k, p)),
        (0..KEYS.len(), any::<bool>(), prop::option::of(0..12i64))
            .prop_map(|(k, p, r)| SimpleOp::Get(k, p, r)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..KEYS.len(), 0..VALUES.len(), prop::option::of(0..3usize))
            .prop_map(|(k, v, l)| Step::Put(k, v, l)),
        1 => (0..KEYS.len(), any::<bool>()).prop_map(|(k, p)| Step::Delete(k, p)),
        2 => (0..KEYS.len(), any::<bool>(), 0..3usize, prop::option::of(0..12i64))
            .prop_map(|(k, p, l, r)| Step::Get(k, p, l, r)),
        4 => (
            prop::collection::vec((0..KEYS.len(), 0..4u8, cmp(), 0..12i64), 0..3),
            prop::collection::vec(simple(), 0..4),
            prop::collection::vec(simple(), 0..3),
        )
            .prop_map(|(c, s, f)| Step::Txn(c, s, f)),
        1 => Just(Step::Grant),
        1 => (0..3usize).prop_map(Step::Revoke),
        1 => (0..12i64).prop_map(Step::Compact),
    ]
}

/// One case's view of both stores.
struct Case<'a> {
    rt: &'a tokio::runtime::Runtime,
    client: Client,
    model: Kv,
    prefix: String,
    base: i64,
    /// Leases granted: (model id, real id).
    leases: Vec<(i64, i64)>,
    /// The real cluster's compaction point, kept across cases (each case
    /// shares the one etcd, so a later case starts compacted where an
    /// earlier one left it).
    compacted: &'a std::cell::Cell<i64>,
}

#[derive(Debug, PartialEq)]
enum Answer {
    Rev(i64),
    Get(GetResult),
    Txn(bool, i64, Vec<OpResult>),
    Err(&'static str),
}

fn kind(e: &ModelError) -> &'static str {
    match e {
        ModelError::Compacted { .. } => "compacted",
        ModelError::FutureRevision { .. } => "future",
        ModelError::DuplicateKey(_) => "duplicate",
        ModelError::LeaseNotFound(_) => "lease",
    }
}

fn real_kind(e: &etcd_client::Error) -> &'static str {
    let text = e.to_string();
    if text.contains("compacted") {
        "compacted"
    } else if text.contains("future revision") {
        "future"
    } else if text.contains("duplicate key") {
        "duplicate"
    } else if text.contains("lease not found") {
        "lease"
    } else {
        panic!("an etcd error the model does not know: {text}")
    }
}

impl Case<'_> {
    fn key(&self, k: usize) -> String {
        format!("{}{}", self.prefix, KEYS[k])
    }

    fn range(&self, k: usize, all_from: bool) -> Range {
        if all_from {
            Range {
                key: self.key(k).into_bytes(),
                end: Some(prefix_end(self.prefix.as_bytes())),
            }
        } else {
            Range::key(self.key(k))
        }
    }

    fn rev(&self, off: i64) -> i64 {
        self.base + off
    }

    fn lease(&self, i: Option<usize>) -> (i64, i64) {
        match i {
            None => (0, 0),
            // A lease never granted is an id neither side knows.
            Some(i) => self
                .leases
                .get(i)
                .copied()
                .unwrap_or((9_000 + i as i64, 9_000 + i as i64)),
        }
    }

    /// The model's lease id of a real one.
    fn model_lease(&self, real: i64) -> i64 {
        if real == 0 {
            return 0;
        }
        self.leases
            .iter()
            .find(|(_, r)| *r == real)
            .map(|(m, _)| *m)
            .unwrap_or(real)
    }

    fn real_kvs(&self, kvs: &[etcd_client::KeyValue]) -> Vec<KeyValue> {
        kvs.iter()
            .map(|kv| KeyValue {
                key: kv.key().to_vec(),
                value: kv.value().to_vec(),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                version: kv.version(),
                lease: self.model_lease(kv.lease()),
            })
            .collect()
    }

    fn get_options(&self, r: &Range, limit: usize, revision: i64) -> GetOptions {
        let mut o = GetOptions::new()
            .with_limit(limit as i64)
            .with_revision(revision);
        if let Some(end) = &r.end {
            o = o.with_range(end.clone());
        }
        o
    }

    fn delete_options(r: &Range) -> Option<DeleteOptions> {
        r.end
            .as_ref()
            .map(|e| DeleteOptions::new().with_range(e.clone()))
    }

    fn run(&mut self, step: &Step) -> (Answer, Answer) {
        let mut c = self.client.clone();
        match step {
            Step::Put(k, v, l) => {
                let key = self.key(*k);
                let (ml, rl) = self.lease(*l);
                let m = self.model.put(key.as_bytes(), VALUES[*v].as_bytes(), ml);
                let opts = (rl != 0).then(|| PutOptions::new().with_lease(rl));
                let r = self.rt.block_on(c.put(key, VALUES[*v], opts));
                (
                    m.map_or_else(|e| Answer::Err(kind(&e)), Answer::Rev),
                    r.map_or_else(
                        |e| Answer::Err(real_kind(&e)),
                        |r| Answer::Rev(r.header().unwrap().revision()),
                    ),
                )
            }
            Step::Delete(k, all) => {
                let range = self.range(*k, *all);
                let m = self.model.delete(&range);
                let r = self
                    .rt
                    .block_on(c.delete(range.key.clone(), Self::delete_options(&range)));
                (
                    m.map_or_else(|e| Answer::Err(kind(&e)), |(_, rev)| Answer::Rev(rev)),
                    r.map_or_else(
                        |e| Answer::Err(real_kind(&e)),
                        |r| Answer::Rev(r.header().unwrap().revision()),
                    ),
                )
            }
            Step::Get(k, all, limit, off) => {
                let range = self.range(*k, *all);
                let revision = off.map_or(0, |o| self.rev(o));
                let m = self.model.get(&Get {
                    range: range.clone(),
                    limit: *limit,
                    revision,
                });
                let opts = self.get_options(&range, *limit, revision);
                let r = self.rt.block_on(c.get(range.key.clone(), Some(opts)));
                (
                    m.map_or_else(|e| Answer::Err(kind(&e)), Answer::Get),
                    r.map_or_else(
                        |e| Answer::Err(real_kind(&e)),
                        |r| {
                            Answer::Get(GetResult {
                                kvs: self.real_kvs(r.kvs()),
                                count: r.count() as usize,
                                more: r.more(),
                            })
                        },
                    ),
                )
            }
            Step::Txn(compares, success, failure) => self.txn(compares, success, failure),
            Step::Grant => {
                let m = self.model.grant();
                let r = self.rt.block_on(c.lease_grant(60, None)).unwrap().id();
                self.leases.push((m, r));
                (Answer::Rev(0), Answer::Rev(0))
            }
            Step::Revoke(i) => {
                let (ml, rl) = self.lease(Some(*i));
                let m = self.model.revoke(ml);
                let r = self.rt.block_on(c.lease_revoke(rl));
                (
                    m.map_or_else(|e| Answer::Err(kind(&e)), Answer::Rev),
                    r.map_or_else(
                        |e| Answer::Err(real_kind(&e)),
                        |r| Answer::Rev(r.header().unwrap().revision()),
                    ),
                )
            }
            Step::Compact(off) => {
                let rev = self.rev(*off);
                let m = self.model.compact(rev);
                let r = self.rt.block_on(c.compact(rev, None));
                if r.is_ok() {
                    self.compacted.set(self.compacted.get().max(rev));
                }
                (
                    m.map_or_else(|e| Answer::Err(kind(&e)), |()| Answer::Rev(0)),
                    r.map_or_else(|e| Answer::Err(real_kind(&e)), |_| Answer::Rev(0)),
                )
            }
        }
    }

    fn op(&self, s: &SimpleOp) -> (Op, TxnOp) {
        match s {
            SimpleOp::Put(k, v) => (
                Op::Put {
                    key: self.key(*k).into_bytes(),
                    value: VALUES[*v].as_bytes().to_vec(),
                    lease: 0,
                },
                TxnOp::put(self.key(*k), VALUES[*v], None),
            ),
            SimpleOp::Delete(k, all) => {
                let r = self.range(*k, *all);
                (
                    Op::Delete(r.clone()),
                    TxnOp::delete(r.key.clone(), Self::delete_options(&r)),
                )
            }
            SimpleOp::Get(k, all, off) => {
                let r = self.range(*k, *all);
                let revision = off.map_or(0, |o| self.rev(o));
                (
                    Op::Get(Get {
                        range: r.clone(),
                        limit: 0,
                        revision,
                    }),
                    TxnOp::get(r.key.clone(), Some(self.get_options(&r, 0, revision))),
                )
            }
        }
    }

    fn txn(
        &mut self,
        compares: &[(usize, u8, Cmp, i64)],
        success: &[SimpleOp],
        failure: &[SimpleOp],
    ) -> (Answer, Answer) {
        let mut model = Txn::default();
        let mut real_cmp = Vec::new();
        for (k, target, cmp, n) in compares {
            let key = self.key(*k);
            let op = match cmp {
                Cmp::Equal => CompareOp::Equal,
                Cmp::NotEqual => CompareOp::NotEqual,
                Cmp::Greater => CompareOp::Greater,
                Cmp::Less => CompareOp::Less,
            };
            // Revisions near the case's own (0: absent), versions small.
            let rev = if *n == 0 { 0 } else { self.rev(*n) };
            let (t, c) = match target {
                0 => (
                    Target::ModRevision(rev),
                    ECompare::mod_revision(key.clone(), op, rev),
                ),
                1 => (
                    Target::CreateRevision(rev),
                    ECompare::create_revision(key.clone(), op, rev),
                ),
                2 => (
                    Target::Version(n % 4),
                    ECompare::version(key.clone(), op, n % 4),
                ),
                _ => {
                    let v = VALUES[*n as usize % VALUES.len()];
                    (
                        Target::Value(v.as_bytes().to_vec()),
                        ECompare::value(key.clone(), op, v),
                    )
                }
            };
            model.compares.push(Compare {
                key: key.into_bytes(),
                cmp: *cmp,
                target: t,
            });
            real_cmp.push(c);
        }
        let (ms, rs): (Vec<Op>, Vec<TxnOp>) = success.iter().map(|s| self.op(s)).unzip();
        let (mf, rf): (Vec<Op>, Vec<TxnOp>) = failure.iter().map(|s| self.op(s)).unzip();
        model.success = ms;
        model.failure = mf;
        let m = self.model.txn(&model);
        let real = ETxn::new().when(real_cmp).and_then(rs).or_else(rf);
        let mut c = self.client.clone();
        let r = self.rt.block_on(c.txn(real));
        (
            m.map_or_else(
                |e| Answer::Err(kind(&e)),
                |t| Answer::Txn(t.succeeded, t.revision, t.results),
            ),
            r.map_or_else(
                |e| Answer::Err(real_kind(&e)),
                |t| {
                    let results = t
                        .op_responses()
                        .into_iter()
                        .map(|o| match o {
                            TxnOpResponse::Put(_) => OpResult::Put,
                            TxnOpResponse::Delete(d) => OpResult::Delete(d.deleted() as usize),
                            TxnOpResponse::Get(g) => OpResult::Get(GetResult {
                                kvs: self.real_kvs(g.kvs()),
                                count: g.count() as usize,
                                more: g.more(),
                            }),
                            TxnOpResponse::Txn(_) => unreachable!("no nested transactions"),
                        })
                        .collect();
                    Answer::Txn(t.succeeded(), t.header().unwrap().revision(), results)
                },
            ),
        )
    }
}

#[test]
fn the_model_answers_as_etcd_does() {
    let etcd = Etcd::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt
        .block_on(Client::connect(etcd.endpoints(), None))
        .unwrap();
    let case_no = std::cell::Cell::new(0u64);
    let compacted = std::cell::Cell::new(0i64);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let errors: HashMap<&'static str, usize> = HashMap::new();
    let errors = std::cell::RefCell::new(errors);
    runner
        .run(&prop::collection::vec(step(), 1..40), |steps| {
            case_no.set(case_no.get() + 1);
            let mut c = client.clone();
            let base = rt
                .block_on(c.get("probe", None))
                .unwrap()
                .header()
                .unwrap()
                .revision();
            let mut model = Kv::starting_at(base);
            if compacted.get() > 0 {
                model.compact(compacted.get()).unwrap();
            }
            let mut case = Case {
                rt: &rt,
                client: client.clone(),
                model,
                prefix: format!("case{}/", case_no.get()),
                base,
                leases: Vec::new(),
                compacted: &compacted,
            };
            for (i, s) in steps.iter().enumerate() {
                let (m, r) = case.run(s);
                if let Answer::Err(k) = &r {
                    *errors.borrow_mut().entry(k).or_default() += 1;
                }
                prop_assert_eq!(m, r, "step {} ({:?}) of {:?}", i, s, steps);
            }
            Ok(())
        })
        .unwrap();
    // The sequences reached the errors too, not only the happy paths.
    let errors = errors.into_inner();
    for k in ["compacted", "future", "duplicate", "lease"] {
        assert!(
            errors.get(k).copied().unwrap_or(0) > 0,
            "no case met a {k} error: {errors:?}"
        );
    }
}

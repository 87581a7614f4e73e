//! The coordinator (`cairn coord`): one process of many is the leader and
//! settles the unfinished intents of a file system over several clusters
//! (rolls committed ones forward, aborts those of clients gone), so that
//! an operation a client left half done is finished even when no client
//! meets its locks.
//!
//! **Leadership** is one key in the control cluster, `coord/leader`, put
//! under the candidate's lease by one transaction that compares its
//! `create_revision` with 0 (put only if absent); its value names the
//! holder ([`Leader`]). The holder leads while its lease lives: it renews
//! the lease every third of its TTL and revokes it when it stops, so that
//! another takes over at its next campaign; one that dies is replaced
//! once its lease lapses (the TTL). The others read the key each interval
//! and campaign when it is gone.
//!
//! Leadership only avoids duplicate work: correctness comes from the
//! intents' own compares (settling an intent twice, or by two
//! coordinators that both think they lead, changes nothing the second
//! time). No lock is held while acting; the leader's lease fences
//! nothing.
//!
//! The leader's pass is one read-only transaction (its record and a page
//! of intents): an idle file system costs one request per interval.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_model::{Cmp, Compare, Get, GetResult, Op, OpResult, Range, Target, Txn};
use meta::Result;
use serde::{Deserialize, Serialize};

use crate::keys::prefix_end;
use crate::rpc::{GetOptions, Rpc, PAGE};
use crate::store::EtcdMeta;
use crate::EtcdError;

/// The shortest interval between passes (and campaigns).
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest pause between the leader's passes after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How a coordinator runs.
#[derive(Debug, Clone)]
pub struct CoordOptions {
    /// Between two passes of the leader, and two campaigns of the others
    /// (at least 100 ms).
    pub interval: Duration,
    /// The TTL of the leader's lease (whole seconds, at least 2): how long
    /// the others wait for a leader that died.
    pub ttl: Duration,
}

impl Default for CoordOptions {
    fn default() -> Self {
        CoordOptions {
            interval: Duration::from_secs(2),
            ttl: Duration::from_secs(10),
        }
    }
}

/// Who leads: the value of the leader record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    pub host: String,
    pub pid: u32,
    /// When it started, in seconds since the Unix epoch.
    pub since: u64,
}

impl Leader {
    fn decode(b: &[u8]) -> Result<Leader, EtcdError> {
        serde_json::from_slice(b).map_err(|_| EtcdError::BadLeader)
    }
}

/// What a coordinator reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This coordinator leads now.
    Leading,
    /// Another one leads (reported when the leader changes).
    Following(Leader),
    /// This coordinator no longer leads (its lease ended, or its record
    /// is gone).
    Lost,
    /// A pass settled this many intents.
    Settled(u64),
    /// A request failed, `times` times in a row (reported the 1st, 2nd,
    /// 4th, 8th... time: a cluster away for long is not a log flood).
    Failed { error: String, times: u32 },
}

/// One coordinator of a file system over several clusters.
pub struct Coordinator {
    store: EtcdMeta,
    opts: CoordOptions,
    me: Leader,
    /// While leading: the lease, and when it was last renewed.
    leading: Option<(i64, Instant)>,
    /// The leader last reported.
    seen: Option<Leader>,
}

impl Coordinator {
    /// A coordinator of `store`'s file system (over several clusters),
    /// not leading yet.
    pub fn new(store: EtcdMeta, opts: CoordOptions) -> Result<Coordinator> {
        if !store.is_sharded() {
            return Err(EtcdError::NotSharded.into());
        }
        let me = Leader {
            host: host_name(),
            pid: std::process::id(),
            since: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        Ok(Coordinator {
            store,
            opts,
            me,
            leading: None,
            seen: None,
        })
    }

    pub fn leading(&self) -> bool {
        self.leading.is_some()
    }

    fn ctl(&self) -> Result<&Rpc, EtcdError> {
        self.store
            .ring
            .control
            .as_deref()
            .ok_or(EtcdError::NotSharded)
    }

    /// The lease's TTL in whole seconds, at least 2.
    fn ttl(&self) -> Duration {
        Duration::from_secs(self.opts.ttl.as_secs().max(2))
    }

    /// The leader renews its lease; the others campaign if no one leads.
    pub fn campaign(&mut self, report: &mut dyn FnMut(Event)) -> Result<()> {
        if let Some((lease, renewed)) = self.leading {
            match self.ctl()?.keep_alive(lease) {
                Ok(true) => {
                    self.leading = Some((lease, Instant::now()));
                    return Ok(());
                }
                Ok(false) => self.lose(report),
                Err(e) => {
                    // Unrenewed for a TTL: the lease has surely lapsed.
                    if renewed.elapsed() >= self.ttl() {
                        self.lose(report);
                    }
                    return Err(e.into());
                }
            }
        }
        let ctl = self.ctl()?;
        let key = self.store.keys.leader();
        if let Some(kv) = ctl.get(key.clone(), GetOptions::new())?.kvs().first() {
            let holder = Leader::decode(&kv.value)?;
            if self.seen.as_ref() != Some(&holder) {
                self.seen = Some(holder.clone());
                report(Event::Following(holder));
            }
            return Ok(());
        }
        let lease = ctl.grant(self.ttl().as_secs() as i64)?;
        let record = serde_json::to_vec(&self.me).expect("a record of strings and numbers");
        let put = Txn::new()
            .when([Compare {
                key: key.clone(),
                cmp: Cmp::Equal,
                target: Target::CreateRevision(0),
            }])
            .and_then([Op::put(key, record, lease)]);
        match ctl.txn(put) {
            Ok(r) if r.succeeded => {
                self.leading = Some((lease, Instant::now()));
                self.seen = Some(self.me.clone());
                report(Event::Leading);
                Ok(())
            }
            // Another won the race; its record is read next time.
            Ok(_) => {
                let _ = ctl.revoke(lease);
                Ok(())
            }
            // Maybe put: the revoke takes the record back with the lease
            // (or the record lapses with it).
            Err(e) => {
                let _ = ctl.revoke(lease);
                Err(e.into())
            }
        }
    }

    /// Stops leading at once: the record goes with the lease.
    fn lose(&mut self, report: &mut dyn FnMut(Event)) {
        if let Some((lease, _)) = self.leading.take() {
            if let Ok(ctl) = self.ctl() {
                let _ = ctl.revoke(lease);
            }
            report(Event::Lost);
        }
    }

    /// The leader's pass: checks its record still names its lease and
    /// settles every unfinished intent; how many it settled (0 when not
    /// leading). One request when there is none.
    pub fn pass(&mut self, report: &mut dyn FnMut(Event)) -> Result<u64> {
        let Some((lease, _)) = self.leading else {
            return Ok(0);
        };
        let prefix = self.store.keys.intents();
        let read = Txn::new().and_then([
            Op::Get(Get {
                range: Range::key(self.store.keys.leader()),
                limit: 0,
                revision: 0,
            }),
            Op::Get(Get {
                range: Range {
                    end: Some(prefix_end(&prefix)),
                    key: prefix,
                },
                limit: PAGE as usize,
                revision: 0,
            }),
        ]);
        let results = self.ctl()?.txn(read)?.results;
        let got = results.len();
        let mut results = results.into_iter();
        let (Some(OpResult::Get(mine)), Some(OpResult::Get(page))) =
            (results.next(), results.next())
        else {
            return Err(EtcdError::ShortAnswer { asked: 2, got }.into());
        };
        if mine.kvs.first().is_none_or(|kv| kv.lease != lease) {
            self.lose(report);
            return Ok(0);
        }
        self.settle(page)
    }

    /// Settles the intents of the first page read, or of every page when
    /// there are more.
    fn settle(&self, page: GetResult) -> Result<u64> {
        if page.more {
            return crate::intent::settle_all(&self.store);
        }
        let mut found = Vec::new();
        for kv in &page.kvs {
            found.extend(crate::intent::unfinished_one(&self.store, kv)?);
        }
        crate::intent::settle_each(&self.store, &found)
    }

    /// Gives up leading: revokes the lease, so that another takes over at
    /// its next campaign.
    pub fn resign(&mut self) {
        self.lose(&mut |_| {});
    }

    /// Campaigns and, while leading, passes every interval, until `stop`
    /// says stop (or its sender is dropped); then resigns.
    pub fn run(mut self, stop: &Receiver<()>, mut report: impl FnMut(Event)) {
        let renew = self.ttl() / 3;
        let interval = self.opts.interval.max(MIN_INTERVAL);
        let mut due = Instant::now();
        let mut failed = (0u32, 0u32); // campaigns, passes, in a row
        loop {
            match self.campaign(&mut report) {
                Ok(()) => failed.0 = 0,
                Err(e) => failure(&mut failed.0, e, &mut report),
            }
            if self.leading() && Instant::now() >= due {
                match self.pass(&mut report) {
                    Ok(n) => {
                        failed.1 = 0;
                        if n > 0 {
                            report(Event::Settled(n));
                        }
                        due = Instant::now() + interval;
                    }
                    Err(e) => {
                        failure(&mut failed.1, e, &mut report);
                        due = Instant::now() + backoff(interval, failed.1);
                    }
                }
            }
            let wait = if self.leading() {
                renew.min(due.saturating_duration_since(Instant::now()))
            } else {
                interval
            };
            match stop.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.resign();
    }
}

/// Counts a failure in a row; reports it the 1st, 2nd, 4th... time.
fn failure(n: &mut u32, e: meta::MetaError, report: &mut dyn FnMut(Event)) {
    *n += 1;
    if n.is_power_of_two() {
        report(Event::Failed {
            error: e.to_string(),
            times: *n,
        });
    }
}

/// The pause before the next pass after `failures` failed ones in a row:
/// doubling from the interval, at most [`MAX_BACKOFF`].
fn backoff(interval: Duration, failures: u32) -> Duration {
    interval
        .saturating_mul(1 << failures.min(16))
        .min(MAX_BACKOFF.max(interval))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

impl EtcdMeta {
    /// The coordinator that leads now, if any (`cluster status`).
    pub fn coordinator(&self) -> Result<Option<Leader>> {
        let ctl = self.ring.control.as_deref().ok_or(EtcdError::NotSharded)?;
        let resp = ctl.get(self.keys.leader(), GetOptions::new())?;
        Ok(match resp.kvs().first() {
            Some(kv) => Some(Leader::decode(&kv.value)?),
            None => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use meta::conformance::{new, t, ROOT};
    use meta::{FileKind, MetaStore};

    use super::*;
    use crate::sim::{Fault, Gate, Request, SimCluster};
    use crate::EtcdOptions;

    /// Lets every request through, counting those of the control cluster.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Gate for Counting {
        fn pass(&self, cluster: &str, _: Request) -> Fault {
            if cluster.ends_with("-ctl") {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            Fault::Pass
        }
    }

    /// A file system over two simulated data clusters, whose control
    /// cluster's requests `gate` counts.
    struct Ring {
        gate: Arc<Counting>,
        ctl: Arc<SimCluster>,
        _data: [Arc<SimCluster>; 2],
    }

    impl Ring {
        fn new(name: &str) -> Ring {
            let gate = Arc::new(Counting::default());
            let ctl = SimCluster::new(&format!("{name}-ctl"), gate.clone());
            let open: Arc<dyn Gate> = Arc::new(crate::sim::Open);
            let data = [
                SimCluster::new(&format!("{name}-d0"), open.clone()),
                SimCluster::new(&format!("{name}-d1"), open),
            ];
            crate::init_cluster(
                &[ctl.endpoint()],
                &[vec![data[0].endpoint()], vec![data[1].endpoint()]],
                "fs",
                16,
                0,
                0,
                &EtcdOptions::default(),
            )
            .unwrap();
            Ring {
                gate,
                ctl,
                _data: data,
            }
        }

        fn open(&self) -> EtcdMeta {
            EtcdMeta::open_cluster(&[self.ctl.endpoint()], "fs", EtcdOptions::default()).unwrap()
        }

        fn coordinator(&self, pid: u32) -> Coordinator {
            let mut c = Coordinator::new(self.open(), CoordOptions::default()).unwrap();
            c.me.pid = pid;
            c
        }
    }

    fn campaign(c: &mut Coordinator) -> Vec<Event> {
        let mut seen = Vec::new();
        c.campaign(&mut |e| seen.push(e)).unwrap();
        seen
    }

    #[test]
    fn one_of_two_leads_and_the_other_takes_over_when_it_resigns() {
        let ring = Ring::new("coord-resign");
        let (mut a, mut b) = (ring.coordinator(1), ring.coordinator(2));
        assert_eq!(campaign(&mut a), [Event::Leading]);
        assert_eq!(campaign(&mut b), [Event::Following(a.me.clone())]);
        assert!(a.leading() && !b.leading());
        // Campaigning again changes nothing and reports nothing.
        assert!(campaign(&mut a).is_empty() && campaign(&mut b).is_empty());
        assert_eq!(b.store.coordinator().unwrap(), Some(a.me.clone()));

        a.resign();
        assert!(!a.leading());
        assert_eq!(b.store.coordinator().unwrap(), None);
        assert_eq!(campaign(&mut b), [Event::Leading]);
        assert_eq!(campaign(&mut a), [Event::Following(b.me.clone())]);
    }

    #[test]
    fn a_leader_whose_lease_lapsed_or_record_went_no_longer_leads() {
        let ring = Ring::new("coord-lapse");
        let (mut a, mut b) = (ring.coordinator(1), ring.coordinator(2));
        campaign(&mut a);
        campaign(&mut b);
        // A's lease runs out (it was paused longer than the TTL): B takes
        // over, and A finds out at its next renewal.
        ring.ctl.expire(a.leading.unwrap().0).unwrap();
        assert_eq!(campaign(&mut b), [Event::Leading]);
        assert_eq!(
            campaign(&mut a),
            [Event::Lost, Event::Following(b.me.clone())]
        );

        // B's record deleted by hand, its lease alive: its next pass sees
        // and steps down, and A may lead.
        let key = b.store.keys.leader();
        b.ctl()
            .unwrap()
            .txn(Txn::new().and_then([Op::delete(Range::key(key))]))
            .unwrap();
        let mut seen = Vec::new();
        assert_eq!(b.pass(&mut |e| seen.push(e)).unwrap(), 0);
        assert_eq!(seen, [Event::Lost]);
        assert!(!b.leading());
        assert_eq!(campaign(&mut a), [Event::Leading]);
    }

    #[test]
    fn an_idle_pass_is_one_request_and_a_pass_rolls_an_interrupted_mkdir_forward() {
        let ring = Ring::new("coord-pass");
        let mut a = ring.coordinator(1);
        campaign(&mut a);
        let before = ring.gate.0.load(Ordering::SeqCst);
        assert_eq!(a.pass(&mut |_| {}).unwrap(), 0);
        assert_eq!(ring.gate.0.load(Ordering::SeqCst) - before, 1);

        // Opened before the interruption (an open settles intents).
        let mut b = ring.coordinator(2);
        campaign(&mut b);
        // A client's mkdir across clusters stops after its first part.
        let c = ring.open();
        c.stop_after_first_part();
        let mut stopped = None;
        for i in 0..200 {
            let name = format!("m{i}");
            if let Err(e) = c.create(ROOT, name.as_bytes(), new(FileKind::Dir), t(1)) {
                assert!(crate::is(&e, |e| matches!(e, EtcdError::Injected)), "{e}");
                stopped = Some(name);
                break;
            }
        }
        let name = stopped.expect("a mkdir across clusters");
        assert_eq!(crate::intent::unfinished(&a.store).unwrap().len(), 1);
        // A follower's pass does nothing.
        assert_eq!(b.pass(&mut |_| {}).unwrap(), 0);
        assert_eq!(crate::intent::unfinished(&a.store).unwrap().len(), 1);

        assert_eq!(a.pass(&mut |_| {}).unwrap(), 1);
        assert!(crate::intent::unfinished(&a.store).unwrap().is_empty());
        let d = b.store.lookup(ROOT, name.as_bytes()).unwrap();
        assert_eq!((d.attr.kind, d.attr.nlink), (FileKind::Dir, 2));
        meta::conformance::consistent(&b.store);
        // Settled once: the next pass finds nothing.
        assert_eq!(a.pass(&mut |_| {}).unwrap(), 0);
    }

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let s = Duration::from_secs(2);
        assert_eq!(backoff(s, 1), Duration::from_secs(4));
        assert_eq!(backoff(s, 3), Duration::from_secs(16));
        assert_eq!(backoff(s, 40), MAX_BACKOFF);
    }
}

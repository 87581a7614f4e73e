//! [`meta::CollectionBoard`] in etcd: the record of the collection across
//! clients running now (`g`), each client's answer to its phase
//! (`ga/<client>`) and each mounted client's mark (`u/<client>`, whose
//! value is the engine's registration id of the process that mounted
//! it), all in the control cluster (or the one data cluster), beside the
//! clients' registrations. The protocol is `gc`'s `peers` module.
//!
//! Neither the record nor the marks are under a lease: a collector that
//! stops answering must not let another collection start while it may
//! still delete containers (a bucket's deletes cannot be fenced by an
//! etcd compare), and a client that crashed may have been holding
//! references nobody else knows. Both wait for the client to come back:
//! a collection is refused or given up (space leaks), never run past
//! them. A client's own stale record is replaced when it collects again.
//! A mark is taken away by hand ([`CollectionBoard::forget`]), and only
//! in a transaction that finds the registration named in it gone.

use etcd_model::{Cmp, Compare, Op, Range, Target, Txn};
use meta::{Collecting, CollectionBoard, Forget, Phase, Result};

use crate::keys::{prefix_end, Keys};
use crate::mark::Mark;
use crate::rpc::GetOptions;
use crate::store::EtcdMeta;
use crate::EtcdError;

/// Rounds of "read the mark, take it if free" before giving up (another
/// process takes and drops it in between each time).
const MARK_TRIES: usize = 5;

fn phase_byte(p: Phase) -> u8 {
    match p {
        Phase::Marking => 1,
        Phase::Sweeping => 2,
    }
}

fn phase_of(b: u8) -> Result<Phase, EtcdError> {
    match b {
        1 => Ok(Phase::Marking),
        2 => Ok(Phase::Sweeping),
        _ => Err(EtcdError::BadCollection),
    }
}

fn encode(c: &Collecting) -> Vec<u8> {
    let mut v = Vec::with_capacity(17);
    v.extend_from_slice(&c.epoch.to_be_bytes());
    v.extend_from_slice(&c.collector.to_be_bytes());
    v.push(phase_byte(c.phase));
    v
}

fn decode(v: &[u8]) -> Result<Collecting, EtcdError> {
    let bad = || EtcdError::BadCollection;
    if v.len() != 17 {
        return Err(bad());
    }
    Ok(Collecting {
        epoch: u64::from_be_bytes(v[..8].try_into().map_err(|_| bad())?),
        collector: u64::from_be_bytes(v[8..16].try_into().map_err(|_| bad())?),
        phase: phase_of(v[16])?,
    })
}

fn answer_value(epoch: u64, phase: Phase) -> Vec<u8> {
    let mut v = epoch.to_be_bytes().to_vec();
    v.push(phase_byte(phase));
    v
}

impl EtcdMeta {
    /// Whether this process's mark of client `me` is on the board.
    pub(crate) fn holds_mark(&self, me: u64) -> Result<bool> {
        let resp = self
            .ring
            .counter_rpc()
            .get(self.keys.mounted(me), GetOptions::new())?;
        Ok(resp
            .kvs()
            .first()
            .and_then(|kv| Mark::decode(&kv.value))
            .is_some_and(|m| m.registration == self.client))
    }

    /// Every client marked mounted, with whether the process named in its
    /// mark is registered.
    pub(crate) fn mounted_status(&self) -> Result<Vec<crate::MountedClient>> {
        self.clients_under(self.keys.mounteds())?
            .into_iter()
            .map(|(client, value)| {
                let registered = match Mark::decode(&value) {
                    Some(m) => self.registered(m.registration)?,
                    None => false,
                };
                Ok(crate::MountedClient { client, registered })
            })
            .collect()
    }

    /// Every client number under `prefix` (`u/` or `ga/`), with its value.
    fn clients_under(&self, prefix: Vec<u8>) -> Result<Vec<(u64, Vec<u8>)>> {
        let end = prefix_end(&prefix);
        let mut out = Vec::new();
        self.ring
            .counter_rpc()
            .scan(prefix, &end, 0, usize::MAX, &mut |kv| {
                if let Some(n) = Keys::client_at_end(&kv.key) {
                    out.push((n, kv.value));
                }
                Ok(true)
            })?;
        Ok(out)
    }

    /// Puts the record of `me`'s collection if it is still `me`'s
    /// `epoch`; false if it is not.
    fn replace_own(&self, me: u64, epoch: u64, next: Option<Collecting>) -> Result<bool> {
        let rpc = self.ring.counter_rpc();
        let key = self.keys.collecting();
        let Some(kv) = rpc.get_one(key.clone())? else {
            return Ok(false);
        };
        let now = decode(&kv.value)?;
        if now.collector != me || now.epoch != epoch {
            return Ok(false);
        }
        let then = match next {
            Some(c) => vec![Op::put(key.clone(), encode(&c), 0)],
            None => vec![
                Op::delete(Range::key(key.clone())),
                Op::delete(Range::prefix(self.keys.gc_answers())),
            ],
        };
        let txn = Txn::new()
            .when([Compare {
                key,
                cmp: Cmp::Equal,
                target: Target::ModRevision(kv.mod_revision),
            }])
            .and_then(then);
        Ok(rpc.txn(txn)?.succeeded)
    }
}

/// What a transaction that replaces `key`, seen as `seen`, compares: that
/// it is still absent, or still that version.
fn unchanged(key: &[u8], seen: Option<&etcd_model::KeyValue>) -> Compare {
    let target = match seen {
        None => Target::CreateRevision(0),
        Some(kv) => Target::ModRevision(kv.mod_revision),
    };
    Compare {
        key: key.to_vec(),
        cmp: Cmp::Equal,
        target,
    }
}

impl CollectionBoard for EtcdMeta {
    fn collecting(&self) -> Result<Option<Collecting>> {
        let resp = self
            .ring
            .counter_rpc()
            .get(self.keys.collecting(), GetOptions::new())?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(kv) => Ok(Some(decode(&kv.value)?)),
        }
    }

    fn announce(&self, me: u64, epoch: u64) -> Result<Option<Collecting>> {
        let rpc = self.ring.counter_rpc();
        let key = self.keys.collecting();
        let record = Collecting {
            epoch,
            collector: me,
            phase: Phase::Marking,
        };
        // Absent, or this client's own (a crash cut it short): replaced,
        // with the answers to it.
        let seen = rpc.get_one(key.clone())?;
        let compare = match &seen {
            None => Target::CreateRevision(0),
            Some(kv) => {
                let other = decode(&kv.value)?;
                if other.collector != me {
                    return Ok(Some(other));
                }
                Target::ModRevision(kv.mod_revision)
            }
        };
        let txn = Txn::new()
            .when([Compare {
                key: key.clone(),
                cmp: Cmp::Equal,
                target: compare,
            }])
            .and_then([
                Op::delete(Range::prefix(self.keys.gc_answers())),
                Op::put(key, encode(&record), 0),
            ]);
        if rpc.txn(txn)?.succeeded {
            return Ok(None);
        }
        // Another client announced in between.
        Ok(self
            .collecting()?
            .filter(|c| c.collector != me)
            .or(Some(record)))
    }

    fn advance(&self, me: u64, epoch: u64, phase: Phase) -> Result<()> {
        let next = Collecting {
            epoch,
            collector: me,
            phase,
        };
        if self.replace_own(me, epoch, Some(next))? {
            Ok(())
        } else {
            Err(EtcdError::CollectionGone(epoch).into())
        }
    }

    fn finish(&self, me: u64, epoch: u64) -> Result<()> {
        self.replace_own(me, epoch, None)?;
        Ok(())
    }

    /// Takes the mark only if no other live process holds it: absent,
    /// this process's own, or its holder's registration gone or its
    /// holder a process of this machine that died (a `kill -9` or a
    /// crash, mounted again before its registration lapsed). Each case
    /// is one transaction comparing what it saw.
    fn mounted(&self, me: u64) -> Result<()> {
        let rpc = self.ring.counter_rpc();
        let key = self.keys.mounted(me);
        let put = Op::put(key.clone(), Mark::mine(self.client).encode(), 0);
        for _ in 0..MARK_TRIES {
            let seen = rpc.get_one(key.clone())?;
            let mut when = vec![unchanged(&key, seen.as_ref())];
            let holder = seen.as_ref().and_then(|kv| Mark::decode(&kv.value));
            if let Some(m) = holder {
                if m.registration != self.client && !m.holder_died_here() {
                    if self.registered(m.registration)? {
                        return Err(EtcdError::MountedElsewhere {
                            client: me,
                            holder: m.holder(),
                        }
                        .into());
                    }
                    when.push(Compare {
                        key: self.keys.client(m.registration),
                        cmp: Cmp::Equal,
                        target: Target::CreateRevision(0),
                    });
                }
            }
            let txn = Txn::new().when(when).and_then([put.clone()]);
            if rpc.txn(txn)?.succeeded {
                *self.mounted_as.lock() = Some(me);
                return Ok(());
            }
        }
        Err(EtcdError::Contended(MARK_TRIES as u32).into())
    }

    fn may_write(&self) -> Result<()> {
        EtcdMeta::may_write(self)
    }

    fn ids_reserved(&self, me: u64, from: u64, below: u64) -> Result<()> {
        // The mark, then who recorded it: a retry of this engine's own
        // reservation (its outcome unknown) finds itself, where another
        // repository's equal mark is a reservation of the same ids.
        let mut value = below.to_be_bytes().to_vec();
        value.extend_from_slice(&self.client.to_be_bytes());
        let rpc = self.ring.counter_rpc();
        let key = self.keys.id_mark(me);
        for _ in 0..MARK_TRIES {
            let seen = rpc.get_one(key.clone())?;
            match &seen {
                None => {}
                Some(kv) if kv.value == value => return Ok(()),
                Some(kv) => {
                    let recorded = kv
                        .value
                        .get(..8)
                        .and_then(|b| <[u8; 8]>::try_from(b).ok())
                        .map(u64::from_be_bytes)
                        .ok_or(EtcdError::BadIdMark)?;
                    if recorded > from {
                        return Err(EtcdError::IdsBehind {
                            client: me,
                            recorded,
                            ours: from,
                        }
                        .into());
                    }
                    if recorded >= below {
                        return Ok(());
                    }
                }
            }
            let when = unchanged(&key, seen.as_ref());
            let put = Op::put(key.clone(), value.clone(), 0);
            if rpc.txn(Txn::new().when([when]).and_then([put]))?.succeeded {
                return Ok(());
            }
        }
        Err(EtcdError::Contended(MARK_TRIES as u32).into())
    }

    fn forget(&self, client: u64) -> Result<Forget> {
        let rpc = self.ring.counter_rpc();
        let key = self.keys.mounted(client);
        let Some(kv) = rpc.get_one(key.clone())? else {
            return Ok(Forget::NotMounted);
        };
        let mut when = vec![Compare {
            key: key.clone(),
            cmp: Cmp::Equal,
            target: Target::ModRevision(kv.mod_revision),
        }];
        // A mark without a registration id (put before marks carried
        // one) names no process to wait for.
        if let Some(m) = Mark::decode(&kv.value) {
            when.push(Compare {
                key: self.keys.client(m.registration),
                cmp: Cmp::Equal,
                target: Target::CreateRevision(0),
            });
        }
        let txn = Txn::new()
            .when(when)
            .and_then([Op::delete(Range::key(key.clone()))]);
        if rpc.txn(txn)?.succeeded {
            tracing::warn!(
                client,
                "the client's mounted mark was taken away: collections no longer wait for it"
            );
            return Ok(Forget::Forgotten);
        }
        // Registered, or mounted again in between.
        match rpc.get(key, GetOptions::new())?.kvs().first() {
            Some(_) => Ok(Forget::Alive),
            None => Ok(Forget::NotMounted),
        }
    }

    fn unmounted(&self, me: u64) -> Result<()> {
        let txn = Txn::new().and_then([Op::delete(Range::key(self.keys.mounted(me)))]);
        self.ring.counter_rpc().txn(txn)?;
        let mut mounted = self.mounted_as.lock();
        if *mounted == Some(me) {
            *mounted = None;
        }
        Ok(())
    }

    fn mounted_clients(&self) -> Result<Vec<u64>> {
        Ok(self
            .clients_under(self.keys.mounteds())?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    fn answer(&self, me: u64, epoch: u64, phase: Phase) -> Result<()> {
        let txn = Txn::new().and_then([Op::put(
            self.keys.gc_answer(me),
            answer_value(epoch, phase),
            0,
        )]);
        self.ring.counter_rpc().txn(txn)?;
        Ok(())
    }

    fn answered(&self, epoch: u64, phase: Phase) -> Result<Vec<u64>> {
        let want = answer_value(epoch, phase);
        Ok(self
            .clients_under(self.keys.gc_answers())?
            .into_iter()
            .filter(|(_, v)| *v == want)
            .map(|(n, _)| n)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_garbage_is_refused() {
        let c = Collecting {
            epoch: 7,
            collector: 3,
            phase: Phase::Sweeping,
        };
        assert_eq!(decode(&encode(&c)).unwrap(), c);
        assert!(decode(&[0; 16]).is_err());
        let mut bad = encode(&c);
        bad[16] = 9;
        assert!(decode(&bad).is_err());
    }
}

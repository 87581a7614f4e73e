//! Who owns which part of the fingerprint space: a [`RangeTable`] kept in
//! etcd under `/<fsid>/chunkd/ranges` as one JSON value, so a change is
//! one etcd transaction (compared against the revision it was read at).
//!
//! A range covers fingerprints by their first 8 bytes (big-endian), from
//! `start` to `end` inclusive; the ranges tile the whole space, in order.
//! Each range carries an epoch, raised whenever the range is (re)assigned:
//! a request names the range's start and the epoch the client believes,
//! and an owner answers only at the current one.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::Fingerprint;

#[derive(Debug, thiserror::Error)]
pub enum RangesError {
    #[error("etcd at {endpoints}: {reason}")]
    Etcd { endpoints: String, reason: String },
    #[error("no chunkd ranges are set for file system {fsid:?} (`cairn chunkd ranges init`)")]
    Missing { fsid: String },
    #[error("chunkd ranges of file system {fsid:?} are already set (`cairn chunkd ranges show`)")]
    AlreadySet { fsid: String },
    #[error("chunkd ranges changed while being updated; read them again and retry")]
    Raced,
    #[error("invalid chunkd ranges: {0}")]
    Invalid(String),
}

/// One range of the fingerprint space and its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    #[serde(with = "hex_u64")]
    pub start: u64,
    /// Inclusive.
    #[serde(with = "hex_u64")]
    pub end: u64,
    /// The owner's URL, `http://HOST:PORT`, as it advertises itself.
    pub owner: String,
    pub epoch: u64,
}

impl Range {
    pub fn holds(&self, fp: &Fingerprint) -> bool {
        (self.start..=self.end).contains(&fp.prefix())
    }
}

/// Every range, in order, tiling the whole space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeTable {
    pub ranges: Vec<Range>,
}

/// At most this many ranges: the table is one etcd value, read whole.
pub const MAX_RANGES: usize = 4096;

impl RangeTable {
    /// The space cut into equal parts, one per owner in order, at `epoch`.
    pub fn even(owners: &[String], epoch: u64) -> Result<Self, RangesError> {
        if owners.is_empty() || owners.len() > MAX_RANGES {
            return Err(RangesError::Invalid(format!(
                "between 1 and {MAX_RANGES} owners are needed, got {}",
                owners.len()
            )));
        }
        let n = owners.len() as u128;
        let span = (1u128 << 64) / n;
        let ranges = owners
            .iter()
            .enumerate()
            .map(|(i, owner)| {
                let i = i as u128;
                let end = if i + 1 == n {
                    u64::MAX
                } else {
                    ((i + 1) * span - 1) as u64
                };
                Range {
                    start: (i * span) as u64,
                    end,
                    owner: normalize(owner),
                    epoch,
                }
            })
            .collect();
        let table = RangeTable { ranges };
        table.validate()?;
        Ok(table)
    }

    /// Ranges in order, none empty, from 0 to the end of the space without
    /// a gap or an overlap; every owner an http:// URL.
    pub fn validate(&self) -> Result<(), RangesError> {
        let bad = |m: String| Err(RangesError::Invalid(m));
        if self.ranges.is_empty() || self.ranges.len() > MAX_RANGES {
            return bad(format!(
                "{} ranges; 1 to {MAX_RANGES} are allowed",
                self.ranges.len()
            ));
        }
        let mut next = Some(0u64);
        for r in &self.ranges {
            if Some(r.start) != next || r.end < r.start {
                return bad(format!(
                    "range {:016x}-{:016x} leaves a gap or overlaps",
                    r.start, r.end
                ));
            }
            let url_ok =
                url::Url::parse(&r.owner).is_ok_and(|u| u.scheme() == "http" && u.host().is_some());
            if !url_ok {
                return bad(format!("owner {:?} is not http://HOST:PORT", r.owner));
            }
            next = r.end.checked_add(1);
        }
        if next.is_some() {
            return bad("the ranges stop before the end of the space".into());
        }
        Ok(())
    }

    /// The range holding `fp`.
    pub fn range_of(&self, fp: &Fingerprint) -> &Range {
        let i = self.ranges.partition_point(|r| r.start <= fp.prefix());
        &self.ranges[i - 1]
    }

    /// The range starting at `start`.
    pub fn starting_at(&self, start: u64) -> Option<&Range> {
        self.ranges.iter().find(|r| r.start == start)
    }

    /// Gives the range starting at `start` to `owner` at an epoch above
    /// every epoch in the table.
    pub fn assign(&mut self, start: u64, owner: &str) -> Result<&Range, RangesError> {
        let epoch = self.ranges.iter().map(|r| r.epoch).max().unwrap_or(0) + 1;
        let owner = normalize(owner);
        let r = self
            .ranges
            .iter_mut()
            .find(|r| r.start == start)
            .ok_or_else(|| RangesError::Invalid(format!("no range starts at {start:016x}")))?;
        r.owner = owner;
        r.epoch = epoch;
        Ok(r)
    }
}

/// An owner URL without a trailing slash, so that one owner has one name.
pub fn normalize(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

/// The etcd key of a file system's range table.
pub fn key(fsid: &str) -> String {
    format!("/{fsid}/chunkd/ranges")
}

/// The range table in etcd, for one file system.
#[derive(Clone)]
pub struct RangeStore {
    client: Client,
    fsid: String,
    endpoints: String,
    timeout: Duration,
}

impl RangeStore {
    /// Connects (lazily: etcd need not answer yet). Must run inside a
    /// tokio runtime.
    pub async fn connect(
        endpoints: &[String],
        fsid: &str,
        timeout: Duration,
    ) -> Result<Self, RangesError> {
        let joined = endpoints.join(",");
        let opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        let client =
            Client::connect(endpoints, Some(opts))
                .await
                .map_err(|e| RangesError::Etcd {
                    endpoints: joined.clone(),
                    reason: e.to_string(),
                })?;
        Ok(RangeStore {
            client,
            fsid: fsid.to_string(),
            endpoints: joined,
            timeout,
        })
    }

    fn etcd(&self, e: impl std::fmt::Display) -> RangesError {
        RangesError::Etcd {
            endpoints: self.endpoints.clone(),
            reason: e.to_string(),
        }
    }

    /// The table and the revision it was last changed at; `None` if unset.
    pub async fn read(&self) -> Result<Option<(RangeTable, i64)>, RangesError> {
        let mut c = self.client.clone();
        let got = tokio::time::timeout(self.timeout, c.get(key(&self.fsid), None))
            .await
            .map_err(|_| self.etcd(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| self.etcd(e))?;
        let Some(kv) = got.kvs().first() else {
            return Ok(None);
        };
        let table: RangeTable = serde_json::from_slice(kv.value())
            .map_err(|e| RangesError::Invalid(format!("the value in etcd does not parse: {e}")))?;
        table.validate()?;
        Ok(Some((table, kv.mod_revision())))
    }

    /// The table, which must be set.
    pub async fn require(&self) -> Result<(RangeTable, i64), RangesError> {
        self.read().await?.ok_or_else(|| RangesError::Missing {
            fsid: self.fsid.clone(),
        })
    }

    /// Writes `table` in one transaction: only if the key is unset
    /// (`revision` None) or still at `revision`.
    pub async fn write(
        &self,
        table: &RangeTable,
        revision: Option<i64>,
    ) -> Result<(), RangesError> {
        table.validate()?;
        let k = key(&self.fsid);
        let value = serde_json::to_vec(table).expect("a range table serializes");
        let compare = match revision {
            None => Compare::version(k.clone(), CompareOp::Equal, 0),
            Some(rev) => Compare::mod_revision(k.clone(), CompareOp::Equal, rev),
        };
        let txn = Txn::new()
            .when([compare])
            .and_then([TxnOp::put(k, value, None)]);
        let mut c = self.client.clone();
        let resp = tokio::time::timeout(self.timeout, c.txn(txn))
            .await
            .map_err(|_| self.etcd(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| self.etcd(e))?;
        match (resp.succeeded(), revision) {
            (true, _) => Ok(()),
            (false, None) => Err(RangesError::AlreadySet {
                fsid: self.fsid.clone(),
            }),
            (false, Some(_)) => Err(RangesError::Raced),
        }
    }
}

mod hex_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(&s, 16).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(first: u8) -> Fingerprint {
        let mut b = [0u8; 32];
        b[0] = first;
        Fingerprint::new(b)
    }

    #[test]
    fn even_ranges_tile_the_space() {
        let owners: Vec<String> = (0..3).map(|i| format!("http://h{i}:1/")).collect();
        let t = RangeTable::even(&owners, 1).unwrap();
        assert_eq!(t.ranges.len(), 3);
        assert_eq!(t.ranges[0].start, 0);
        assert_eq!(t.ranges[2].end, u64::MAX);
        assert_eq!(t.ranges[0].owner, "http://h0:1");
        assert_eq!(t.range_of(&fp(0)).owner, "http://h0:1");
        assert_eq!(t.range_of(&fp(0xff)).owner, "http://h2:1");
        assert_eq!(t.range_of(&fp(0x80)).owner, "http://h1:1");
    }

    #[test]
    fn gaps_and_bad_owners_are_refused() {
        let mut t = RangeTable::even(&["http://a:1".into(), "http://b:1".into()], 1).unwrap();
        t.ranges[1].start += 1;
        assert!(t.validate().is_err());
        let mut t = RangeTable::even(&["http://a:1".into()], 1).unwrap();
        t.ranges[0].owner = "a:1".into();
        assert!(t.validate().is_err());
    }

    #[test]
    fn assign_raises_the_epoch_above_all() {
        let mut t = RangeTable::even(&["http://a:1".into(), "http://b:1".into()], 3).unwrap();
        let start = t.ranges[1].start;
        let r = t.assign(start, "http://c:1").unwrap();
        assert_eq!((r.owner.as_str(), r.epoch), ("http://c:1", 4));
        assert_eq!(t.ranges[0].epoch, 3);
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.contains("\"start\":\"8000000000000000\""), "{json}");
        assert_eq!(serde_json::from_str::<RangeTable>(&json).unwrap(), t);
    }
}

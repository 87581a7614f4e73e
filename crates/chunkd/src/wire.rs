//! The index's binary protocol (all integers big-endian). Each request
//! names its range (`start`, `epoch`: a [`Target`]) and goes to `POST`:
//!
//! - [`LOOKUP`]: target, `count: u32`, `count` × 32-byte fingerprints.
//!   Answer 200: per fingerprint `0` (absent) or `1, len: u8, location`.
//! - [`ADD`]: target, `container: u64`, `count: u32`, `count` × (32-byte
//!   fingerprint, `len: u8`, location). Answer 204 once committed durably.
//! - [`FORGET`]: target, `count: u32`, `count` × `container: u64`. Answer
//!   200: `removed: u64`, the entries removed in that range.
//!
//! A chunkd that does not own the range at that epoch answers 421 with
//! the reason as text; the client reads the ranges again. `GET` [`VIEW`]
//! answers the range table as the chunkd sees it (JSON).

use crate::{Fingerprint, Location};

pub const LOOKUP: &str = "/v1/index/lookup";
pub const ADD: &str = "/v1/index/add";
pub const FORGET: &str = "/v1/index/forget";
pub const VIEW: &str = "/v1/index/ranges";
/// Fingerprints (or containers) in one request at most.
pub const MAX_BATCH: usize = 65_536;

/// The three index requests, each a `POST` to its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexOp {
    Lookup,
    Add,
    Forget,
}

impl IndexOp {
    pub fn path(self) -> &'static str {
        match self {
            IndexOp::Lookup => LOOKUP,
            IndexOp::Add => ADD,
            IndexOp::Forget => FORGET,
        }
    }
}

/// The range a request is for, and the epoch the client believes it is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub start: u64,
    pub epoch: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the message ends early")]
    Short,
    #[error("{0} bytes follow the message")]
    Trailing(usize),
    #[error("{count} entries; at most {max} are allowed in one request", max = MAX_BATCH)]
    TooMany { count: usize },
    #[error("a location of {0} bytes; at most {max} are allowed", max = Location::MAX)]
    LongLocation(usize),
    #[error("presence flag {0} is neither 0 nor 1")]
    Flag(u8),
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Short);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn count(&mut self) -> Result<usize, WireError> {
        let count = self.u32()? as usize;
        if count > MAX_BATCH {
            return Err(WireError::TooMany { count });
        }
        Ok(count)
    }
    fn target(&mut self) -> Result<Target, WireError> {
        Ok(Target {
            start: self.u64()?,
            epoch: self.u64()?,
        })
    }
    fn fingerprint(&mut self) -> Result<Fingerprint, WireError> {
        Ok(Fingerprint::new(
            self.take(32)?.try_into().expect("32 bytes"),
        ))
    }
    fn location(&mut self) -> Result<Location, WireError> {
        let len = self.u8()? as usize;
        let bytes = self.take(len)?;
        Location::new(bytes.to_vec()).map_err(|_| WireError::LongLocation(len))
    }
    fn end(self) -> Result<(), WireError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

fn target(out: &mut Vec<u8>, t: Target) {
    out.extend_from_slice(&t.start.to_be_bytes());
    out.extend_from_slice(&t.epoch.to_be_bytes());
}

fn count(out: &mut Vec<u8>, n: usize) {
    assert!(n <= MAX_BATCH, "callers split batches at MAX_BATCH");
    out.extend_from_slice(&(n as u32).to_be_bytes());
}

fn location(out: &mut Vec<u8>, l: &Location) {
    out.push(l.as_bytes().len() as u8);
    out.extend_from_slice(l.as_bytes());
}

pub fn encode_lookup(t: Target, fps: &[Fingerprint]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + fps.len() * 32);
    target(&mut out, t);
    count(&mut out, fps.len());
    for fp in fps {
        out.extend_from_slice(fp.as_bytes());
    }
    out
}

pub fn decode_lookup(b: &[u8]) -> Result<(Target, Vec<Fingerprint>), WireError> {
    let mut r = Reader(b);
    let t = r.target()?;
    let n = r.count()?;
    let fps = (0..n).map(|_| r.fingerprint()).collect::<Result<_, _>>()?;
    r.end()?;
    Ok((t, fps))
}

pub fn encode_found(found: &[Option<Location>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in found {
        match f {
            None => out.push(0),
            Some(l) => {
                out.push(1);
                location(&mut out, l);
            }
        }
    }
    out
}

pub fn decode_found(b: &[u8], n: usize) -> Result<Vec<Option<Location>>, WireError> {
    let mut r = Reader(b);
    let found = (0..n)
        .map(|_| match r.u8()? {
            0 => Ok(None),
            1 => r.location().map(Some),
            f => Err(WireError::Flag(f)),
        })
        .collect::<Result<_, _>>()?;
    r.end()?;
    Ok(found)
}

pub fn encode_add(t: Target, container: u64, entries: &[(Fingerprint, Location)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(28 + entries.len() * 48);
    target(&mut out, t);
    out.extend_from_slice(&container.to_be_bytes());
    count(&mut out, entries.len());
    for (fp, l) in entries {
        out.extend_from_slice(fp.as_bytes());
        location(&mut out, l);
    }
    out
}

pub type AddRequest = (Target, u64, Vec<(Fingerprint, Location)>);

pub fn decode_add(b: &[u8]) -> Result<AddRequest, WireError> {
    let mut r = Reader(b);
    let t = r.target()?;
    let container = r.u64()?;
    let n = r.count()?;
    let entries = (0..n)
        .map(|_| Ok((r.fingerprint()?, r.location()?)))
        .collect::<Result<_, WireError>>()?;
    r.end()?;
    Ok((t, container, entries))
}

pub fn encode_forget(t: Target, containers: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + containers.len() * 8);
    target(&mut out, t);
    count(&mut out, containers.len());
    for c in containers {
        out.extend_from_slice(&c.to_be_bytes());
    }
    out
}

pub fn decode_forget(b: &[u8]) -> Result<(Target, Vec<u64>), WireError> {
    let mut r = Reader(b);
    let t = r.target()?;
    let n = r.count()?;
    let containers = (0..n).map(|_| r.u64()).collect::<Result<_, _>>()?;
    r.end()?;
    Ok((t, containers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(i: u8) -> Fingerprint {
        Fingerprint::new([i; 32])
    }

    #[test]
    fn messages_round_trip() {
        let t = Target { start: 7, epoch: 9 };
        let fps = vec![fp(1), fp(2)];
        assert_eq!(decode_lookup(&encode_lookup(t, &fps)).unwrap(), (t, fps));
        let found = vec![
            None,
            Some(Location::new(vec![5; 28]).unwrap()),
            Some(Location::new(vec![]).unwrap()),
        ];
        assert_eq!(decode_found(&encode_found(&found), 3).unwrap(), found);
        let entries = vec![(fp(3), Location::new(vec![1, 2]).unwrap())];
        assert_eq!(
            decode_add(&encode_add(t, 42, &entries)).unwrap(),
            (t, 42, entries)
        );
        assert_eq!(
            decode_forget(&encode_forget(t, &[4, 5])).unwrap(),
            (t, vec![4, 5])
        );
    }

    #[test]
    fn garbage_is_refused() {
        let t = Target { start: 0, epoch: 1 };
        let mut b = encode_lookup(t, &[fp(1)]);
        b.push(0);
        assert!(matches!(decode_lookup(&b), Err(WireError::Trailing(1))));
        assert!(matches!(decode_lookup(&b[..30]), Err(WireError::Short)));
        assert!(matches!(decode_found(&[2], 1), Err(WireError::Flag(2))));
        let mut big = encode_forget(t, &[]);
        big[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode_forget(&big),
            Err(WireError::TooMany { .. })
        ));
        assert!(matches!(decode_found(&[1, 65], 1), Err(WireError::Short)));
    }
}

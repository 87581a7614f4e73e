//! Turning a container into shard payloads and rebuilding lost ones.
//!
//! Coding is systematic: data shards are plain slices of the container, so
//! a healthy read never decodes. Both codes work position by position (XOR
//! bytewise, Reed-Solomon on 64-byte-aligned pieces), so rebuilding a
//! block-aligned span of a shard needs only the same span of the others:
//! a degraded range read does not fetch whole shards.

use parking_lot::Mutex;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use crate::policy::Coding;
use crate::shard::Layout;

pub use reed_solomon_simd::Error as CodingError;

/// Data shard `i`'s bytes of the container, before zero padding.
pub fn data_slice<'a>(layout: &Layout, container: &'a [u8], i: u16) -> &'a [u8] {
    let s = layout.shard_len as usize;
    let start = (usize::from(i) * s).min(container.len());
    let end = (start + s).min(container.len());
    &container[start..end]
}

/// Encoders kept between containers: a new one allocates and zeroes its
/// work buffers (several MiB at 4 MiB containers), which cost more than
/// the encoding itself.
static ENCODERS: Mutex<Vec<ReedSolomonEncoder>> = Mutex::new(Vec::new());
/// Enough for the store's concurrent puts; more are made and dropped.
const KEPT_ENCODERS: usize = 4;

/// Calls `f` with the payloads of the redundant shards, indices K..K+M,
/// of a coded container (none for copies), borrowed from the encoder so
/// they are not copied before a shard is built around them.
pub fn with_redundant<R>(
    layout: &Layout,
    container: &[u8],
    f: impl FnOnce(&[&[u8]]) -> R,
) -> Result<R, CodingError> {
    let k = layout.k();
    let s = layout.shard_len as usize;
    match layout.policy.coding() {
        Coding::Copies => Ok(f(&[])),
        Coding::Xor => {
            let mut parity = vec![0u8; s];
            for i in 0..k {
                xor_into(&mut parity, data_slice(layout, container, i));
            }
            Ok(f(&[&parity]))
        }
        Coding::ReedSolomon => {
            let m = layout.shards() - k;
            let kept = ENCODERS.lock().pop();
            let mut enc = match kept {
                Some(mut enc) => {
                    enc.reset(k.into(), m.into(), s)?;
                    enc
                }
                None => ReedSolomonEncoder::new(k.into(), m.into(), s)?,
            };
            let result = encode_into(&mut enc, layout, container).map(|out| {
                let recovery: Vec<&[u8]> = out.recovery_iter().collect();
                f(&recovery)
            });
            let mut kept = ENCODERS.lock();
            if kept.len() < KEPT_ENCODERS {
                kept.push(enc);
            }
            result
        }
    }
}

fn encode_into<'e>(
    enc: &'e mut ReedSolomonEncoder,
    layout: &Layout,
    container: &[u8],
) -> Result<reed_solomon_simd::EncoderResult<'e>, CodingError> {
    let s = layout.shard_len as usize;
    let mut padded = Vec::new();
    for i in 0..layout.k() {
        let slice = data_slice(layout, container, i);
        if slice.len() == s {
            enc.add_original_shard(slice)?;
        } else {
            padded.clear();
            padded.extend_from_slice(slice);
            padded.resize(s, 0);
            enc.add_original_shard(&padded)?;
        }
    }
    enc.encode()
}

fn xor_into(acc: &mut [u8], other: &[u8]) {
    for (a, b) in acc.iter_mut().zip(other) {
        *a ^= b;
    }
}

/// Rebuilds the spans of shards `wanted` from the same span of at least K
/// other shards (`have`: index and bytes, none of them wanted, all the
/// same even length). Returns the rebuilt spans in the order of `wanted`.
pub fn rebuild(
    layout: &Layout,
    have: &[(u16, &[u8])],
    wanted: &[u16],
) -> Result<Vec<Vec<u8>>, CodingError> {
    let k = layout.k();
    let m = layout.shards() - k;
    let len = have.first().map_or(0, |(_, b)| b.len());
    match layout.policy.coding() {
        Coding::Copies => Ok(wanted.iter().map(|_| have[0].1.to_vec()).collect()),
        Coding::Xor => {
            // Every shard is the XOR of all the others.
            let mut out = vec![0u8; len];
            for (_, bytes) in have.iter().take(usize::from(k)) {
                xor_into(&mut out, bytes);
            }
            Ok(wanted.iter().map(|_| out.clone()).collect())
        }
        Coding::ReedSolomon => {
            let mut dec = ReedSolomonDecoder::new(k.into(), m.into(), len)?;
            let mut originals: Vec<Option<&[u8]>> = vec![None; k.into()];
            for &(i, bytes) in have.iter().take(usize::from(k)) {
                if i < k {
                    originals[usize::from(i)] = Some(bytes);
                    dec.add_original_shard(i.into(), bytes)?;
                } else {
                    dec.add_recovery_shard((i - k).into(), bytes)?;
                }
            }
            let restored = dec.decode()?;
            let data: Vec<&[u8]> = (0..k)
                .map(|i| {
                    originals[usize::from(i)]
                        .or_else(|| restored.restored_original(i.into()))
                        .expect("the decoder restores every missing original")
                })
                .collect();
            let recovery = if wanted.iter().any(|&w| w >= k) {
                let mut enc = ReedSolomonEncoder::new(k.into(), m.into(), len)?;
                for d in &data {
                    enc.add_original_shard(d)?;
                }
                let out = enc.encode()?;
                out.recovery_iter().map(<[u8]>::to_vec).collect()
            } else {
                Vec::new()
            };
            Ok(wanted
                .iter()
                .map(|&w| match w.checked_sub(k) {
                    None => data[usize::from(w)].to_vec(),
                    Some(r) => recovery[usize::from(r)].clone(),
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every shard's full payload, padding included.
    fn all_payloads(layout: &Layout, container: &[u8]) -> Vec<Vec<u8>> {
        let s = layout.shard_len as usize;
        let mut shards: Vec<Vec<u8>> = (0..layout.k())
            .map(|i| {
                let mut p = data_slice(layout, container, i).to_vec();
                p.resize(s, 0);
                p
            })
            .collect();
        if layout.policy.coding() == Coding::Copies {
            return vec![container.to_vec(); layout.shards().into()];
        }
        with_redundant(layout, container, |r| {
            shards.extend(r.iter().map(|p| p.to_vec()))
        })
        .unwrap();
        shards
    }

    fn policies() -> impl Strategy<Value = String> {
        prop_oneof![
            (2u16..5).prop_map(|n| format!("mirror:{n}")),
            (1u16..7).prop_map(|k| format!("parity:{k}")),
            (1u16..7, 1u16..5).prop_map(|(k, m)| format!("rs:{k}+{m}")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Encode, drop any M shards, decode: every shard comes back, whole
        /// or as any block-aligned span.
        #[test]
        fn drop_any_m_shards(
            policy in policies(),
            len in 0usize..400_000,
            seed: u64,
            span_pick: (u64, u64),
        ) {
            let layout = Layout::new(policy.parse().unwrap(), "k", len as u64);
            let container: Vec<u8> = (0..len)
                .map(|i| (i as u64).wrapping_mul(seed | 1).to_le_bytes()[3])
                .collect();
            let shards = all_payloads(&layout, &container);
            let n = layout.shards();
            let mut order: Vec<u16> = (0..n).collect();
            let mut x = seed;
            for i in (1..order.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, (x >> 33) as usize % (i + 1));
            }
            let lost = &order[..layout.policy.tolerance()];
            let kept = &order[layout.policy.tolerance()..];
            let blocks = layout.blocks();
            let first = span_pick.0 % blocks;
            let end = first + 1 + span_pick.1 % (blocks - first);
            for range in [0..blocks, first..end] {
                let span = layout.payload_span(&range);
                let (a, b) = (span.start as usize, span.end as usize);
                let have: Vec<(u16, &[u8])> =
                    kept.iter().map(|&i| (i, &shards[usize::from(i)][a..b])).collect();
                let rebuilt = rebuild(&layout, &have, lost).unwrap();
                for (&i, got) in lost.iter().zip(&rebuilt) {
                    prop_assert_eq!(got, &shards[usize::from(i)][a..b], "shard {}", i);
                }
            }
        }
    }
}

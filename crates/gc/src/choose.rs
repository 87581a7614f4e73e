//! Which containers a collection rewrites.
//!
//! Two rules, the second on top of the first. A container whose live
//! fraction is under the threshold (or that is empty or damaged) is always
//! rewritten: copying its few live chunks is cheap for what it frees. But
//! random overwrites inside a big file leave garbage spread thinly over
//! many containers, each mostly live, and the threshold alone then leaves
//! a repository far larger than its data. So the sparsest of the others
//! are added, in order, until the garbage in the containers kept is at most
//! `max_garbage` of their raw bytes: a bound on space amplification, paid
//! for in copies (an LSM tree's space-amplification target, for the same
//! reason).

use cas::Assessment;

use crate::GcOptions;

pub(crate) fn choose<'a>(assessed: &'a [Assessment], options: &GcOptions) -> Vec<&'a Assessment> {
    let must =
        |a: &Assessment| a.live_fraction() < options.threshold || a.live_chunks == 0 || a.damaged;
    let mut chosen: Vec<&Assessment> = assessed.iter().filter(|a| must(a)).collect();
    let mut rest: Vec<&Assessment> = assessed
        .iter()
        .filter(|a| !must(a) && a.live_raw_bytes < a.info.raw_bytes)
        .collect();
    let kept_raw: u64 = assessed
        .iter()
        .filter(|a| !must(a))
        .map(|a| a.info.raw_bytes)
        .sum();
    let garbage = |a: &Assessment| a.info.raw_bytes - a.live_raw_bytes.min(a.info.raw_bytes);
    let mut kept_garbage: u64 = rest.iter().map(|a| garbage(a)).sum();
    let mut kept_raw = kept_raw;
    rest.sort_by(|a, b| a.live_fraction().total_cmp(&b.live_fraction()));
    for a in rest {
        if kept_garbage as f64 <= options.max_garbage * kept_raw as f64 {
            break;
        }
        kept_garbage -= garbage(a);
        kept_raw -= a.info.raw_bytes;
        chosen.push(a);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use cas::{ContainerId, ContainerInfo};
    use proptest::prelude::*;

    fn assessment(n: u64, raw: u64, live: u64) -> Assessment {
        Assessment {
            container: ContainerId(n),
            info: ContainerInfo {
                stored_bytes: raw,
                raw_bytes: raw,
                chunks: 10,
            },
            live_chunks: if live == 0 { 0 } else { 5 },
            live_raw_bytes: live,
            damaged: false,
        }
    }

    fn options(threshold: f64, max_garbage: f64) -> GcOptions {
        GcOptions {
            threshold,
            max_garbage,
            dry_run: false,
            compact_index: false,
            peer_wait: crate::PEER_WAIT,
        }
    }

    #[test]
    fn thin_garbage_everywhere_is_rewritten_sparsest_first() {
        // Ten containers 80% live: the threshold takes none, and 20%
        // garbage is over the 10% allowed.
        let mut all: Vec<Assessment> = (0..10).map(|n| assessment(n, 100, 80)).collect();
        all[7].live_raw_bytes = 60;
        let chosen = choose(&all, &options(0.5, 0.1));
        assert_eq!(
            chosen[0].container,
            ContainerId(7),
            "the sparsest goes first"
        );
        let kept: Vec<&Assessment> = all
            .iter()
            .filter(|a| !chosen.iter().any(|c| c.container == a.container))
            .collect();
        let garbage: u64 = kept.iter().map(|a| 100 - a.live_raw_bytes).sum();
        assert!(garbage * 10 <= kept.len() as u64 * 100);
    }

    #[test]
    fn max_garbage_one_is_the_threshold_alone() {
        let all = vec![assessment(0, 100, 40), assessment(1, 100, 80)];
        let chosen = choose(&all, &options(0.5, 1.0));
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].container, ContainerId(0));
    }

    proptest! {
        #[test]
        fn what_stays_is_within_the_bound_and_every_must_is_chosen(
            cs in proptest::collection::vec((1u64..1000, 0u64..1000), 0..40),
            threshold in 0.0f64..1.0,
            max_garbage in 0.0f64..1.0,
        ) {
            let all: Vec<Assessment> = cs.iter().enumerate()
                .map(|(n, &(raw, live))| assessment(n as u64, raw, live.min(raw)))
                .collect();
            let o = options(threshold, max_garbage);
            let chosen = choose(&all, &o);
            let is_chosen = |a: &Assessment| chosen.iter().any(|c| c.container == a.container);
            for a in &all {
                if a.live_fraction() < threshold || a.live_chunks == 0 {
                    prop_assert!(is_chosen(a));
                }
            }
            let kept = all.iter().filter(|a| !is_chosen(a));
            let (raw, live) = kept.fold((0u64, 0u64), |(r, l), a| (r + a.info.raw_bytes, l + a.live_raw_bytes));
            prop_assert!((raw - live) as f64 <= max_garbage * raw as f64 + 1e-6);
            let mut ids: Vec<u64> = chosen.iter().map(|a| a.container.0).collect();
            ids.dedup();
            prop_assert_eq!(ids.len(), chosen.len(), "nothing chosen twice");
        }
    }
}

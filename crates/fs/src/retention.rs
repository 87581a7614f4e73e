//! Which automatic versions are kept: the retention rule, and the clock it
//! reads.
//!
//! A version is kept when any one of these says so:
//! - it is one of the newest `last` versions (by number), however old;
//! - it was written within the last `minutes` minutes;
//! - it is the newest version written in one of the last `hourly` clock
//!   hours (UTC), the current hour included;
//! - it is the newest version written in one of the last `daily` days
//!   (UTC), today included.
//!
//! The newest version is always kept, so `cairn recover` always has one.
//! Snapshots are never judged here: only `version/<n>` roots are versions.
//! A version whose time cannot be read is kept (the caller passes `None`):
//! retention drops only what it can judge.

use std::collections::BTreeSet;

use meta::Timestamp;
use serde::Serialize;

/// The retention policy of automatic versions (`[versions]` in
/// `cairn.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Retention {
    /// The newest this many versions, however old (at least 1).
    pub last: u32,
    /// Every version written within this many minutes.
    pub minutes: u32,
    /// The newest version of each of this many clock hours.
    pub hourly: u32,
    /// The newest version of each of this many days.
    pub daily: u32,
}

impl Default for Retention {
    /// An hour of every version, then hourly for a day, then daily for a
    /// week: data deleted today is gone from every version a week later.
    fn default() -> Self {
        Retention {
            last: 1,
            minutes: 60,
            hourly: 24,
            daily: 7,
        }
    }
}

/// Where the time comes from; tests pass their own so nothing sleeps.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// One version as the rule sees it: its number and when it was written
/// (seconds since the Unix epoch; `None` when its record is unreadable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dated {
    pub number: u64,
    pub created: Option<i64>,
}

const HOUR: i64 = 3600;
const DAY: i64 = 86400;

impl Retention {
    /// The numbers of the versions in `versions` to keep at time `now`.
    pub fn kept(&self, versions: &[Dated], now: i64) -> BTreeSet<u64> {
        let mut by_number: Vec<Dated> = versions.to_vec();
        by_number.sort_by_key(|v| std::cmp::Reverse(v.number));
        let mut keep = BTreeSet::new();
        let last = self.last.max(1) as usize;
        keep.extend(by_number.iter().take(last).map(|v| v.number));
        let since = now.saturating_sub(i64::from(self.minutes) * 60);
        // Newest first: the first version met in a bucket is its newest.
        let mut hours = BTreeSet::new();
        let mut days = BTreeSet::new();
        for v in &by_number {
            let Some(t) = v.created else {
                keep.insert(v.number);
                continue;
            };
            if t > since {
                keep.insert(v.number);
            }
            if in_window(t, now, HOUR, self.hourly) && hours.insert(t.div_euclid(HOUR)) {
                keep.insert(v.number);
            }
            if in_window(t, now, DAY, self.daily) && days.insert(t.div_euclid(DAY)) {
                keep.insert(v.number);
            }
        }
        keep
    }
}

impl Retention {
    /// Until when each version of `versions` is kept if no newer version is
    /// written in its hour or day (seconds since the epoch; the time the
    /// rule stops keeping it, `now` for one it keeps no longer): `None` for
    /// one kept without end, as one of the newest `last` or as a version
    /// whose time cannot be read.
    pub fn kept_until(&self, versions: &[Dated], now: i64) -> Vec<(u64, Option<i64>)> {
        let mut by_number: Vec<Dated> = versions.to_vec();
        by_number.sort_by_key(|v| std::cmp::Reverse(v.number));
        let last = self.last.max(1) as usize;
        let mut hours = BTreeSet::new();
        let mut days = BTreeSet::new();
        let mut out = Vec::with_capacity(by_number.len());
        for (i, v) in by_number.iter().enumerate() {
            let Some(t) = v.created else {
                out.push((v.number, None));
                continue;
            };
            // Each bucket is checked in newest-first order: only its newest
            // version is kept for it.
            let newest_hour = hours.insert(t.div_euclid(HOUR));
            let newest_day = days.insert(t.div_euclid(DAY));
            if i < last {
                out.push((v.number, None));
                continue;
            }
            // (A version from the future, a clock set back, is within the
            // minutes window until then.)
            let mut until = now.max(t + i64::from(self.minutes) * 60);
            if newest_hour && self.hourly > 0 {
                until = until.max((t.div_euclid(HOUR) + i64::from(self.hourly)) * HOUR);
            }
            if newest_day && self.daily > 0 {
                until = until.max((t.div_euclid(DAY) + i64::from(self.daily)) * DAY);
            }
            out.push((v.number, Some(until)));
        }
        out.reverse();
        out
    }
}

/// Whether time `t` falls in one of the last `count` buckets of `width`
/// seconds ending with the one holding `now` (a time after `now`, from a
/// clock set back, counts as the current bucket).
fn in_window(t: i64, now: i64, width: i64, count: u32) -> bool {
    count > 0 && t.div_euclid(width) > now.div_euclid(width) - i64::from(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dated(times: &[i64]) -> Vec<Dated> {
        times
            .iter()
            .enumerate()
            .map(|(i, &t)| Dated {
                number: i as u64 + 1,
                created: Some(t),
            })
            .collect()
    }

    /// The rule written out per version, the slow way, as the docs state
    /// it.
    fn model(r: &Retention, versions: &[Dated], now: i64) -> BTreeSet<u64> {
        let newest_in = |width: i64, t: i64| {
            versions
                .iter()
                .filter(|w| w.created.map(|c| c.div_euclid(width)) == Some(t.div_euclid(width)))
                .map(|w| w.number)
                .max()
        };
        let mut numbers: Vec<u64> = versions.iter().map(|v| v.number).collect();
        numbers.sort_unstable();
        let newest: Vec<u64> = numbers
            .iter()
            .rev()
            .take(r.last.max(1) as usize)
            .copied()
            .collect();
        versions
            .iter()
            .filter(|v| {
                let Some(t) = v.created else { return true };
                newest.contains(&v.number)
                    || t > now - i64::from(r.minutes) * 60
                    || (r.hourly > 0
                        && t / HOUR > now / HOUR - i64::from(r.hourly)
                        && newest_in(HOUR, t) == Some(v.number))
                    || (r.daily > 0
                        && t / DAY > now / DAY - i64::from(r.daily)
                        && newest_in(DAY, t) == Some(v.number))
            })
            .map(|v| v.number)
            .collect()
    }

    #[test]
    fn keep_last_one_drops_every_older_version() {
        let r = Retention {
            last: 1,
            minutes: 0,
            hourly: 0,
            daily: 0,
        };
        let kept = r.kept(&dated(&[100, 200, 300]), 300);
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn defaults_thin_out_with_age() {
        let now = 30 * DAY;
        // Two versions an hour apart a day and a half ago, one every
        // 30 s for the last two minutes, and one ten days ago.
        let times = [
            now - 10 * DAY,
            now - DAY - 12 * HOUR,
            now - DAY - 11 * HOUR,
            now - 120,
            now - 90,
            now - 60,
            now - 30,
        ];
        let kept = Retention::default().kept(&dated(&times), now);
        // Ten days: gone. A day and a half: only the newer of the two
        // (same day, outside the hourly window). The last two minutes:
        // all.
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), vec![3, 4, 5, 6, 7]);
    }

    #[test]
    fn an_undated_version_is_kept() {
        let r = Retention {
            last: 1,
            minutes: 0,
            hourly: 0,
            daily: 0,
        };
        let mut v = dated(&[1, 2, 3]);
        v[0].created = None;
        assert_eq!(r.kept(&v, 10).into_iter().collect::<Vec<_>>(), vec![1, 3]);
    }

    fn retention() -> impl Strategy<Value = Retention> {
        (0u32..4, 0u32..180, 0u32..48, 0u32..10).prop_map(|(last, minutes, hourly, daily)| {
            Retention {
                last,
                minutes,
                hourly,
                daily,
            }
        })
    }

    proptest! {
        #[test]
        fn the_kept_set_is_what_the_rule_says(
            r in retention(),
            times in proptest::collection::vec(
                proptest::option::weighted(0.95, 0i64..20 * DAY), 1..60),
            now in 0i64..22 * DAY,
            shuffle in any::<u64>(),
        ) {
            let mut versions: Vec<Dated> = times
                .iter()
                .enumerate()
                .map(|(i, &created)| Dated { number: 2 * i as u64 + 5, created })
                .collect();
            // The order versions are listed in does not matter.
            let n = versions.len();
            versions.rotate_left((shuffle as usize) % n);
            let kept = r.kept(&versions, now);
            prop_assert_eq!(&kept, &model(&r, &versions, now));
            let newest = versions.iter().map(|v| v.number).max().unwrap();
            prop_assert!(kept.contains(&newest), "the newest version was dropped");
            prop_assert!(kept.iter().all(|k| versions.iter().any(|v| v.number == *k)));
        }

        #[test]
        fn kept_until_says_when_the_rule_lets_go(
            r in retention(),
            times in proptest::collection::vec(
                proptest::option::weighted(0.95, 0i64..20 * DAY), 1..60),
            now in 0i64..22 * DAY,
        ) {
            let versions: Vec<Dated> = times
                .iter()
                .enumerate()
                .map(|(i, &created)| Dated { number: i as u64 + 1, created })
                .collect();
            let kept = r.kept(&versions, now);
            let until = r.kept_until(&versions, now);
            prop_assert_eq!(until.len(), versions.len());
            for (n, u) in until {
                match u {
                    None => prop_assert!(kept.contains(&n)),
                    Some(u) => {
                        prop_assert_eq!(kept.contains(&n), u > now, "version {}", n);
                        // Kept up to then, and no longer from then on.
                        if u > now {
                            prop_assert!(r.kept(&versions, u - 1).contains(&n));
                        }
                        prop_assert!(!r.kept(&versions, u.max(now)).contains(&n));
                    }
                }
            }
        }
    }
}

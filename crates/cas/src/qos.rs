//! Sharing storage reads between kinds of work, by weight.
//!
//! DDFS's nonsequential-workload paper asks that a sequential copy of one
//! image not starve the random I/O of a running VM. Reads here are of three
//! kinds ([`IoClass`]): a random reader's misses, sequential streams (their
//! demand reads and read-ahead) and background work (gc, scrub, rebuild,
//! check). At most `reads` storage reads are in flight at once; while
//! several kinds are active, each may hold at most its weighted share of
//! them (at least one), so a stream's read-ahead keeps one big read queued,
//! not eight, in front of a random reader's small one. A kind alone uses
//! every slot: the shares cost nothing when there is no contention.
//!
//! A kind stays *active* for [`LINGER`] after its last read ended, because
//! a random reader has at most one read in flight and the gaps between its
//! reads are exactly when a stream would otherwise take every slot.
//!
//! The kind is a property of the calling thread ([`with_class`]): the file
//! system's read-ahead threads, a random reader's fetch and gc each set
//! theirs, and the store's read path does not have to carry it. Work moved
//! to other threads (rayon) carries it with [`class`] and `with_class`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use branch::Clock;
use parking_lot::{Condvar, Mutex};

/// What a storage read is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoClass {
    /// A miss of a reader the file system sees reading at random.
    Random,
    /// A sequential stream's reads and its read-ahead; also the default.
    Sequential,
    /// Maintenance: gc, scrub, rebuild, check.
    Background,
}

impl IoClass {
    const ALL: [IoClass; 3] = [IoClass::Random, IoClass::Sequential, IoClass::Background];

    fn index(self) -> usize {
        self as usize
    }
}

/// How long a kind of read stays active after its last read ended.
pub const LINGER: Duration = Duration::from_millis(100);

/// The shares of storage reads (`[qos]` in cairn.toml).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QosSettings {
    /// Storage reads in flight at once, all kinds together.
    pub reads: usize,
    /// Weights of [`IoClass::Random`], `Sequential` and `Background`.
    pub random: u32,
    pub sequential: u32,
    pub background: u32,
}

impl Default for QosSettings {
    fn default() -> Self {
        QosSettings {
            reads: 8,
            random: 8,
            sequential: 2,
            background: 1,
        }
    }
}

impl QosSettings {
    fn weight(&self, c: IoClass) -> u64 {
        u64::from(match c {
            IoClass::Random => self.random,
            IoClass::Sequential => self.sequential,
            IoClass::Background => self.background,
        })
        .max(1)
    }
}

thread_local! {
    static CLASS: Cell<IoClass> = const { Cell::new(IoClass::Sequential) };
}

/// The calling thread's kind of read.
pub fn class() -> IoClass {
    CLASS.with(Cell::get)
}

/// Runs `f` with the calling thread's reads counted as `c`.
pub fn with_class<R>(c: IoClass, f: impl FnOnce() -> R) -> R {
    struct Restore(IoClass);
    impl Drop for Restore {
        fn drop(&mut self) {
            CLASS.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(CLASS.with(|cell| cell.replace(c)));
    f()
}

#[derive(Default)]
struct State {
    running: [usize; 3],
    waiting: [usize; 3],
    /// When each kind's last read ended.
    last_end: [Option<Duration>; 3],
}

/// The gate every storage read passes.
pub(crate) struct Scheduler {
    settings: QosSettings,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    freed: Condvar,
    /// Reads admitted so far, by kind.
    admitted: [AtomicU64; 3],
}

/// Storage reads admitted since the store opened, by kind (exact counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadsByClass {
    pub random: u64,
    pub sequential: u64,
    pub background: u64,
}

/// A slot held by one read; dropping it frees the slot.
pub(crate) struct Slot<'a> {
    scheduler: &'a Scheduler,
    class: IoClass,
}

impl Scheduler {
    pub(crate) fn new(settings: QosSettings, clock: Arc<dyn Clock>) -> Scheduler {
        Scheduler {
            settings,
            clock,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
            admitted: Default::default(),
        }
    }

    pub(crate) fn admitted(&self) -> ReadsByClass {
        let n = |c: IoClass| self.admitted[c.index()].load(Ordering::Relaxed);
        ReadsByClass {
            random: n(IoClass::Random),
            sequential: n(IoClass::Sequential),
            background: n(IoClass::Background),
        }
    }

    /// Waits until a read of the calling thread's kind may start.
    pub(crate) fn admit(&self) -> Slot<'_> {
        let c = class();
        let mut s = self.state.lock();
        s.waiting[c.index()] += 1;
        while !self.may_start(&s, c) {
            // A kind lingering past LINGER frees its share without any read
            // ending, so waiting is bounded by it.
            self.freed.wait_for(&mut s, LINGER);
        }
        s.waiting[c.index()] -= 1;
        s.running[c.index()] += 1;
        self.admitted[c.index()].fetch_add(1, Ordering::Relaxed);
        Slot {
            scheduler: self,
            class: c,
        }
    }

    fn active(&self, s: &State, c: IoClass, now: Duration) -> bool {
        let i = c.index();
        s.running[i] > 0
            || s.waiting[i] > 0
            || s.last_end[i].is_some_and(|t| now.saturating_sub(t) < LINGER)
    }

    /// The reads kind `c` may have in flight now.
    fn share(&self, s: &State, c: IoClass) -> usize {
        let now = self.clock.now();
        let total: u64 = IoClass::ALL
            .iter()
            .filter(|&&k| k == c || self.active(s, k, now))
            .map(|&k| self.settings.weight(k))
            .sum();
        let share = self.settings.reads as u64 * self.settings.weight(c) / total;
        (share as usize).max(1)
    }

    fn may_start(&self, s: &State, c: IoClass) -> bool {
        let running: usize = s.running.iter().sum();
        running < self.settings.reads.max(1) && s.running[c.index()] < self.share(s, c)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let sched = self.scheduler;
        let mut s = sched.state.lock();
        s.running[self.class.index()] -= 1;
        s.last_end[self.class.index()] = Some(sched.clock.now());
        drop(s);
        sched.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Time moves only when the test says.
    #[derive(Debug, Default)]
    struct Manual(AtomicU64);

    impl Clock for Manual {
        fn now(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::SeqCst))
        }
        fn sleep(&self, d: Duration) {
            self.0.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
        }
    }

    fn scheduler(clock: Arc<Manual>) -> Scheduler {
        Scheduler::new(QosSettings::default(), clock)
    }

    #[test]
    fn a_kind_alone_has_every_slot() {
        let s = scheduler(Arc::new(Manual::default()));
        let slots: Vec<Slot> = (0..8).map(|_| s.admit()).collect();
        assert_eq!(s.state.lock().running[IoClass::Sequential.index()], 8);
        drop(slots);
    }

    #[test]
    fn a_stream_is_held_to_its_share_while_a_random_reader_is_active() {
        let clock = Arc::new(Manual::default());
        let s = scheduler(clock.clone());
        drop(with_class(IoClass::Random, || s.admit()));
        // The random reader lingers: a stream gets 8 * 2 / 10 = 1 read.
        let first = s.admit();
        let state = s.state.lock();
        assert!(!s.may_start(&state, IoClass::Sequential));
        assert!(s.may_start(&state, IoClass::Random));
        drop(state);
        // Past LINGER the stream has every slot again.
        clock.sleep(LINGER);
        let state = s.state.lock();
        assert!(s.may_start(&state, IoClass::Sequential));
        drop(state);
        drop(first);
    }

    #[test]
    fn background_work_gets_at_least_one_read() {
        let s = scheduler(Arc::new(Manual::default()));
        let random: Vec<Slot> = with_class(IoClass::Random, || (0..4).map(|_| s.admit()).collect());
        let state = s.state.lock();
        assert_eq!(s.share(&state, IoClass::Background), 1);
        assert!(s.may_start(&state, IoClass::Background));
        drop(state);
        drop(random);
    }

    #[test]
    fn a_waiting_read_starts_when_a_slot_frees() {
        let s = Arc::new(scheduler(Arc::new(Manual::default())));
        let held: Vec<Slot> = (0..8).map(|_| s.admit()).collect();
        let s2 = s.clone();
        let waiter = std::thread::spawn(move || {
            let _slot = s2.admit();
        });
        while s.state.lock().waiting[IoClass::Sequential.index()] == 0 {
            std::thread::yield_now();
        }
        drop(held);
        waiter.join().unwrap();
        assert_eq!(s.state.lock().running.iter().sum::<usize>(), 0);
    }

    #[test]
    fn with_class_restores_the_previous_kind() {
        assert_eq!(class(), IoClass::Sequential);
        with_class(IoClass::Background, || {
            assert_eq!(class(), IoClass::Background);
            with_class(IoClass::Random, || assert_eq!(class(), IoClass::Random));
            assert_eq!(class(), IoClass::Background);
        });
        assert_eq!(class(), IoClass::Sequential);
    }
}

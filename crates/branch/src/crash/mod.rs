//! Power-loss simulation, for tests: storage that knows which of its
//! writes are durable and which are only written, and loses the latter when
//! the power goes off.
//!
//! `kill -9` keeps the kernel's page cache, so a test that kills a process
//! proves nothing about fsync: it would pass with every sync removed. Here
//! one [`Power`] switch is shared by every piece of storage of a stack:
//! [`CrashBranch`] (a wrapper around any [`crate::Branch`]) and
//! [`CrashFile`] (an in-memory file that redb takes as its
//! `StorageBackend`). The switch counts the operations that change storage
//! and can be told to cut the power at the N-th: that operation and every
//! later one fail, reads included, as in a dead process. A test then calls
//! `recover` on each piece, which decides (from the cut's seed) what the
//! disk kept of every write that was not yet synced, and opens a fresh
//! instance over what survived.
//!
//! What counts as synced follows each interface's promise. A file's writes
//! and length changes are durable once `sync_data` returns. A branch's
//! `put` is durable once it returns (a batch's blobs once the batch
//! returns); a `delete` is durable once a later `put` on the branch returns
//! (a local directory's unlink is not synced by itself, but the next blob's
//! sync commits it on a journaling file system).

mod blobs;
mod file;

pub use blobs::{Change, CrashBranch, Outcome};
pub use file::CrashFile;

use parking_lot::{Mutex, MutexGuard};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What the disk keeps of the writes a power cut catches unsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Every unsynced write is lost except the last one, of which a prefix
    /// survives (from nothing to all of it): a disk that wrote in order and
    /// stopped mid-write.
    Tail,
    /// Each unsynced write, independently, survives whole, as a prefix, or
    /// not at all: the page cache wrote some of them back, in any order.
    Scatter,
}

/// How much of one unsynced write survived a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Whole,
    /// The first this many bytes (fewer than the whole; for a blob,
    /// possibly none: an empty blob is left under its key).
    Prefix(usize),
    Nothing,
}

/// A power cut that happened: how writes were lost, and the seed that
/// decides which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub loss: Loss,
    pub seed: u64,
    /// The operation cut short, counted from 1; `None` for a cut between
    /// operations ([`Power::cut`]).
    pub during: Option<u64>,
}

/// The power switch shared by every piece of a simulated machine's storage.
/// Clones share it.
#[derive(Clone, Default)]
pub struct Power(Arc<Switch>);

#[derive(Default)]
struct Switch {
    meter: Mutex<Meter>,
    off: AtomicBool,
}

#[derive(Default)]
struct Meter {
    /// Operations that changed (or tried to change) storage so far.
    ops: u64,
    planned: Option<(u64, Loss, u64)>,
    cut: Option<Cut>,
}

impl std::fmt::Debug for Power {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.meter();
        f.debug_struct("Power")
            .field("ops", &m.ops)
            .field("cut", &m.cut)
            .finish()
    }
}

/// What an operation under a held [`Power`] lock may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Go ahead.
    Run,
    /// The power goes off during this operation: record what it would
    /// have written as unsynced, and fail.
    CutShort,
}

/// The switch held for the length of one storage operation, so that a
/// power cut falls between operations of other threads, never inside one.
pub(crate) struct Held<'a> {
    meter: MutexGuard<'a, Meter>,
    off: &'a AtomicBool,
}

impl Held<'_> {
    /// Counts one more operation and says whether the power cut falls on it.
    pub(crate) fn step(&mut self) -> Step {
        self.meter.ops += 1;
        match self.meter.planned {
            Some((at, loss, seed)) if at == self.meter.ops => {
                self.meter.cut = Some(Cut {
                    loss,
                    seed,
                    during: Some(at),
                });
                self.off.store(true, Ordering::SeqCst);
                Step::CutShort
            }
            _ => Step::Run,
        }
    }
}

/// The error every operation gets once the power is off.
pub(crate) fn power_off() -> io::Error {
    io::Error::other("the power is off (a simulated crash)")
}

impl Power {
    /// A switch that is on and will stay on until told otherwise.
    pub fn on() -> Power {
        Power::default()
    }

    fn meter(&self) -> MutexGuard<'_, Meter> {
        self.0.meter.lock()
    }

    /// Cuts the power during the `n`-th storage-changing operation from now
    /// (`n` >= 1): that one and every later operation fail.
    pub fn crash_after(&self, n: u64, loss: Loss, seed: u64) {
        assert!(n >= 1, "the crash falls on an operation to come");
        let mut m = self.meter();
        m.planned = Some((m.ops + n, loss, seed));
    }

    /// Cuts the power now, between operations (if it is not off already).
    pub fn cut(&self, loss: Loss, seed: u64) {
        let mut m = self.meter();
        if m.cut.is_none() {
            m.cut = Some(Cut {
                loss,
                seed,
                during: None,
            });
            self.0.off.store(true, Ordering::SeqCst);
        }
    }

    /// Storage-changing operations so far, including one cut short.
    pub fn ops(&self) -> u64 {
        self.meter().ops
    }

    pub fn is_off(&self) -> bool {
        self.0.off.load(Ordering::SeqCst)
    }

    /// The power cut, once it happened.
    pub fn cut_info(&self) -> Option<Cut> {
        self.meter().cut
    }

    /// Holds the switch for one operation; fails when the power is off.
    pub(crate) fn hold(&self) -> io::Result<Held<'_>> {
        let meter = self.meter();
        if self.is_off() {
            return Err(power_off());
        }
        Ok(Held {
            meter,
            off: &self.0.off,
        })
    }

    /// Fails when the power is off (for reads).
    pub(crate) fn check(&self) -> io::Result<()> {
        if self.is_off() {
            Err(power_off())
        } else {
            Ok(())
        }
    }

    /// The dice that decide what `storage` kept, after the power cut.
    /// Panics if the power is still on: recovering then would lose writes
    /// that a running system may still sync.
    pub(crate) fn dice(&self, storage: &str) -> (Loss, StdRng) {
        let cut = self
            .cut_info()
            .expect("recover storage only after its power was cut");
        // FNV-1a of the name: each piece of storage draws its own numbers.
        let name = storage.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (cut.loss, StdRng::seed_from_u64(cut.seed ^ name))
    }
}

/// Decides what survives of each of `lens.len()` unsynced writes of these
/// lengths, in the order they were written.
pub(crate) fn fates(loss: Loss, rng: &mut StdRng, lens: &[usize], tear: bool) -> Vec<Kept> {
    let one = |len: usize, rng: &mut StdRng| -> Kept {
        match rng.gen_range(0..if tear && len > 0 { 3 } else { 2 }) {
            0 => Kept::Nothing,
            1 => Kept::Whole,
            _ => Kept::Prefix(rng.gen_range(0..len)),
        }
    };
    match loss {
        Loss::Tail => {
            let mut out = vec![Kept::Nothing; lens.len()];
            if let Some(last) = lens.len().checked_sub(1) {
                out[last] = one(lens[last], rng);
            }
            out
        }
        Loss::Scatter => lens.iter().map(|&len| one(len, rng)).collect(),
    }
}

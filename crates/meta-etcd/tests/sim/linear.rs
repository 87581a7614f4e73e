//! A linearizability check (Wing and Gong's search, with Lowe's memo of
//! visited states, as porcupine does) of the clients' histories over a
//! small namespace: file names in a few slots (a name in a directory),
//! created, unlinked, renamed and looked up. The model's state is the set
//! of slots holding a file, one bit each. An operation whose outcome the
//! client never learnt (it failed with an engine error, or the client
//! stopped) may have taken effect or not, at any point after its call.

use std::collections::HashSet;

/// Slots the model tracks (at most 64).
pub type Slot = u8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create(Slot),
    Unlink(Slot),
    Rename(Slot, Slot),
    Lookup(Slot),
    /// Which slots hold a file (the final read after the run).
    ReadAll,
}

/// What an operation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    Ok,
    Exists,
    NotFound,
    Found,
    All(u64),
}

#[derive(Debug, Clone)]
pub struct Event {
    /// Which client (printed with a failing history).
    #[allow(dead_code)]
    pub client: usize,
    pub op: Op,
    /// `None`: the outcome is unknown.
    pub ret: Option<Ret>,
    pub call: u64,
    /// `u64::MAX` when the outcome is unknown.
    pub end: u64,
}

/// The model: the state after `op`, and what it answers.
fn step(state: u64, op: Op) -> (u64, Ret) {
    let has = |s: Slot| state & (1 << s) != 0;
    match op {
        Op::Create(s) if has(s) => (state, Ret::Exists),
        Op::Create(s) => (state | 1 << s, Ret::Ok),
        Op::Unlink(s) if has(s) => (state & !(1 << s), Ret::Ok),
        Op::Unlink(_) => (state, Ret::NotFound),
        Op::Rename(a, _) if !has(a) => (state, Ret::NotFound),
        Op::Rename(a, b) => ((state & !(1 << a)) | 1 << b, Ret::Ok),
        Op::Lookup(s) if has(s) => (state, Ret::Found),
        Op::Lookup(_) => (state, Ret::NotFound),
        Op::ReadAll => (state, Ret::All(state)),
    }
}

/// Whether some order of the events, each at a point between its call
/// and its end, gives every known answer from `initial`; if none does,
/// the longest order of events it found (to print).
pub fn check(events: &[Event], initial: u64) -> Result<(), Vec<Event>> {
    let n = events.len();
    let words = n.div_ceil(64).max(1);
    let done_all: usize = events.iter().filter(|e| e.ret.is_some()).count();
    let mut seen: HashSet<(Vec<u64>, u64)> = HashSet::new();
    // Depth-first over (linearized set, state, order so far).
    let mut stack = vec![(vec![0u64; words], initial, Vec::<usize>::new(), 0usize)];
    let mut best: Vec<usize> = Vec::new();
    while let Some((set, state, order, done)) = stack.pop() {
        if done == done_all {
            return Ok(());
        }
        if order.len() > best.len() {
            best = order.clone();
        }
        let is_in = |i: usize| set[i / 64] & (1 << (i % 64)) != 0;
        // Only an event called before every pending completed event ended
        // may go next.
        let horizon = (0..n)
            .filter(|&i| !is_in(i) && events[i].ret.is_some())
            .map(|i| events[i].end)
            .min()
            .unwrap_or(u64::MAX);
        for i in (0..n).filter(|&i| !is_in(i) && events[i].call < horizon) {
            let e = &events[i];
            let (next, ret) = step(state, e.op);
            if e.ret.is_some_and(|r| r != ret) {
                continue;
            }
            let mut set2 = set.clone();
            set2[i / 64] |= 1 << (i % 64);
            if !seen.insert((set2.clone(), next)) {
                continue;
            }
            let mut order2 = order.clone();
            order2.push(i);
            stack.push((set2, next, order2, done + usize::from(e.ret.is_some())));
        }
    }
    Err(best.into_iter().map(|i| events[i].clone()).collect())
}

#[test]
fn the_checker_tells_linearizable_from_not() {
    let ev = |client, op, ret, call, end| Event {
        client,
        op,
        ret,
        call,
        end,
    };
    // Two overlapping creates of one slot: one wins.
    let ok = [
        ev(0, Op::Create(0), Some(Ret::Ok), 0, 3),
        ev(1, Op::Create(0), Some(Ret::Exists), 1, 2),
    ];
    assert!(check(&ok, 0).is_ok());
    // Both win: not linearizable.
    let both = [
        ev(0, Op::Create(0), Some(Ret::Ok), 0, 3),
        ev(1, Op::Create(0), Some(Ret::Ok), 1, 2),
    ];
    assert!(check(&both, 0).is_err());
    // A lookup after a completed create must find it...
    let stale = [
        ev(0, Op::Create(0), Some(Ret::Ok), 0, 1),
        ev(1, Op::Lookup(0), Some(Ret::NotFound), 2, 3),
    ];
    assert!(check(&stale, 0).is_err());
    // ... unless an unlink with an unknown outcome may have run between.
    let unknown = [
        ev(0, Op::Create(0), Some(Ret::Ok), 0, 1),
        ev(2, Op::Unlink(0), None, 1, u64::MAX),
        ev(1, Op::Lookup(0), Some(Ret::NotFound), 2, 3),
    ];
    assert!(check(&unknown, 0).is_ok());
    // A rename moves the file.
    let moved = [
        ev(0, Op::Create(0), Some(Ret::Ok), 0, 1),
        ev(0, Op::Rename(0, 1), Some(Ret::Ok), 2, 3),
        ev(1, Op::ReadAll, Some(Ret::All(0b10)), 4, 5),
    ];
    assert!(check(&moved, 0).is_ok());
}

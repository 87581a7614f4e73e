//! The simulation's scheduler: a [`Gate`] every KV request of an actor
//! (a simulated client's thread) passes. It lets one actor go at a time,
//! and only once every live actor waits at it, choosing which from the
//! seed; so the actors run as coroutines in an order the seed fixes, and
//! a seed replays exactly. It also decides each request's fault.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread::JoinHandle;

use meta_etcd::sim::{Fault, Gate, Request};
use parking_lot::{Condvar, Mutex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    /// The actor this thread runs, if any (the test's own thread is none:
    /// its requests pass at once, without faults).
    static ACTOR: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Per mille of requests refused, and of requests whose reply is lost.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub refuse: u32,
    pub lose: u32,
}

struct State {
    rng: StdRng,
    faults: Faults,
    /// Actors started and not ended.
    live: usize,
    waiting: BTreeSet<usize>,
    turn: Option<usize>,
    /// Actors whose requests never fail (the coordinator, a client that
    /// stopped and revokes its registration).
    calm: BTreeSet<usize>,
    /// Requests let through so far.
    steps: u64,
}

pub struct Turnstile {
    state: Mutex<State>,
    cv: Condvar,
}

impl Turnstile {
    pub fn new(seed: u64, faults: Faults) -> Arc<Turnstile> {
        Arc::new(Turnstile {
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                faults,
                live: 0,
                waiting: BTreeSet::new(),
                turn: None,
                calm: BTreeSet::new(),
                steps: 0,
            }),
            cv: Condvar::new(),
        })
    }

    /// Starts actor `id` running `f` on its own thread. Every actor must
    /// be spawned before any of them can run (spawn them all, then none
    /// runs until the last one waits at the gate).
    pub fn spawn<T: Send + 'static>(
        self: &Arc<Self>,
        id: usize,
        calm: bool,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        {
            let mut s = self.state.lock();
            s.live += 1;
            if calm {
                s.calm.insert(id);
            }
        }
        let me = self.clone();
        std::thread::spawn(move || {
            ACTOR.with(|a| a.set(Some(id)));
            // Ends the actor even when `f` panics, so that the others do
            // not wait for it forever.
            struct End(Arc<Turnstile>);
            impl Drop for End {
                fn drop(&mut self) {
                    let mut s = self.0.state.lock();
                    s.live -= 1;
                    self.0.grant(&mut s);
                }
            }
            let _end = End(me);
            f()
        })
    }

    /// From now on the calling actor's requests never fail.
    pub fn calm_me(&self) {
        if let Some(id) = ACTOR.with(Cell::get) {
            self.state.lock().calm.insert(id);
        }
    }

    pub fn steps(&self) -> u64 {
        self.state.lock().steps
    }

    /// Gives the turn to a waiting actor once every live one waits.
    fn grant(&self, s: &mut State) {
        if s.turn.is_none() && !s.waiting.is_empty() && s.waiting.len() == s.live {
            let i = s.rng.gen_range(0..s.waiting.len());
            s.turn = s.waiting.iter().nth(i).copied();
            self.cv.notify_all();
        }
    }
}

impl Gate for Turnstile {
    fn pass(&self, _cluster: &str, _request: Request) -> Fault {
        let Some(me) = ACTOR.with(Cell::get) else {
            return Fault::Pass;
        };
        let mut s = self.state.lock();
        s.waiting.insert(me);
        self.grant(&mut s);
        while s.turn != Some(me) {
            self.cv.wait(&mut s);
        }
        s.turn = None;
        s.waiting.remove(&me);
        s.steps += 1;
        if s.calm.contains(&me) {
            return Fault::Pass;
        }
        let roll = s.rng.gen_range(0..1000);
        if roll < s.faults.refuse {
            Fault::Refuse
        } else if roll < s.faults.refuse + s.faults.lose {
            Fault::LoseReply
        } else {
            Fault::Pass
        }
    }
}

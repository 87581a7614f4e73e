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
    /// Requests let through so far: actor, cluster, kind, fault.
    trace: Vec<String>,
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
                trace: Vec::new(),
            }),
            cv: Condvar::new(),
        })
    }

    /// Holds every actor until [`Turnstile::release`]: while the test
    /// spawns them, none may run (the order would depend on timing).
    pub fn hold(&self) {
        self.state.lock().live += 1;
    }

    pub fn release(&self) {
        let mut s = self.state.lock();
        s.live -= 1;
        self.grant(&mut s);
    }

    /// Starts actor `id` running `f` on its own thread (between
    /// [`Turnstile::hold`] and [`Turnstile::release`]).
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
            let _end = End(me.clone());
            // The actor's first step waits for its turn too: nothing runs
            // outside the order the seed gives.
            drop(me.wait_turn(id));
            f()
        })
    }

    /// From now on the calling actor's requests never fail.
    pub fn calm_me(&self) {
        if let Some(id) = ACTOR.with(Cell::get) {
            self.state.lock().calm.insert(id);
        }
    }

    /// Adds a line to the trace (an actor's operation starting or
    /// ending), in the order the actors run.
    pub fn note(&self, line: String) {
        self.state.lock().trace.push(line);
    }

    /// The requests let through so far, in order.
    pub fn trace(&self) -> Vec<String> {
        self.state.lock().trace.clone()
    }

    /// Blocks until it is actor `me`'s turn (then only `me` runs).
    fn wait_turn(&self, me: usize) -> parking_lot::MutexGuard<'_, State> {
        let mut s = self.state.lock();
        s.waiting.insert(me);
        self.grant(&mut s);
        while s.turn != Some(me) {
            self.cv.wait(&mut s);
        }
        s.turn = None;
        s.waiting.remove(&me);
        s
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
    fn pass(&self, cluster: &str, request: Request) -> Fault {
        let Some(me) = ACTOR.with(Cell::get) else {
            return Fault::Pass;
        };
        let mut s = self.wait_turn(me);
        let roll = s.rng.gen_range(0..1000);
        let fault = if s.calm.contains(&me) {
            Fault::Pass
        } else if roll < s.faults.refuse {
            Fault::Refuse
        } else if roll < s.faults.refuse + s.faults.lose {
            Fault::LoseReply
        } else {
            Fault::Pass
        };
        // The cluster's name without the run's tag.
        let cluster = cluster.rsplit('-').next().unwrap_or(cluster);
        s.trace
            .push(format!("{me} {cluster} {request:?} {fault:?}"));
        fault
    }
}

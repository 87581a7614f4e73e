//! A store told of an id ledger (`Store::set_id_ledger`) asks it at every
//! reservation of container ids, once the reservation is durable: while
//! the ledger cannot be asked, a container waits (its write fails) and the
//! next asks again; once the ledger refuses (another repository with this
//! client number reserved those ids), nothing more is written, and no
//! further reservation raises the mark.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cas::{CasError, IdLedger, LedgerError, RepoKey};

use common::*;

#[derive(Default)]
struct Ledger {
    /// What the next answers are: `Some(refused)` fails.
    next: Mutex<Vec<Option<bool>>>,
    asked: Mutex<Vec<(u64, u64)>>,
    refusals: AtomicUsize,
}

impl IdLedger for Ledger {
    fn reserved(&self, from: u64, below: u64) -> Result<(), LedgerError> {
        self.asked.lock().unwrap().push((from, below));
        let answer = self.next.lock().unwrap().pop().flatten();
        match answer {
            None => Ok(()),
            Some(true) => {
                self.refusals.fetch_add(1, Ordering::SeqCst);
                Err(LedgerError::Refused("another repository".into()))
            }
            Some(false) => Err(LedgerError::Unavailable("etcd is down".into())),
        }
    }
}

fn write_one(store: &cas::Store, seed: u32) -> Result<(), CasError> {
    let mut w = store.stream();
    w.write_batch(&[text(50_000, seed)])?;
    w.flush()
}

#[test]
fn the_ledger_is_asked_per_reservation_and_a_refusal_is_final() {
    let dir = tempfile::tempdir().unwrap();
    let store = client_alone(
        dir.path(),
        &RepoKey::generate(),
        1,
        shared_branch(dir.path()),
    );
    let ledger = Arc::new(Ledger::default());
    store.set_id_ledger(ledger.clone());

    // Unavailable once: that write fails, the next reserves anew and works.
    ledger.next.lock().unwrap().push(Some(false));
    assert!(matches!(
        write_one(&store, 1),
        Err(CasError::IdsRefused(Some(LedgerError::Unavailable(_))))
    ));
    write_one(&store, 2).unwrap();
    let asked = ledger.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2);
    assert!(asked[1].0 >= asked[0].1, "a fresh batch: {asked:?}");
    let mark = store.container_id_mark().unwrap().unwrap();
    assert_eq!(mark, asked[1].1);

    // Refused: this write and every later one fail, asking no more.
    let full = {
        // Use up the batch so that the next container needs a reservation.
        let mut n = 3;
        while store.container_id_mark().unwrap() == Some(mark) {
            ledger.next.lock().unwrap().push(Some(true));
            if write_one(&store, n).is_err() {
                break;
            }
            ledger.next.lock().unwrap().clear();
            n += 1;
        }
        n
    };
    assert_eq!(ledger.refusals.load(Ordering::SeqCst), 1);
    let mark = store.container_id_mark().unwrap();
    for seed in full + 1..full + 4 {
        assert!(matches!(
            write_one(&store, seed),
            Err(CasError::IdsRefused(None))
        ));
    }
    assert_eq!(
        store.container_id_mark().unwrap(),
        mark,
        "no more reservations"
    );
    assert_eq!(ledger.refusals.load(Ordering::SeqCst), 1);
}

//! The index client over an in-process transport, against owners'
//! request handling (`PartitionCore`) without HTTP or etcd: a range given
//! to another owner is answered by the old owner while both it and the
//! client hold the old table, refused (421) once the old owner reads the
//! table, and the client then reads the table and resends; the new owner
//! reads the table at once when a request names a newer epoch.

use std::sync::{Arc, Mutex};

use chunkd::ranges::{RangeTable, RangesError};
use chunkd::{
    Fingerprint, IndexClient, IndexOp, IndexTransport, Location, OwnerFailure, PartitionCore,
};

const A: &str = "http://a:1";
const B: &str = "http://b:1";

struct Net {
    table: Mutex<RangeTable>,
    owners: Vec<PartitionCore>,
}

impl Net {
    fn table(&self) -> RangeTable {
        self.table.lock().unwrap().clone()
    }

    fn owner(&self, url: &str) -> &PartitionCore {
        self.owners
            .iter()
            .find(|o| o.me() == url)
            .expect("an owner")
    }
}

struct Transport(Arc<Net>);

impl IndexTransport for Transport {
    fn send(
        &self,
        op: IndexOp,
        parts: Vec<(String, Vec<u8>)>,
    ) -> Vec<Result<Vec<u8>, OwnerFailure>> {
        parts
            .into_iter()
            .map(|(url, body)| {
                self.0
                    .owner(&url)
                    .handle(op, &body, || Some(self.0.table()))
                    .map_err(OwnerFailure::from)
            })
            .collect()
    }

    fn read_table(&self) -> Result<RangeTable, RangesError> {
        Ok(self.0.table())
    }
}

fn fp(first: u8) -> Fingerprint {
    Fingerprint::new([first; 32])
}

fn loc(s: &str) -> Location {
    Location::new(s.as_bytes().to_vec()).unwrap()
}

#[test]
fn a_moved_range_is_refused_by_its_old_owner_once_it_reads_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let table = RangeTable::even(&[A.into(), B.into()], 1).unwrap();
    let owners: Vec<PartitionCore> = [A, B]
        .iter()
        .enumerate()
        .map(|(i, url)| {
            let core = PartitionCore::open(&dir.path().join(format!("{i}.redb")), url).unwrap();
            core.set_view(table.clone());
            core
        })
        .collect();
    let net = Arc::new(Net {
        table: Mutex::new(table),
        owners,
    });
    let old = IndexClient::with_transport(Arc::new(Transport(net.clone()))).unwrap();
    let (low, high) = (fp(0x10), fp(0x90));
    old.add(7, &[(low, loc("low")), (high, loc("high"))])
        .unwrap();

    // The high range goes to A; B has not read the table yet.
    let start = net.table().range_of(&high).start;
    net.table.lock().unwrap().assign(start, A).unwrap();
    assert_eq!(
        old.lookup(&[high]).locations,
        [Some(loc("high"))],
        "B answers a client that also holds the old table"
    );

    // A client with the new table: A reads the table at once, and starts
    // empty for the range.
    let new = IndexClient::with_transport(Arc::new(Transport(net.clone()))).unwrap();
    assert_eq!(new.lookup(&[low, high]).locations, [Some(loc("low")), None]);
    assert_eq!(net.owner(A).view(), Some(net.table()));
    assert_eq!(new.stale_refusals(), 0);

    // B reads the table: the old client is refused, reads it and resends.
    net.owner(B).set_view(net.table());
    let found = old.lookup(&[high]);
    assert_eq!(found.locations, [None]);
    assert!(found.unavailable.is_empty());
    assert_eq!(old.stale_refusals(), 1);
    assert_eq!(old.table(), net.table());

    // Forget reaches the owners the table names now: A, for both ranges.
    new.add(8, &[(high, loc("high8"))]).unwrap();
    assert_eq!(new.forget(&[7, 8]).unwrap(), 2);
    assert_eq!(new.lookup(&[low, high]).locations, [None, None]);
}

//! What `cairn chunkd ranges` does: set, show and reassign the range
//! table, each call blocking on a runtime of its own.

use std::time::Duration;

use crate::client::{fetch_view, OwnerFailure};
use crate::ranges::{RangeStore, RangeTable, RangesError};

const TIMEOUT: Duration = Duration::from_secs(5);

fn run<T>(
    etcd: &[String],
    fsid: &str,
    f: impl AsyncFnOnce(RangeStore) -> Result<T, RangesError>,
) -> Result<T, RangesError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RangesError::Etcd {
            endpoints: etcd.join(","),
            reason: format!("cannot start a runtime: {e}"),
        })?;
    rt.block_on(async {
        let store = RangeStore::connect(etcd, fsid, TIMEOUT).await?;
        f(store).await
    })
}

/// Cuts the space evenly among `owners` at epoch 1; refused if a table is
/// already set.
pub fn init_ranges(
    etcd: &[String],
    fsid: &str,
    owners: &[String],
) -> Result<RangeTable, RangesError> {
    let table = RangeTable::even(owners, 1)?;
    run(etcd, fsid, async |store| {
        store.write(&table, None).await?;
        Ok(table)
    })
}

/// The table as etcd holds it.
pub fn read_ranges(etcd: &[String], fsid: &str) -> Result<RangeTable, RangesError> {
    run(etcd, fsid, async |store| Ok(store.require().await?.0))
}

/// Gives the range starting at `start` to `owner` at a new epoch, in one
/// transaction against the table as it was read.
pub fn assign_range(
    etcd: &[String],
    fsid: &str,
    start: u64,
    owner: &str,
) -> Result<RangeTable, RangesError> {
    run(etcd, fsid, async |store| {
        let (mut table, revision) = store.require().await?;
        table.assign(start, owner)?;
        store.write(&table, Some(revision)).await?;
        Ok(table)
    })
}

/// One owner's answer to "which table do you hold?".
#[derive(Debug)]
pub struct OwnerStatus {
    pub owner: String,
    /// Its ranges as it sees them: (start, epoch) of each it owns.
    pub view: Result<Vec<(u64, u64)>, OwnerFailure>,
}

/// Asks every owner in `table` for its view.
pub fn owner_status(table: &RangeTable, token: &str) -> Vec<OwnerStatus> {
    let mut owners: Vec<&str> = table.ranges.iter().map(|r| r.owner.as_str()).collect();
    owners.sort();
    owners.dedup();
    owners
        .into_iter()
        .map(|owner| OwnerStatus {
            owner: owner.to_string(),
            view: fetch_view(owner, token, TIMEOUT).map(|t| {
                t.ranges
                    .iter()
                    .filter(|r| r.owner == owner)
                    .map(|r| (r.start, r.epoch))
                    .collect()
            }),
        })
        .collect()
}

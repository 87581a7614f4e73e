//! The chunkd fingerprint index a client repository names (`[shared_index]
//! kind = "chunkd"`, docs/cluster.md): its range table as etcd holds it,
//! and whether each owner answers. Every question is bounded by the
//! `chunkd` crate's timeouts (5 s for etcd, 5 s per owner), so doctor
//! never hangs on a dead peer.
//!
//! An owner that does not answer costs dedup, never data (clients store
//! its chunks again and read by listing the bucket): a warning, not a
//! problem. A token file that cannot be read refuses the mount: a problem.

use std::path::Path;

use chunkd::ranges::{Range, RangeTable, RangesError};
use repo::{Config, SharedIndexConfig};
use serde::{Deserialize, Serialize};

use super::{Findings, Severity};

/// The range table doctor read for the repository's chunkd index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexTable {
    /// The file system id the table is kept under.
    pub fsid: String,
    /// The etcd endpoints it was read from.
    pub etcd: Vec<String>,
    /// Every range, in order: start, end, owner and epoch.
    pub ranges: Vec<Range>,
}

/// Reads the range table and asks each owner for its view; `None` when the
/// repository names no chunkd index or the table could not be read.
pub(super) fn shared_index(
    f: &mut Findings,
    root: &Path,
    config: Option<&Config>,
) -> Option<IndexTable> {
    let index = config?.shared_index.as_ref()?;
    let etcd = index.etcd.join(",");
    let subject = Some(format!("{} on {etcd}", index.fsid));
    let table = match chunkd::read_ranges(&index.etcd, &index.fsid) {
        Ok(table) => table,
        Err(e @ RangesError::Missing { .. }) => {
            f.push(
                "shared_index",
                Severity::Warning,
                subject,
                format!("{e}: clients find other clients' chunks by listing the bucket"),
                Some(format!(
                    "cairn chunkd ranges init --etcd {etcd} --fsid {} --owner URL ... \
                     (docs/cluster.md, \"With a chunkd index\")",
                    index.fsid
                )),
            );
            return None;
        }
        Err(e) => {
            f.push(
                "shared_index",
                Severity::Warning,
                subject,
                format!(
                    "the chunkd range table cannot be read: {e}; a mount then finds other \
                     clients' chunks by listing the bucket (data is safe)"
                ),
                Some(format!(
                    "bring etcd at {etcd} back (`etcdctl --endpoints {etcd} endpoint health`), \
                     then remount the clients"
                )),
            );
            return None;
        }
    };
    let owners = owners_of(&table);
    f.ok(
        "shared_index",
        subject,
        format!(
            "file system {}: {} ranges over {} owners (etcd {etcd})",
            index.fsid,
            table.ranges.len(),
            owners.len()
        ),
    );
    ask_owners(f, root, index, &table);
    Some(IndexTable {
        fsid: index.fsid.clone(),
        etcd: index.etcd.clone(),
        ranges: table.ranges,
    })
}

/// Each owner once, in the table's order.
fn owners_of(table: &RangeTable) -> Vec<&str> {
    let mut owners: Vec<&str> = Vec::new();
    for r in &table.ranges {
        if !owners.contains(&r.owner.as_str()) {
            owners.push(&r.owner);
        }
    }
    owners
}

/// `start@epoch` of each range: how the table and an owner's view are shown.
fn held(ranges: &[(u64, u64)]) -> String {
    let all: Vec<String> = ranges
        .iter()
        .map(|(s, e)| format!("{s:016x}@{e}"))
        .collect();
    all.join(" ")
}

fn ask_owners(f: &mut Findings, root: &Path, index: &SharedIndexConfig, table: &RangeTable) {
    let path = root.join(&index.token_file);
    let token = match branch::read_token(&path) {
        Ok(token) => token,
        Err(e) => {
            f.push(
                "chunkd_token",
                Severity::Problem,
                Some(path.display().to_string()),
                format!(
                    "the chunkd token file cannot be read ({e}): a mount is refused, and the \
                     owners were not asked"
                ),
                Some(format!(
                    "copy the chunkds' --token-file to {} (mode 600)",
                    path.display()
                )),
            );
            return;
        }
    };
    let etcd = index.etcd.join(",");
    for status in chunkd::owner_status(table, &token) {
        let given: Vec<(u64, u64)> = table
            .ranges
            .iter()
            .filter(|r| r.owner == status.owner)
            .map(|r| (r.start, r.epoch))
            .collect();
        let subject = Some(status.owner.clone());
        match status.view {
            Ok(view) if view == given => f.ok(
                "chunkd_owner",
                subject,
                format!("{} answers, holds {}", status.owner, held(&view)),
            ),
            Ok(view) => f.push(
                "chunkd_owner",
                Severity::Info,
                subject,
                format!(
                    "{} answers, but holds {} where the table gives it {}: it reads the \
                     table again every --refresh seconds",
                    status.owner,
                    if view.is_empty() {
                        "nothing".into()
                    } else {
                        held(&view)
                    },
                    held(&given)
                ),
                None,
            ),
            Err(e) => {
                let starts: Vec<String> = given.iter().map(|(s, _)| format!("{s:016x}")).collect();
                f.push(
                    "chunkd_owner",
                    Severity::Warning,
                    subject,
                    format!(
                        "{} does not answer: {e}; until it does, clients miss the dedup of \
                         its ranges and store those chunks again (data is safe)",
                        status.owner
                    ),
                    Some(format!(
                        "restart its `cairn chunkd ... --etcd {etcd} --fsid {fsid}`, or give \
                         its ranges to another owner: `cairn chunkd ranges assign --etcd \
                         {etcd} --fsid {fsid} --start START --owner URL` for START in {}",
                        starts.join(" "),
                        fsid = index.fsid
                    )),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64, owner: &str) -> Range {
        Range {
            start,
            end,
            owner: owner.into(),
            epoch: 1,
        }
    }

    #[test]
    fn each_owner_is_named_once_in_table_order() {
        let table = RangeTable {
            ranges: vec![
                range(0, 9, "http://b:1"),
                range(10, 19, "http://a:1"),
                range(20, u64::MAX, "http://b:1"),
            ],
        };
        assert_eq!(owners_of(&table), ["http://b:1", "http://a:1"]);
        assert_eq!(
            held(&[(0, 1), (0x8000_0000_0000_0000, 3)]),
            "0000000000000000@1 8000000000000000@3"
        );
    }

    #[test]
    fn an_unreachable_etcd_is_a_warning_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        // A port nothing listens on: refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let text = format!(
            "[shared_index]\nkind = \"chunkd\"\netcd = [\"http://127.0.0.1:{port}\"]\n\
             fsid = \"home\"\ntoken_file = \"t\"\n"
        );
        let config = Config::parse(&text).unwrap();
        let mut f = Findings(Vec::new());
        assert_eq!(shared_index(&mut f, dir.path(), Some(&config)), None);
        assert_eq!(f.0.len(), 1, "{:#?}", f.0);
        assert_eq!(f.0[0].check, "shared_index");
        assert_eq!(f.0[0].severity, Severity::Warning);
        assert!(f.0[0].message.contains(&port.to_string()), "{:#?}", f.0);
        assert!(f.0[0].fix.as_deref().unwrap().contains("etcd"));
    }
}

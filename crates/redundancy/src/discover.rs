//! Rebuilding the container map from the branches alone.
//!
//! Every branch is listed; each blob named like a shard (`<key>.s<i>`) has
//! its header read and checked. Shards agreeing on a layout make up a
//! container. A shard-named blob whose header is bad still counts as that
//! shard's location, so reads treat it as corrupt and scrub rewrites it.

use std::collections::BTreeMap;
use std::sync::Arc;

use branch::BlobKey;

use crate::map::{parse_shard_key, Entry};
use crate::members::{BranchId, FaultKind};
use crate::parallel::fan_out;
use crate::shard::{self, key_tag, Layout, MAX_HEADER};
use crate::Redundant;

/// What [`Redundant::discover`] found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Discovery {
    pub containers: usize,
    /// Shard blobs found, good or bad.
    pub shards: usize,
    /// Readable containers that lack an intact copy of some shard: they
    /// have less redundancy than their policy until scrubbed.
    pub incomplete: Vec<BlobKey>,
    /// Containers with fewer intact shards than a read needs, or whose
    /// shards all have bad headers (those are not in the map), with why.
    pub unreadable: Vec<(BlobKey, String)>,
    /// Shard blobs whose header failed its checks, with why.
    pub bad_shards: Vec<(BranchId, BlobKey, String)>,
    /// Branches that could not be listed, with the error: their shards are
    /// unknown until the next discovery.
    pub unlisted: Vec<(BranchId, String)>,
    /// Blobs whose names are not shard names; left alone.
    pub ignored: usize,
}

/// A shard blob and what its header said.
type Sighting<'a> = (&'a Found, Result<Layout, HeaderProblem>);

/// Why a shard blob's header was not taken.
#[derive(Debug, thiserror::Error)]
enum HeaderProblem {
    #[error(transparent)]
    Unreadable(#[from] branch::BranchError),
    #[error(transparent)]
    Corrupt(#[from] shard::Corrupt),
    #[error("the header belongs to another container")]
    OtherContainer,
    #[error("the header says it is shard {0}")]
    OtherIndex(u16),
    #[error("blob is {size} bytes, its header describes {described}")]
    Length { size: u64, described: u64 },
}

struct Found {
    branch: BranchId,
    blob: BlobKey,
    key: BlobKey,
    index: u16,
}

impl Redundant {
    /// Lists every branch and replaces the in-memory map with what the
    /// shards' headers say. Reads never list; call this when opening, or
    /// after branches were changed behind this layer's back, with no put
    /// or delete in flight (the map it builds replaces theirs).
    /// A layer in the plain layout has no map: it finds nothing.
    pub fn discover(&self) -> Discovery {
        if self.plain.is_some() {
            return Discovery::default();
        }
        let mut report = Discovery::default();
        let ids = self.all_ids();
        let listings = fan_out(&ids, |&id| self.member(id).branch.list(""));
        let mut found = Vec::new();
        for (&id, listing) in ids.iter().zip(listings) {
            match listing {
                Ok(blobs) => {
                    for blob in blobs {
                        match parse_shard_key(&blob) {
                            Some((key, index)) => found.push(Found {
                                branch: id,
                                blob,
                                key,
                                index,
                            }),
                            None => report.ignored += 1,
                        }
                    }
                }
                Err(err) => {
                    let detail = format!("listing failed: {err}");
                    self.member(id).fault(FaultKind::Unavailable, &detail);
                    report.unlisted.push((id, err.to_string()));
                }
            }
        }
        report.shards = found.len();
        let headers = fan_out(&found, |f| self.read_header(f));
        let mut by_key: BTreeMap<&BlobKey, Vec<Sighting>> = BTreeMap::new();
        for (f, header) in found.iter().zip(headers) {
            by_key.entry(&f.key).or_default().push((f, header));
        }
        let mut map = BTreeMap::new();
        for (key, shards) in by_key {
            if let Some(entry) = assemble(key, &shards, &mut report) {
                map.insert(key.clone(), Arc::new(entry));
            }
        }
        report.containers = map.len();
        self.map.replace_all(map);
        report
    }

    /// Adds to the map the blobs under `prefix` it does not hold yet and
    /// `wanted` accepts: another writer's (a client sharing the branches),
    /// whose shards this layer did not write. Entries already in the map
    /// are left as they are, so puts and deletes may be in flight; a blob
    /// whose shards are not all readable yet (still being written) is
    /// left for the next call, and so is a branch that cannot be listed
    /// (marked unavailable, as [`Redundant::discover`] does). Returns how
    /// many blobs it added.
    pub fn discover_new(&self, prefix: &str, wanted: &dyn Fn(&BlobKey) -> bool) -> usize {
        if self.plain.is_some() {
            return 0;
        }
        let ids = self.all_ids();
        let listings = fan_out(&ids, |&id| self.member(id).branch.list(prefix));
        let mut found = Vec::new();
        for (&id, listing) in ids.iter().zip(listings) {
            let listing = match listing {
                Ok(l) => l,
                Err(err) => {
                    let detail = format!("listing failed: {err}");
                    self.member(id).fault(FaultKind::Unavailable, &detail);
                    continue;
                }
            };
            for blob in listing {
                if let Some((key, index)) = parse_shard_key(&blob) {
                    if !self.map.contains(&key) && wanted(&key) {
                        found.push(Found {
                            branch: id,
                            blob,
                            key,
                            index,
                        });
                    }
                }
            }
        }
        let headers = fan_out(&found, |f| self.read_header(f));
        let mut by_key: BTreeMap<&BlobKey, Vec<Sighting>> = BTreeMap::new();
        for (f, header) in found.iter().zip(headers) {
            by_key.entry(&f.key).or_default().push((f, header));
        }
        let mut added = 0;
        for (key, shards) in by_key {
            let mut report = Discovery::default();
            let entry = assemble(key, &shards, &mut report);
            let whole = report.unreadable.is_empty() && report.bad_shards.is_empty();
            if let (Some(entry), true) = (entry, whole) {
                self.map.insert(key.clone(), entry);
                added += 1;
            }
        }
        added
    }

    fn read_header(&self, f: &Found) -> Result<Layout, HeaderProblem> {
        let branch = self.member(f.branch).branch.clone();
        let size = branch.size(&f.blob)?;
        let head = size.min(MAX_HEADER as u64) as usize;
        let bytes = branch.read_range(&f.blob, 0, head)?;
        let header = shard::decode_header(&bytes)?;
        if header.layout.key_tag != key_tag(f.key.as_str()) {
            return Err(HeaderProblem::OtherContainer);
        }
        if header.index != f.index {
            return Err(HeaderProblem::OtherIndex(header.index));
        }
        if size != header.layout.blob_len() {
            return Err(HeaderProblem::Length {
                size,
                described: header.layout.blob_len(),
            });
        }
        Ok(header.layout)
    }
}

/// One container from its shards: the layout most of them agree on, and
/// every shard's place (bad ones included).
fn assemble(key: &BlobKey, shards: &[Sighting], report: &mut Discovery) -> Option<Entry> {
    let agreeing = |l: &Layout| {
        shards
            .iter()
            .filter(|(_, h)| matches!(h, Ok(x) if x == l))
            .count()
    };
    let layout = shards
        .iter()
        .filter_map(|(_, h)| h.as_ref().ok())
        .max_by_key(|l| agreeing(l))
        .cloned();
    let mut bad = |f: &Found, why: String| report.bad_shards.push((f.branch, f.blob.clone(), why));
    let Some(layout) = layout else {
        for (f, h) in shards {
            let why = h.as_ref().expect_err("no header verified");
            bad(f, why.to_string());
        }
        let why = "no shard has a valid header".to_string();
        report.unreadable.push((key.clone(), why));
        return None;
    };
    let mut entry = Entry {
        locations: vec![Vec::new(); usize::from(layout.shards())],
        layout,
    };
    let mut intact = vec![false; entry.locations.len()];
    for (f, header) in shards {
        match header {
            Ok(l) if *l == entry.layout => intact[usize::from(f.index)] = true,
            Ok(l) => bad(
                f,
                format!(
                    "its layout ({} over {} bytes) disagrees with the container's other shards",
                    l.policy, l.container_len
                ),
            ),
            Err(why) => bad(f, why.to_string()),
        }
        if let Some(place) = entry.locations.get_mut(usize::from(f.index)) {
            place.push(f.branch);
        }
    }
    let good = intact.iter().filter(|&&ok| ok).count();
    let needed = usize::from(entry.layout.k());
    if good < needed {
        let why = format!(
            "{good} intact shards, {} needs {needed}",
            entry.layout.policy
        );
        report.unreadable.push((key.clone(), why));
    } else if good < intact.len() {
        report.incomplete.push(key.clone());
    }
    Some(entry)
}

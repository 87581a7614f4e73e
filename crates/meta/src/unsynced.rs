//! What the content records set since the last `sync` replaced, so that a
//! record pointing at data that cannot become durable (a container waiting
//! for space) can be put back before the metadata is synced: unlinks,
//! renames and truncates then become durable while a full disk holds data
//! back, and a file never points at chunks that were never stored.
//!
//! A `set_content` drops the file's intent log, since the new content holds
//! what the log said. Until the sync that makes the new content durable,
//! those records stay in the table and are only hidden from readers: a
//! revert shows them again (they belong to the durable content), and the
//! sync deletes them in the transaction it makes durable.

use std::collections::HashMap;

use crate::{Content, InodeId, Timestamp};

/// A file's record as of the last sync: what a revert puts back.
#[derive(Debug, Clone)]
pub(crate) struct Before {
    pub content: Content,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    /// The last intent record of the durable content (`None`: it had none).
    pub log_upto: Option<u64>,
}

/// The content records changed since the last sync.
#[derive(Debug, Default)]
pub(crate) struct Unsynced {
    /// Each file's record before its first `set_content` since the sync.
    before: HashMap<u64, Before>,
    /// Intent records a `set_content` dropped (up to this sequence number),
    /// hidden until the sync deletes them.
    dropped_logs: HashMap<u64, u64>,
}

impl Unsynced {
    /// Notes a `set_content` of `ino`, whose record was `before` and whose
    /// last intent record is `last_log`.
    pub(crate) fn content_set(&mut self, ino: InodeId, before: Before, last_log: Option<u64>) {
        self.before.entry(ino.0).or_insert(before);
        if let Some(last) = last_log {
            self.dropped_logs.insert(ino.0, last);
        }
    }

    /// Whether intent record `seq` of `ino` was dropped by a `set_content`.
    pub(crate) fn hides(&self, ino: u64, seq: u64) -> bool {
        self.dropped_logs.get(&ino).is_some_and(|&upto| seq <= upto)
    }

    /// Takes what a revert of `ino` needs; `None` when its content was not
    /// set since the sync.
    pub(crate) fn take(&mut self, ino: InodeId) -> Option<Before> {
        self.dropped_logs.remove(&ino.0);
        self.before.remove(&ino.0)
    }

    /// Forgets `ino` (deleted, its log gone with it).
    pub(crate) fn forget(&mut self, ino: InodeId) {
        self.dropped_logs.remove(&ino.0);
        self.before.remove(&ino.0);
    }

    pub(crate) fn files(&self) -> Vec<InodeId> {
        let mut out: Vec<InodeId> = self.before.keys().map(|&i| InodeId(i)).collect();
        out.sort();
        out
    }

    /// The intent records a sync deletes: `(ino, last seq)`.
    pub(crate) fn dropped_logs(&self) -> Vec<(u64, u64)> {
        self.dropped_logs.iter().map(|(&i, &s)| (i, s)).collect()
    }

    /// Everything is durable (a sync), or everything since the sync is
    /// lost (the engine was reopened after an I/O error).
    pub(crate) fn clear(&mut self) {
        self.before.clear();
        self.dropped_logs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn before(size: u64) -> Before {
        Before {
            content: Content::Empty,
            size,
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            log_upto: None,
        }
    }

    #[test]
    fn the_first_record_since_the_sync_is_kept() {
        let mut u = Unsynced::default();
        u.content_set(InodeId(5), before(1), None);
        u.content_set(InodeId(5), before(2), Some(3));
        assert!(u.hides(5, 3) && !u.hides(5, 4) && !u.hides(6, 0));
        assert_eq!(u.files(), vec![InodeId(5)]);
        assert_eq!(u.take(InodeId(5)).unwrap().size, 1);
        assert!(!u.hides(5, 3));
        assert!(u.take(InodeId(5)).is_none());
    }
}

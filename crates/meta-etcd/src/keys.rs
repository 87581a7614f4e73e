//! The keys of one file system in etcd (the layout is in the crate doc).
//! Numbers are 8-byte big-endian, so keys sort in number order and one
//! directory's entries (or one inode's xattrs) are one contiguous range.

use meta::InodeId;

/// The key builder of one file system: every key starts with `/<fsid>/`.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: Vec<u8>,
}

impl Keys {
    pub(crate) fn new(fsid: &str) -> Self {
        Keys {
            prefix: format!("/{fsid}/").into_bytes(),
        }
    }

    fn key(&self, tag: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(tag);
        for p in parts {
            k.extend_from_slice(p);
        }
        k
    }

    pub(crate) fn inode(&self, ino: InodeId) -> Vec<u8> {
        self.key(b"i/", &[&ino.0.to_be_bytes()])
    }

    /// Where every inode record is: `i/`.
    pub(crate) fn inodes(&self) -> Vec<u8> {
        self.key(b"i/", &[])
    }

    pub(crate) fn entry(&self, parent: InodeId, name: &[u8]) -> Vec<u8> {
        self.key(b"d/", &[&parent.0.to_be_bytes(), b"/", name])
    }

    /// The prefix of `dir`'s entries: `d/<dir>/`.
    pub(crate) fn entries(&self, dir: InodeId) -> Vec<u8> {
        self.key(b"d/", &[&dir.0.to_be_bytes(), b"/"])
    }

    pub(crate) fn xattr(&self, ino: InodeId, name: &[u8]) -> Vec<u8> {
        self.key(b"x/", &[&ino.0.to_be_bytes(), b"/", name])
    }

    /// The prefix of `ino`'s xattrs: `x/<ino>/`.
    pub(crate) fn xattrs(&self, ino: InodeId) -> Vec<u8> {
        self.key(b"x/", &[&ino.0.to_be_bytes(), b"/"])
    }

    /// The orphan mark client `client` keeps on `ino`: `o/<ino>/<client>`.
    pub(crate) fn orphan(&self, ino: InodeId, client: u64) -> Vec<u8> {
        self.key(b"o/", &[&ino.0.to_be_bytes(), b"/", &client.to_be_bytes()])
    }

    /// The prefix of every client's orphan mark on `ino`: `o/<ino>/`.
    pub(crate) fn orphan_marks(&self, ino: InodeId) -> Vec<u8> {
        self.key(b"o/", &[&ino.0.to_be_bytes(), b"/"])
    }

    /// The inode and client of an `o/<ino>/<client>` key.
    pub(crate) fn orphan_of(&self, key: &[u8]) -> Option<(InodeId, u64)> {
        let rest = key.get(self.prefix.len() + 2..)?;
        let (ino, client) = (rest.get(..8)?, rest.get(9..)?);
        Some((
            InodeId(u64::from_be_bytes(ino.try_into().ok()?)),
            u64::from_be_bytes(client.try_into().ok()?),
        ))
    }

    /// A client's registration (`c/<client>`), under the client's lease:
    /// gone once the client closed or stopped renewing it.
    pub(crate) fn client(&self, client: u64) -> Vec<u8> {
        self.key(b"c/", &[&client.to_be_bytes()])
    }

    /// The collection across clients running now (`g`), if any.
    pub(crate) fn collecting(&self) -> Vec<u8> {
        self.key(b"g", &[])
    }

    /// A client's answer to the running collection's phase (`ga/<client>`).
    pub(crate) fn gc_answer(&self, client: u64) -> Vec<u8> {
        self.key(b"ga/", &[&client.to_be_bytes()])
    }

    pub(crate) fn gc_answers(&self) -> Vec<u8> {
        self.key(b"ga/", &[])
    }

    /// The highest container-id mark a repository of this client number
    /// recorded (`cm/<client>`: the mark, then the registration of the
    /// engine that recorded it, 8 bytes big-endian each).
    pub(crate) fn id_mark(&self, client: u64) -> Vec<u8> {
        self.key(b"cm/", &[&client.to_be_bytes()])
    }

    /// A client's mounted mark (`u/<client>`, no lease: a crash leaves it).
    pub(crate) fn mounted(&self, client: u64) -> Vec<u8> {
        self.key(b"u/", &[&client.to_be_bytes()])
    }

    pub(crate) fn mounteds(&self) -> Vec<u8> {
        self.key(b"u/", &[])
    }

    /// The client number at the end of a `ga/` or `u/` key.
    pub(crate) fn client_at_end(key: &[u8]) -> Option<u64> {
        let n = key.get(key.len().checked_sub(8)?..)?;
        Some(u64::from_be_bytes(n.try_into().ok()?))
    }

    /// The mark of a directory inode (`k/<ino>`), counted by `counts`.
    pub(crate) fn dir_mark(&self, ino: InodeId) -> Vec<u8> {
        self.key(b"k/", &[&ino.0.to_be_bytes()])
    }

    /// The first inode number no client has reserved yet.
    pub(crate) fn next_ino(&self) -> Vec<u8> {
        self.key(b"n", &[])
    }

    /// The result record of operation `seq` of client `client`.
    pub(crate) fn op(&self, client: u64, seq: u64) -> Vec<u8> {
        self.key(b"r/", &[&client.to_be_bytes(), b"/", &seq.to_be_bytes()])
    }

    /// The shard whose fence is `e/<shard>` (in each data cluster).
    pub(crate) fn fence(&self, shard: u32) -> Vec<u8> {
        self.key(b"e/", &[&shard.to_be_bytes()])
    }

    /// Every fence: `e/`.
    pub(crate) fn fences(&self) -> Vec<u8> {
        self.key(b"e/", &[])
    }

    /// The shard of an `e/<shard>` key.
    pub(crate) fn shard_of_fence(&self, key: &[u8]) -> Option<u32> {
        let n = key.get(self.prefix.len() + 2..)?;
        Some(u32::from_be_bytes(n.try_into().ok()?))
    }

    /// The shard map (control cluster).
    pub(crate) fn map(&self) -> Vec<u8> {
        self.key(b"m", &[])
    }

    /// An intent of an operation across clusters (control cluster).
    pub(crate) fn intent(&self, id: u64) -> Vec<u8> {
        self.key(b"t/", &[&id.to_be_bytes()])
    }

    pub(crate) fn intents(&self) -> Vec<u8> {
        self.key(b"t/", &[])
    }

    /// The coordinator's leader record (control cluster), under the
    /// leader's lease.
    pub(crate) fn leader(&self) -> Vec<u8> {
        self.key(b"coord/leader", &[])
    }

    /// The shard of a key that holds an inode number (`i/`, `d/`, `x/`,
    /// `o/`, `k/`): the number's top bits. `None` for other keys.
    pub(crate) fn shard_of_key(&self, key: &[u8]) -> Option<u32> {
        let tag = key.get(self.prefix.len()..self.prefix.len() + 2)?;
        if !matches!(tag, b"i/" | b"d/" | b"x/" | b"o/" | b"k/") {
            return None;
        }
        let n = key.get(self.prefix.len() + 2..self.prefix.len() + 10)?;
        Some(crate::shard::shard_of(InodeId(u64::from_be_bytes(
            n.try_into().ok()?,
        ))))
    }

    /// The keys of shards `[lo, hi)` under `tag` (`i/`, `d/`, ...): one
    /// range, as every such key starts with a number carrying its shard.
    pub(crate) fn shard_range(&self, tag: &[u8; 2], lo: u32, hi: u32) -> (Vec<u8>, Vec<u8>) {
        let at = |s: u32| (u64::from(s) << crate::shard::SHARD_SHIFT).to_be_bytes();
        let start = self.key(tag, &[&at(lo)]);
        let end = if hi >= crate::shard::MAX_SHARDS {
            prefix_end(&self.key(tag, &[]))
        } else {
            self.key(tag, &[&at(hi)])
        };
        (start, end)
    }

    /// Whether `key` is an inode record (`i/<ino>`).
    pub(crate) fn is_inode(&self, key: &[u8]) -> bool {
        key.get(self.prefix.len()..self.prefix.len() + 2) == Some(b"i/")
            && key.starts_with(&self.prefix)
    }

    /// The number in an `i/` or `k/` key.
    pub(crate) fn number_of(&self, key: &[u8]) -> Option<InodeId> {
        let n = key.get(self.prefix.len() + 2..)?;
        Some(InodeId(u64::from_be_bytes(n.try_into().ok()?)))
    }

    /// The name in a `d/<n>/` or `x/<n>/` key.
    pub(crate) fn name_of<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.get(self.prefix.len() + 2 + 8 + 1..)
    }
}

/// The first key after every key starting with a prefix (etcd's range end
/// of a prefix): the model's, so the engine and its model agree.
pub(crate) use etcd_model::prefix_end;

/// The first key after `key` itself.
pub(crate) fn key_after(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_directory_s_entries_are_one_range_in_name_order() {
        let k = Keys::new("fs");
        let dir = InodeId(0x100);
        let (lo, hi) = (k.entries(dir), prefix_end(&k.entries(dir)));
        for name in [&b"a"[..], b"zz", &[0xff; 255]] {
            let e = k.entry(dir, name);
            assert!(e >= lo && e < hi);
            assert_eq!(k.name_of(&e), Some(name));
        }
        for other in [InodeId(0xff), InodeId(0x101), InodeId(0x1_0000_0000)] {
            let e = k.entry(other, b"a");
            assert!(e < lo || e >= hi, "{other:?}");
        }
        assert!(k.entry(dir, b"a") < k.entry(dir, b"ab"));
        assert!(k.entry(dir, b"ab") < k.entry(dir, b"b"));
        assert_eq!(k.number_of(&k.inode(InodeId(7))), Some(InodeId(7)));
        let mark = k.orphan(InodeId(9), 77);
        assert!(mark.starts_with(&k.orphan_marks(InodeId(9))));
        assert_eq!(k.orphan_of(&mark), Some((InodeId(9), 77)));
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(&[1, 0xff]), [2]);
    }

    #[test]
    fn keys_route_by_the_shard_their_number_carries() {
        let k = Keys::new("fs");
        let ino = crate::shard::ino_in(3, 99);
        for key in [
            k.inode(ino),
            k.entry(ino, b"n"),
            k.xattr(ino, b"user.a"),
            k.orphan(ino, 5),
            k.dir_mark(ino),
        ] {
            assert_eq!(k.shard_of_key(&key), Some(3));
        }
        assert_eq!(k.shard_of_key(&k.next_ino()), None);
        assert_eq!(k.shard_of_key(&k.fence(3)), None);
        assert_eq!(k.shard_of_fence(&k.fence(70_000)), Some(70_000));
        assert!(k.fence(3).starts_with(&k.fences()));
        let (lo, hi) = k.shard_range(b"i/", 3, 4);
        assert!(k.inode(ino) >= lo && k.inode(ino) < hi);
        assert!(k.inode(crate::shard::ino_in(4, 0)) >= hi);
        let (_, end) = k.shard_range(b"d/", 0, crate::shard::MAX_SHARDS);
        assert!(k.entry(crate::shard::ino_in(0xffff, u64::MAX >> 16), &[0xff; 8]) < end);
    }

    #[test]
    fn file_systems_do_not_share_keys() {
        let (a, b) = (Keys::new("a"), Keys::new("ab"));
        let ino = InodeId(1);
        assert!(!b.inode(ino).starts_with(&a.inodes()));
        assert!(!a.inode(ino).starts_with(&b.inodes()));
    }
}

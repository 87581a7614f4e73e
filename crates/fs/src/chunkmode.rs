//! How a file's changed bytes are cut into chunks: content-defined (the
//! default, best for files written front to back and edited by insertion)
//! or fixed, block-aligned (for files overwritten in place: VM images,
//! databases), where an aligned overwrite replaces exactly the blocks it
//! covers and nothing around them is read or re-cut.
//!
//! A file's mode is its `user.cairn.chunking` xattr (`cdc` or `fixed:16K`),
//! inherited by files created in a directory that has one; else the first
//! matching `[[chunking]]` rule of `cairn.toml`; else content-defined until
//! a detector records `fixed` in the xattr: the access-pattern detector
//! ([`crate::pattern`]) seeing a large file written at random, or the
//! overwrite judge ([`crate::coverage`]) seeing overwrites of a file (1 MiB
//! or more) re-store much more than they wrote, in whatever order the
//! kernel handed the pages over.

use std::fmt;
use std::str::FromStr;

use meta::{Inode, InodeId, MetaError, XattrFlags};

use crate::file::FileState;
use crate::pattern::Access;
use crate::rules::FileFacts;
use crate::{now, FsError, Inner, Result};

/// The xattr that sets a file's (or a directory's new files') chunking.
pub const CHUNKING_XATTR: &[u8] = b"user.cairn.chunking";

/// The smallest and largest fixed block size.
pub const BLOCK_MIN: u64 = 4 << 10;
pub const BLOCK_MAX: u64 = 1 << 20;

/// The block size a file switched by the detector gets (measured: see
/// `docs/file-system.md`, "Chunking modes").
pub const BLOCK_DEFAULT: BlockSize = BlockSize(4 << 10);

/// Files smaller than this are never switched by the detector: re-cutting
/// a small file costs little, and its content-defined chunks dedup better.
pub const AUTO_FIXED_MIN: u64 = 16 << 20;

/// A fixed chunking block size: a power of two in
/// [`BLOCK_MIN`]..=[`BLOCK_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockSize(u64);

impl BlockSize {
    pub fn new(bytes: u64) -> Result<BlockSize, ChunkingError> {
        if bytes.is_power_of_two() && (BLOCK_MIN..=BLOCK_MAX).contains(&bytes) {
            Ok(BlockSize(bytes))
        } else {
            Err(ChunkingError::BlockSize(bytes))
        }
    }

    pub fn get(self) -> u64 {
        self.0
    }

    /// The block boundary at or before `offset`.
    pub fn floor(self, offset: u64) -> u64 {
        offset & !(self.0 - 1)
    }

    /// The block boundary at or after `offset`.
    pub fn ceil(self, offset: u64) -> u64 {
        self.floor(offset.saturating_add(self.0 - 1))
    }
}

/// A file's chunking mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Chunking {
    #[default]
    ContentDefined,
    Fixed(BlockSize),
}

impl Chunking {
    pub fn block(self) -> Option<BlockSize> {
        match self {
            Chunking::ContentDefined => None,
            Chunking::Fixed(b) => Some(b),
        }
    }
}

/// Why a chunking value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkingError {
    #[error("chunking must be `cdc` or `fixed:SIZE` (e.g. `fixed:16K`), not {0:?}")]
    Syntax(String),
    #[error("a fixed block size must be a power of two from 4K to 1M, not {0} bytes")]
    BlockSize(u64),
}

impl FromStr for Chunking {
    type Err = ChunkingError;

    /// `cdc`, or `fixed:SIZE` with SIZE in bytes or with a `K`/`M` suffix
    /// (`KiB`/`MiB` also); case and surrounding blanks are ignored.
    fn from_str(s: &str) -> Result<Chunking, ChunkingError> {
        let text = s.trim().to_ascii_lowercase();
        let syntax = || ChunkingError::Syntax(s.to_owned());
        if text == "cdc" {
            return Ok(Chunking::ContentDefined);
        }
        let size = text.strip_prefix("fixed:").ok_or_else(syntax)?.trim();
        let (digits, unit) = match size.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => size.split_at(i),
            None => (size, ""),
        };
        let scale: u64 = match unit.trim() {
            "" | "b" => 1,
            "k" | "kib" | "kb" => 1 << 10,
            "m" | "mib" | "mb" => 1 << 20,
            _ => return Err(syntax()),
        };
        let n: u64 = digits.parse().map_err(|_| syntax())?;
        let bytes = n.checked_mul(scale).ok_or_else(syntax)?;
        Ok(Chunking::Fixed(BlockSize::new(bytes)?))
    }
}

impl fmt::Display for Chunking {
    /// The xattr's form, which [`Chunking::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Chunking::ContentDefined => f.write_str("cdc"),
            Chunking::Fixed(b) if b.0 % (1 << 20) == 0 => write!(f, "fixed:{}M", b.0 >> 20),
            Chunking::Fixed(b) => write!(f, "fixed:{}K", b.0 >> 10),
        }
    }
}

impl Inner {
    /// Looks up the chunking mode of a file whose state does not know it
    /// yet (with the size it has now, for rules by size).
    pub(crate) fn know_chunking(&self, f: &mut FileState) -> Result<()> {
        if f.chunking_known {
            return Ok(());
        }
        let mut inode = self.meta.get(f.ino)?;
        inode.attr.size = f.size;
        (f.chunking, f.chunking_auto) = self.chunking_of(&inode)?;
        f.chunking_known = true;
        Ok(())
    }

    /// A file's chunking mode, and whether nobody chose it (the detector
    /// may then switch it): its xattr, else the first matching rule, else
    /// content-defined.
    pub(crate) fn chunking_of(&self, inode: &Inode) -> Result<(Chunking, bool)> {
        match self.meta.get_xattr(inode.id, CHUNKING_XATTR) {
            Ok(value) => match std::str::from_utf8(&value)
                .map_err(|_| ChunkingError::Syntax(String::from_utf8_lossy(&value).into()))
                .and_then(str::parse::<Chunking>)
            {
                Ok(c) => return Ok((c, false)),
                // Set by hand in a snapshot restored, or by a newer cairn.
                Err(e) => tracing::warn!(
                    file = %self.describe(inode.id),
                    error = %e,
                    "ignoring a chunking xattr cairn cannot read"
                ),
            },
            Err(MetaError::NoXattr) => {}
            Err(e) => return Err(e.into()),
        }
        let path = if self.rules.read().chunking_paths() {
            self.path_of(inode.id)?
        } else {
            None
        };
        let facts = FileFacts {
            path: path.as_deref(),
            size: inode.attr.size,
            uid: inode.attr.uid,
        };
        Ok(match self.rules.read().chunking(&facts) {
            Some((_, c)) => (c, false),
            None => (Chunking::ContentDefined, true),
        })
    }

    /// Sets `user.cairn.chunking` after checking it; an open file changes
    /// mode at once (its blocks so far stay as they were cut).
    pub(crate) fn set_chunking(&self, ino: InodeId, value: &[u8], flags: XattrFlags) -> Result<()> {
        let mode = std::str::from_utf8(value)
            .map_err(|_| ChunkingError::Syntax(String::from_utf8_lossy(value).into()))
            .and_then(str::parse::<Chunking>)
            .inspect_err(|e| {
                tracing::warn!(file = %self.describe(ino), value = %String::from_utf8_lossy(value), error = %e, "refused a chunking xattr");
            })
            .map_err(FsError::BadChunking)?;
        self.meta
            .set_xattr(ino, CHUNKING_XATTR, value, flags, now())?;
        let open = self.files.lock().get(&ino).cloned();
        if let Some(state) = open {
            let mut f = state.lock();
            f.chunking = mode;
            f.chunking_auto = false;
            f.chunking_known = true;
        }
        Ok(())
    }

    /// Feeds a write to the access-pattern detector; a file large enough
    /// and written at random switches to fixed chunking, recorded in its
    /// xattr so that it stays fixed after a remount.
    pub(crate) fn watch_write(&self, f: &mut FileState, offset: u64, len: u64) {
        let access = self.patterns.lock().observe(f.ino, offset, len);
        if access != Some(Access::Random) || f.size < AUTO_FIXED_MIN {
            return;
        }
        f.chunking = Chunking::Fixed(BLOCK_DEFAULT);
        f.chunking_auto = false;
        self.patterns.lock().forget(f.ino);
        self.record_switch(f, "written at random");
    }

    /// Records in the file's xattr a switch to fixed chunking made by a
    /// detector (`why` says which), so that it stays fixed after a remount.
    pub(crate) fn record_switch(&self, f: &mut FileState, why: &str) {
        f.switched = false;
        let value = f.chunking.to_string();
        match self.meta.set_xattr(
            f.ino,
            CHUNKING_XATTR,
            value.as_bytes(),
            XattrFlags::Either,
            now(),
        ) {
            Ok(()) => {
                tracing::info!(file = %self.describe(f.ino), chunking = %value, "{why}: switched to fixed-size chunks")
            }
            // Fixed for as long as the file stays open; detected again
            // after that.
            Err(e) => {
                tracing::warn!(file = %self.describe(f.ino), error = %e, "cannot record a switch to fixed-size chunks")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_print_and_are_checked() {
        let fixed = |n| Chunking::Fixed(BlockSize::new(n).unwrap());
        assert_eq!("cdc".parse(), Ok(Chunking::ContentDefined));
        assert_eq!(" Fixed:16K\n".parse(), Ok(fixed(16 << 10)));
        assert_eq!("fixed:65536".parse(), Ok(fixed(64 << 10)));
        assert_eq!("fixed:1MiB".parse(), Ok(fixed(1 << 20)));
        for c in [fixed(4 << 10), fixed(1 << 20), Chunking::ContentDefined] {
            assert_eq!(c.to_string().parse(), Ok(c));
        }
        assert_eq!(fixed(16 << 10).to_string(), "fixed:16K");
        assert_eq!(
            "fixed:3K".parse::<Chunking>(),
            Err(ChunkingError::BlockSize(3 << 10))
        );
        assert_eq!(
            "fixed:2M".parse::<Chunking>(),
            Err(ChunkingError::BlockSize(2 << 20))
        );
        assert!(matches!(
            "fixed:16Q".parse::<Chunking>(),
            Err(ChunkingError::Syntax(_))
        ));
        assert!(matches!(
            "rabin".parse::<Chunking>(),
            Err(ChunkingError::Syntax(_))
        ));
        assert!(matches!(
            "fixed:99999999999999999999K".parse::<Chunking>(),
            Err(ChunkingError::Syntax(_))
        ));
    }

    #[test]
    fn blocks_round_to_boundaries() {
        let b = BlockSize::new(4096).unwrap();
        assert_eq!(
            (b.floor(4095), b.floor(4096), b.floor(9000)),
            (0, 4096, 8192)
        );
        assert_eq!((b.ceil(0), b.ceil(1), b.ceil(4096)), (0, 4096, 4096));
    }
}

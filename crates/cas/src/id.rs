use std::fmt;

use branch::BlobKey;

/// The id of a chunk: keyed BLAKE3-256 of its plaintext.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId([u8; 32]);

/// The first four bytes of a [`ChunkId`]: what the compact in-RAM index keeps.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ShortFp(pub u32);

impl ChunkId {
    pub const LEN: usize = 32;

    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        ChunkId(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn short(&self) -> ShortFp {
        ShortFp(u32::from_le_bytes(self.0[..4].try_into().unwrap()))
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        if s.len() != 64 {
            return None;
        }
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(ChunkId(out))
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({}..)", &self.to_hex()[..12])
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The per-repository secret that keys chunk ids, so ids reveal nothing
/// across repositories and encryption at rest can later reuse the same ids.
#[derive(Clone)]
pub struct RepoKey([u8; 32]);

impl RepoKey {
    pub fn generate() -> Self {
        RepoKey(rand::random())
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        ChunkId::from_hex(s.trim()).map(|id| RepoKey(id.0))
    }

    /// The id of a chunk with this content.
    pub fn chunk_id(&self, data: &[u8]) -> ChunkId {
        ChunkId(*blake3::keyed_hash(&self.0, data).as_bytes())
    }
}

impl fmt::Debug for RepoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RepoKey(..)")
    }
}

/// A container's number, unique within a repository and never reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ContainerId(pub u64);

const CONTAINER_PREFIX: &str = "containers/";

impl ContainerId {
    /// Where the container lives on a branch: 4096 consecutive containers
    /// (about 16 GiB) share a directory, so none grows huge and a stream's
    /// containers stay together.
    pub fn blob_key(&self) -> BlobKey {
        BlobKey::new(format!(
            "{CONTAINER_PREFIX}{:05x}/{:016x}",
            self.0 >> 12,
            self.0
        ))
        .expect("container keys are valid")
    }

    pub fn from_blob_key(key: &BlobKey) -> Option<Self> {
        let rest = key.as_str().strip_prefix(CONTAINER_PREFIX)?;
        let (_, name) = rest.split_once('/')?;
        let id = u64::from_str_radix(name, 16).ok()?;
        (ContainerId(id).blob_key() == *key).then_some(ContainerId(id))
    }

    pub fn list_prefix() -> &'static str {
        CONTAINER_PREFIX
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_keyed() {
        let a = RepoKey::generate();
        let b = RepoKey::generate();
        assert_eq!(a.chunk_id(b"x"), a.chunk_id(b"x"));
        assert_ne!(a.chunk_id(b"x"), b.chunk_id(b"x"));
        let back = RepoKey::from_hex(&a.to_hex()).unwrap();
        assert_eq!(back.chunk_id(b"y"), a.chunk_id(b"y"));
    }

    #[test]
    fn hex_round_trip() {
        let id = RepoKey::generate().chunk_id(b"z");
        assert_eq!(ChunkId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(ChunkId::from_hex("zz"), None);
    }

    #[test]
    fn container_keys_round_trip() {
        for id in [0u64, 1, 255, 256, 0xdead_beef] {
            let c = ContainerId(id);
            assert_eq!(ContainerId::from_blob_key(&c.blob_key()), Some(c));
        }
        let other = BlobKey::new("containers/00/xyz").unwrap();
        assert_eq!(ContainerId::from_blob_key(&other), None);
    }
}

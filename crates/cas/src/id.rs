use std::fmt;

use branch::BlobKey;

pub use ids::ChunkId;

/// The first four bytes of a [`ChunkId`]: what the compact in-RAM index keeps.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ShortFp(pub u32);

impl ShortFp {
    pub fn of(id: &ChunkId) -> ShortFp {
        let [a, b, c, d, ..] = *id.as_bytes();
        ShortFp(u32::from_le_bytes([a, b, c, d]))
    }
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
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        blake3::Hash::from_hex(s.trim())
            .ok()
            .map(|h| RepoKey(*h.as_bytes()))
    }

    /// The id of a chunk with this content.
    pub fn chunk_id(&self, data: &[u8]) -> ChunkId {
        ChunkId::from_bytes(*blake3::keyed_hash(&self.0, data).as_bytes())
    }
}

impl fmt::Debug for RepoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RepoKey(..)")
    }
}

/// A container's number, unique within a file system and never reused.
/// Its top [`ClientNo::BITS`] bits are the number of the client that
/// made it, so that clients sharing a branch never hand out one id twice.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ContainerId(pub u64);

/// Which client of a file system a store is (see `docs/cluster.md`): the
/// first client, and every repository that never shared its branches, is
/// 0. Each client makes containers only in its own id range and keeps its
/// retention roots under its own prefix on the branch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ClientNo(u16);

/// Bits of a container id below the client number.
const CLIENT_SHIFT: u32 = 64 - ClientNo::BITS;

impl ClientNo {
    /// Bits of a container id that carry the client number.
    pub const BITS: u32 = 16;
    /// The largest client number.
    pub const MAX: u16 = u16::MAX;

    pub const fn new(n: u16) -> ClientNo {
        ClientNo(n)
    }

    pub fn get(self) -> u16 {
        self.0
    }

    /// The first container id of this client's range.
    pub fn first_container(self) -> u64 {
        u64::from(self.0) << CLIENT_SHIFT
    }

    /// The last container id of this client's range.
    pub fn last_container(self) -> u64 {
        self.first_container() | ((1 << CLIENT_SHIFT) - 1)
    }

    /// Whether this client made container `c`.
    pub fn owns(self, c: ContainerId) -> bool {
        c.client() == self
    }
}

impl fmt::Display for ClientNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

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

    /// The client that made the container.
    pub fn client(&self) -> ClientNo {
        ClientNo((self.0 >> CLIENT_SHIFT) as u16)
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The hex number [`ContainerId`]'s `Display` writes, read back.
impl std::str::FromStr for ContainerId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(ContainerId)
    }
}

/// Serde for ids as the text their `Display` writes, so reports that
/// carry typed ids keep the JSON they always had.
pub(crate) mod as_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }

    /// The same for a list of ids.
    pub mod list {
        use std::fmt::Display;
        use std::str::FromStr;

        use serde::ser::SerializeSeq;
        use serde::{de::Error, Deserialize, Deserializer, Serializer};

        pub fn serialize<T: Display, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(v.len()))?;
            for x in v {
                seq.serialize_element(&x.to_string())?;
            }
            seq.end()
        }

        pub fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
        where
            T: FromStr,
            T::Err: Display,
            D: Deserializer<'de>,
        {
            Vec::<String>::deserialize(d)?
                .iter()
                .map(|s| s.parse().map_err(D::Error::custom))
                .collect()
        }
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
    fn short_fingerprint_is_the_first_four_bytes_little_endian() {
        let mut bytes = [0u8; 32];
        bytes[..5].copy_from_slice(&[0x01, 0x02, 0x03, 0x04, 0xff]);
        assert_eq!(
            ShortFp::of(&ChunkId::from_bytes(bytes)),
            ShortFp(0x0403_0201)
        );
    }

    #[test]
    fn container_ids_read_back_from_their_text() {
        for id in [0u64, 1, 0xdead_beef, u64::MAX] {
            let c = ContainerId(id);
            assert_eq!(c.to_string().parse::<ContainerId>(), Ok(c));
        }
        assert!("xyz".parse::<ContainerId>().is_err());
    }

    #[test]
    fn container_keys_round_trip() {
        for id in [0u64, 1, 255, 256, 0xdead_beef] {
            let c = ContainerId(id);
            assert_eq!(ContainerId::from_blob_key(&c.blob_key()), Some(c));
        }
        let other = BlobKey::new("containers/00/xyz").unwrap();
        let far = ContainerId(ClientNo::new(ClientNo::MAX).first_container() + 7);
        assert_eq!(ContainerId::from_blob_key(&far.blob_key()), Some(far));
        assert_eq!(ContainerId::from_blob_key(&other), None);
    }

    proptest::proptest! {
        /// Ids two different clients can hand out never meet, and every id
        /// names the client whose range it is in.
        #[test]
        fn client_ranges_never_collide(a in 0u16.., b in 0u16.., i in 0u64..(1 << 48) - 1, j in 0u64..(1 << 48) - 1) {
            let (ca, cb) = (ClientNo::new(a), ClientNo::new(b));
            let x = ContainerId(ca.first_container() + i);
            let y = ContainerId(cb.first_container() + j);
            proptest::prop_assert!(x.0 <= ca.last_container() && y.0 <= cb.last_container());
            proptest::prop_assert_eq!(x.client(), ca);
            proptest::prop_assert_eq!(y.client(), cb);
            if a != b {
                proptest::prop_assert_ne!(x, y);
                proptest::prop_assert_ne!(x.blob_key(), y.blob_key());
            }
        }
    }
}

use std::fmt;

/// The name of a blob: `/`-separated segments of `[A-Za-z0-9._-]`, none of
/// them empty or starting with `.`, so a key can never escape a branch's root
/// nor collide with a branch's own dot-files.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobKey(String);

#[derive(Debug, thiserror::Error)]
#[error("invalid blob key {0:?}: segments must be non-empty [A-Za-z0-9._-], not starting with .")]
pub struct KeyError(pub String);

impl BlobKey {
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        let valid = !key.is_empty()
            && key.split('/').all(|seg| {
                !seg.is_empty()
                    && !seg.starts_with('.')
                    && seg
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            });
        if valid {
            Ok(BlobKey(key))
        } else {
            Err(KeyError(key))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_escape() {
        assert!(BlobKey::new("c/00/0000000000000001").is_ok());
        for bad in [
            "", "/a", "a/", "a//b", "../x", "a/./b", ".tmp/x", "a b", "a\0b",
        ] {
            assert!(BlobKey::new(bad).is_err(), "{bad:?}");
        }
    }
}

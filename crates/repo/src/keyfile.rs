//! The repository key (`REPO/key`): reading it, checking it against the
//! repository's record, and `cairn key export|import`.
//!
//! The key is checked by its check value ([`crate::record::key_check`]),
//! kept in the record: a wrong key is recognised before anything is read
//! or written, and an imported key is refused unless it is this
//! repository's.

use std::fs;
use std::path::{Path, PathBuf};

use cas::RepoKey;

use crate::layout::{io, RepoError, KEY};
use crate::record::{key_check, write_atomic, Record, RECORD};

type Result<T> = std::result::Result<T, RepoError>;

/// The repository's key: [`RepoError::Key`] when it is missing or is not
/// a key.
pub(crate) fn read(root: &Path) -> Result<RepoKey> {
    let path = root.join(KEY);
    fs::read_to_string(&path)
        .ok()
        .and_then(|s| RepoKey::from_hex(&s))
        .ok_or(RepoError::Key(path))
}

/// [`RepoError::WrongKey`] unless `check` is the check value `record`
/// keeps (a repository without a record cannot tell).
pub(crate) fn verify(root: &Path, record: Option<&Record>, check: &str) -> Result<()> {
    match record {
        Some(r) if r.key_check() != check => Err(RepoError::WrongKey {
            key: root.join(KEY),
            record: root.join(RECORD),
        }),
        _ => Ok(()),
    }
}

/// The key file's text, for a backup: refused when the key is missing,
/// damaged or not this repository's (such a backup would restore nothing).
pub fn export(root: &Path) -> Result<String> {
    let key = read(root)?;
    verify(root, Record::load(root)?.as_ref(), &key_check(&key))?;
    Ok(format!("{}\n", key.to_hex()))
}

/// What [`import`] did.
#[derive(Debug, PartialEq)]
pub enum Imported {
    /// The key was written; a damaged or wrong key file it replaced was
    /// kept at this path.
    Restored { replaced: Option<PathBuf> },
    /// The key file already held this key: nothing changed.
    AlreadyInPlace,
}

/// Restores the key from `text` (what [`export`] wrote), under the
/// repository's lock. Refused before anything is written when `text` is
/// not a key, or not this repository's key, or when the repository has no
/// record to check it against.
pub fn import(root: &Path, text: &str, from: &Path) -> Result<Imported> {
    let key = RepoKey::from_hex(text).ok_or_else(|| RepoError::NotAKey(from.to_path_buf()))?;
    let record = Record::load(root)?.ok_or_else(|| RepoError::NoRecord(root.join(RECORD)))?;
    if record.key_check() != key_check(&key) {
        return Err(RepoError::KeyMismatch(from.to_path_buf()));
    }
    let _lock = crate::lock::RepoLock::acquire(root)?;
    let path = root.join(KEY);
    let mut replaced = None;
    if path.exists() {
        if read(root).is_ok_and(|k| key_check(&k) == record.key_check()) {
            return Ok(Imported::AlreadyInPlace);
        }
        let aside = root.join("key.damaged");
        fs::rename(&path, &aside).map_err(io("keep the damaged key as", &aside))?;
        replaced = Some(aside);
    }
    write_atomic(&path, format!("{}\n", key.to_hex()).as_bytes())?;
    tracing::info!(repo = %root.display(), "key imported");
    Ok(Imported::Restored { replaced })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Repo;

    #[test]
    fn export_import_round_trip_and_a_wrong_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        Repo::init(&root).unwrap();
        let saved = export(&root).unwrap();
        let from = Path::new("backup");
        assert_eq!(
            import(&root, &saved, from).unwrap(),
            Imported::AlreadyInPlace
        );
        fs::remove_file(root.join(KEY)).unwrap();
        let e = Repo::open(&root).err().unwrap();
        assert!(e.to_string().contains("cairn key import"), "{e}");

        let wrong = RepoKey::generate().to_hex();
        let e = import(&root, &wrong, from).unwrap_err();
        assert!(matches!(e, RepoError::KeyMismatch(_)), "{e}");
        assert!(matches!(
            import(&root, "not a key", from),
            Err(RepoError::NotAKey(_))
        ));
        assert!(!root.join(KEY).exists(), "a refused import wrote a key");

        assert_eq!(
            import(&root, &saved, from).unwrap(),
            Imported::Restored { replaced: None }
        );
        drop(Repo::open(&root).unwrap());

        // A key file holding another key is refused at open, and replaced
        // (kept aside) by an import.
        fs::write(root.join(KEY), format!("{wrong}\n")).unwrap();
        let e = Repo::open(&root).err().unwrap();
        assert!(matches!(e, RepoError::WrongKey { .. }), "{e}");
        assert!(matches!(export(&root), Err(RepoError::WrongKey { .. })));
        let done = import(&root, &saved, from).unwrap();
        assert_eq!(
            done,
            Imported::Restored {
                replaced: Some(root.join("key.damaged"))
            }
        );
        assert_eq!(export(&root).unwrap(), saved);
    }
}

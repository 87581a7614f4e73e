//! S3 access keys, and the buckets anyone may read (public-read), kept in
//! the repository at `gateway/keys.toml` (mode 0600, written whole to a
//! temporary file and renamed over the old one).
//! A secret is returned once, by [`create`]; nothing here logs or prints
//! it, and [`KeyInfo`] (what `list` shows) does not carry it. A first start
//! without a terminal leaves the first key in `gateway/first-key` (mode
//! 0600) instead of printing it ([`save_first`]).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

/// Most keys one repository keeps: the file is read whole on change.
const MAX_KEYS: usize = 1000;
const ID_LEN: usize = 20;
const SECRET_LEN: usize = 40;
const ALNUM_UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Where a repository's keys are kept.
pub fn path(repo_root: &Path) -> PathBuf {
    repo_root.join("gateway").join("keys.toml")
}

/// One key as stored.
#[derive(Clone, Serialize, Deserialize)]
struct Stored {
    id: String,
    secret: String,
    read_only: bool,
    /// The buckets this key reaches; empty means all.
    #[serde(default)]
    buckets: Vec<String>,
    /// Seconds since the epoch.
    created: u64,
}

#[derive(Default, Clone, Serialize, Deserialize)]
struct KeyFile {
    /// Buckets whose objects anyone may GET and HEAD without signing.
    #[serde(default)]
    public_read: Vec<String>,
    #[serde(default, rename = "key")]
    keys: Vec<Stored>,
}

/// What a key may do, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub id: String,
    pub read_only: bool,
    /// Empty: every bucket.
    pub buckets: Vec<String>,
    /// Seconds since the epoch.
    pub created: u64,
}

/// A key just made: the only place its secret is handed out.
pub struct NewKey {
    pub info: KeyInfo,
    pub secret: String,
}

impl Stored {
    fn info(&self) -> KeyInfo {
        KeyInfo {
            id: self.id.clone(),
            read_only: self.read_only,
            buckets: self.buckets.clone(),
            created: self.created,
        }
    }
}

fn random(alphabet: &[u8], len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.gen_range(0..alphabet.len())]))
        .collect()
}

fn read(file: &Path) -> Result<KeyFile> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(KeyFile::default()),
        Err(e) => return Err(GatewayError::Keys(file.to_path_buf(), e)),
    };
    let keys: KeyFile = toml::from_str(&text).map_err(|e| GatewayError::KeysMalformed {
        file: file.to_path_buf(),
        reason: e.message().to_string(),
    })?;
    if keys.keys.len() > MAX_KEYS {
        return Err(GatewayError::TooManyKeys(MAX_KEYS));
    }
    Ok(keys)
}

fn write(file: &Path, keys: &KeyFile) -> Result<()> {
    write_private(file, &toml::to_string(keys).expect("a key file serializes"))
}

/// Writes `text` whole to `file`, readable by its owner only, in a
/// directory only its owner can enter.
fn write_private(file: &Path, text: &str) -> Result<()> {
    let io = |e| GatewayError::Keys(file.to_path_buf(), e);
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, file).map_err(io)?;
    Ok(())
}

/// Makes a key; `buckets` empty means every bucket.
pub fn create(repo_root: &Path, read_only: bool, buckets: Vec<String>) -> Result<NewKey> {
    for b in &buckets {
        if !s3s::path::check_bucket_name(b) {
            return Err(GatewayError::BadBucketName(b.clone()));
        }
    }
    let file = path(repo_root);
    let mut keys = read(&file)?;
    if keys.keys.len() >= MAX_KEYS {
        return Err(GatewayError::TooManyKeys(MAX_KEYS));
    }
    let stored = Stored {
        id: format!("CK{}", random(ALNUM_UPPER, ID_LEN - 2)),
        secret: random(ALNUM, SECRET_LEN),
        read_only,
        buckets,
        created: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let new = NewKey {
        info: stored.info(),
        secret: stored.secret.clone(),
    };
    keys.keys.push(stored);
    write(&file, &keys)?;
    tracing::info!(key = %new.info.id, read_only, "created an access key");
    Ok(new)
}

/// `key` as lines for `~/.aws/credentials`, under the profile `cairn`.
pub fn credentials(key: &NewKey) -> String {
    format!(
        "[cairn]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
        key.info.id, key.secret
    )
}

/// Where a first start that has no terminal to show the new key on
/// leaves it ([`save_first`]).
fn first_key_path(repo_root: &Path) -> PathBuf {
    repo_root.join("gateway").join("first-key")
}

/// Writes `key` as [`credentials`] lines to [`first_key_path`], readable
/// by the owner only (root, for the systemd unit): a secret printed on a
/// daemon's standard output would stay in the journal for anyone allowed
/// to read it. Where it went.
pub fn save_first(repo_root: &Path, key: &NewKey) -> Result<PathBuf> {
    let file = first_key_path(repo_root);
    write_private(&file, &credentials(key))?;
    tracing::info!(key = %key.info.id, file = %file.display(), "wrote the first access key's secret");
    Ok(file)
}

/// Every key, without secrets.
pub fn list(repo_root: &Path) -> Result<Vec<KeyInfo>> {
    Ok(read(&path(repo_root))?
        .keys
        .iter()
        .map(Stored::info)
        .collect())
}

/// Removes a key; the gateway refuses it from its next request on.
pub fn revoke(repo_root: &Path, id: &str) -> Result<()> {
    let file = path(repo_root);
    let mut keys = read(&file)?;
    let before = keys.keys.len();
    keys.keys.retain(|k| k.id != id);
    if keys.keys.len() == before {
        return Err(GatewayError::NoSuchKey(id.to_string()));
    }
    write(&file, &keys)?;
    tracing::info!(key = %id, "revoked an access key");
    Ok(())
}

/// Marks bucket `name` public-read (`on`) or not: anyone may then GET and
/// HEAD its objects without a signature (a browser fetching web assets);
/// every other request still needs a key. Whether anything changed.
pub fn set_public(repo_root: &Path, name: &str, on: bool) -> Result<bool> {
    if !s3s::path::check_bucket_name(name) {
        return Err(GatewayError::BadBucketName(name.to_string()));
    }
    let file = path(repo_root);
    let mut keys = read(&file)?;
    let was = keys.public_read.iter().any(|b| b == name);
    if was == on {
        return Ok(false);
    }
    if on {
        if keys.public_read.len() >= MAX_KEYS {
            return Err(GatewayError::TooManyKeys(MAX_KEYS));
        }
        keys.public_read.push(name.to_string());
        keys.public_read.sort();
    } else {
        keys.public_read.retain(|b| b != name);
    }
    write(&file, &keys)?;
    tracing::info!(bucket = %name, public_read = on, "changed a bucket's public read");
    Ok(true)
}

/// The buckets marked public-read.
pub fn public(repo_root: &Path) -> Result<Vec<String>> {
    Ok(read(&path(repo_root))?.public_read)
}

/// A read-write key for every bucket if the repository has none yet (a
/// first `cairn serve`); `None` if it has one.
pub fn ensure_one(repo_root: &Path) -> Result<Option<NewKey>> {
    if read(&path(repo_root))?.keys.is_empty() {
        return create(repo_root, false, Vec::new()).map(Some);
    }
    Ok(None)
}

/// The keys a running gateway checks requests against: the file is read
/// again when it changed, so a key created or revoked while the gateway
/// runs counts from the next request on.
pub(crate) struct Keyring {
    file: PathBuf,
    loaded: Mutex<(Option<SystemTime>, KeyFile)>,
}

/// What a request's key may do.
pub(crate) struct Grant {
    pub secret: String,
    pub read_only: bool,
    pub buckets: Vec<String>,
}

impl Keyring {
    pub fn new(repo_root: &Path) -> Keyring {
        Keyring {
            file: path(repo_root),
            loaded: Mutex::new((None, KeyFile::default())),
        }
    }

    /// The key file as it is now, read again if it changed. A file that
    /// cannot be read denies every key and makes no bucket public (and is
    /// logged) rather than keeping old ones.
    fn now(&self) -> parking_lot::MutexGuard<'_, (Option<SystemTime>, KeyFile)> {
        let mtime = std::fs::metadata(&self.file)
            .and_then(|m| m.modified())
            .ok();
        let mut loaded = self.loaded.lock();
        if loaded.0 != mtime || mtime.is_none() {
            let keys = match read(&self.file) {
                Ok(k) => k,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the gateway's access keys");
                    KeyFile::default()
                }
            };
            *loaded = (mtime, keys);
        }
        loaded
    }

    /// Whether bucket `name` is public-read now.
    pub fn is_public(&self, name: &str) -> bool {
        self.now().1.public_read.iter().any(|b| b == name)
    }

    /// The grant of key `id`, if it exists now.
    pub fn grant(&self, id: &str) -> Option<Grant> {
        let loaded = self.now();
        loaded.1.keys.iter().find(|k| k.id == id).map(|k| Grant {
            secret: k.secret.clone(),
            read_only: k.read_only,
            buckets: k.buckets.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_key_is_listed_without_its_secret_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let k = create(dir.path(), true, vec!["photos".into()]).unwrap();
        assert_eq!(k.secret.len(), SECRET_LEN);
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let listed = list(dir.path()).unwrap();
        assert_eq!(listed, vec![k.info.clone()]);
        let ring = Keyring::new(dir.path());
        assert_eq!(ring.grant(&k.info.id).unwrap().secret, k.secret);
        revoke(dir.path(), &k.info.id).unwrap();
        assert!(list(dir.path()).unwrap().is_empty());
        assert!(ring.grant(&k.info.id).is_none());
        let first = save_first(dir.path(), &k).unwrap();
        let text = std::fs::read_to_string(&first).unwrap();
        assert!(text.contains(&format!("aws_secret_access_key = {}\n", k.secret)));
        let mode = std::fs::metadata(&first).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(
            revoke(dir.path(), &k.info.id),
            Err(GatewayError::NoSuchKey(_))
        ));
    }

    #[test]
    fn ensure_one_makes_a_key_only_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ensure_one(dir.path()).unwrap().is_some());
        assert!(ensure_one(dir.path()).unwrap().is_none());
        assert_eq!(list(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_bucket_made_public_is_seen_by_a_running_keyring() {
        let dir = tempfile::tempdir().unwrap();
        let k = create(dir.path(), false, Vec::new()).unwrap();
        let ring = Keyring::new(dir.path());
        assert!(!ring.is_public("site"));
        assert!(set_public(dir.path(), "site", true).unwrap());
        assert!(!set_public(dir.path(), "site", true).unwrap());
        assert_eq!(public(dir.path()).unwrap(), ["site"]);
        assert!(ring.is_public("site") && !ring.is_public("other"));
        // The keys are kept.
        assert_eq!(ring.grant(&k.info.id).unwrap().secret, k.secret);
        assert!(set_public(dir.path(), "site", false).unwrap());
        assert!(!ring.is_public("site"));
        assert!(matches!(
            set_public(dir.path(), "No_Bucket", true),
            Err(GatewayError::BadBucketName(_))
        ));
    }

    #[test]
    fn a_bad_bucket_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            create(dir.path(), false, vec!["Not_A_Bucket".into()]),
            Err(GatewayError::BadBucketName(_))
        ));
    }
}

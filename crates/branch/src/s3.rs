use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};
use tokio::runtime::Runtime;

use crate::{BlobKey, Branch, BranchError, RemoteFailure, Result};

/// Where a bucket is and how long to wait for it.
#[derive(Clone)]
pub struct S3Config {
    /// Base URL of the S3 API, such as `https://s3.eu-west-1.amazonaws.com`
    /// or `http://127.0.0.1:9000`. Plain `http://` is allowed only because
    /// the URL says so.
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Time allowed to establish a connection.
    pub connect_timeout: Duration,
    /// Time allowed for one whole request, body included.
    pub request_timeout: Duration,
    /// Retries of a request that failed in a way worth retrying (connection
    /// lost, 5xx, throttling) before its error is returned.
    pub max_retries: usize,
    /// Bound on the total time spent retrying one request.
    pub retry_timeout: Duration,
    /// Time the reachability check in [`S3Bucket::open`] may take; it is not
    /// retried, so bad configuration is reported at once.
    pub open_timeout: Duration,
}

impl S3Config {
    /// A configuration with region `us-east-1` and the default timeouts:
    /// 5 s to connect, 60 s a request, 3 retries within 60 s, 5 s to open.
    pub fn new(
        endpoint: impl Into<String>,
        bucket: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        S3Config {
            endpoint: endpoint.into(),
            region: "us-east-1".into(),
            bucket: bucket.into(),
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            max_retries: 3,
            retry_timeout: Duration::from_secs(60),
            open_timeout: Duration::from_secs(5),
        }
    }

    /// Refuses what object_store would only trip over mid-request (it
    /// panics on an endpoint that is not a URL).
    fn validate(&self, branch: &str) -> Result<()> {
        let endpoint_ok = url::Url::parse(&self.endpoint)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        let bucket_ok = !self.bucket.is_empty()
            && self
                .bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        let reason = if !endpoint_ok {
            format!(
                "endpoint {:?} is not an http:// or https:// URL",
                self.endpoint
            )
        } else if !bucket_ok {
            format!("bucket name {:?} is not [A-Za-z0-9._-]+", self.bucket)
        } else {
            return Ok(());
        };
        Err(BranchError::Config {
            branch: branch.to_string(),
            reason,
        })
    }

    fn store(&self, branch: &str, retry: RetryConfig, client: ClientOptions) -> Result<AmazonS3> {
        AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            // Path style (`endpoint/bucket/key`) works with every S3
            // look-alike and needs no per-bucket DNS name.
            .with_virtual_hosted_style_request(false)
            // One blob is deleted at a time, and plain DELETE is the one
            // delete every S3 look-alike implements (S3Proxy lacks the bulk one).
            .with_disable_bulk_delete(true)
            .with_region(&self.region)
            .with_bucket_name(&self.bucket)
            .with_access_key_id(&self.access_key_id)
            .with_secret_access_key(&self.secret_access_key)
            .with_retry(retry)
            .with_client_options(client.with_allow_http(self.endpoint.starts_with("http://")))
            .build()
            .map_err(|e| BranchError::Config {
                branch: branch.to_string(),
                reason: chain(&e),
            })
    }
}

/// The secret stays out of logs.
impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("open_timeout", &self.open_timeout)
            .finish()
    }
}

/// Blobs as objects in an S3 bucket, key for key.
///
/// An S3 PUT is atomic and acknowledged only once stored durably, which gives
/// `put` its guarantees. Not replacing is two checks: a HEAD first, then a
/// PUT with `If-None-Match: *`. Stores that honour that header (AWS S3,
/// MinIO, R2) refuse a racing second writer; stores that ignore it (S3Proxy
/// with its filesystem back end) are covered by the HEAD alone, which leaves
/// a window in which two writers of one key both succeed. That is acceptable
/// because callers never write different content under one key: the loser
/// rewrites identical bytes.
///
/// The `Branch` trait is synchronous and called from plain threads, so the
/// bucket owns a small tokio runtime and blocks on it; calling it from inside
/// another tokio runtime panics (use `spawn_blocking` there).
pub struct S3Bucket {
    name: String,
    store: AmazonS3,
    runtime: Runtime,
}

/// Puts in one `put_many` that are in flight at once.
const PUT_CONCURRENCY: usize = 8;

impl S3Bucket {
    /// Connects to the bucket and checks that it can be listed, so that a
    /// wrong endpoint, bucket or key is refused before anything is written.
    pub fn open(name: impl Into<String>, config: &S3Config) -> Result<Self> {
        let bucket = Self::open_unprobed(name, config)?;
        bucket.probe(config)?;
        Ok(bucket)
    }

    /// Connects without asking the server anything: for a bucket the
    /// repository already stores data in, which must open even while it
    /// cannot be reached, so the other branches' copies stay readable.
    /// Every operation then fails until the server answers again.
    pub fn open_unprobed(name: impl Into<String>, config: &S3Config) -> Result<Self> {
        let name = name.into();
        config.validate(&name)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("s3-{name}"))
            .enable_all()
            .build()
            .map_err(|source| BranchError::Io {
                op: "start runtime for S3 branch",
                path: name.clone().into(),
                source,
            })?;
        let retry = RetryConfig {
            max_retries: config.max_retries,
            retry_timeout: config.retry_timeout,
            ..RetryConfig::default()
        };
        let client = ClientOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout);
        let store = config.store(&name, retry, client)?;
        Ok(S3Bucket {
            name,
            store,
            runtime,
        })
    }

    /// Lists nothing, quickly and without retries, to learn whether the
    /// bucket exists and the credentials are accepted.
    fn probe(&self, config: &S3Config) -> Result<()> {
        let probe_client = ClientOptions::new()
            .with_connect_timeout(config.open_timeout.min(config.connect_timeout))
            .with_timeout(config.open_timeout);
        let no_retry = RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        };
        let probe = config.store(&self.name, no_retry, probe_client)?;
        // Keys never start with '.', so this lists nothing yet still needs the
        // bucket to exist and the credentials to be accepted.
        let listed = self.runtime.block_on(async {
            tokio::time::timeout(
                config.open_timeout,
                probe.list_with_delimiter(Some(&Path::from(".cairn-probe"))),
            )
            .await
        });
        // The store's own answer (NoSuchBucket, SignatureDoesNotMatch,
        // connection refused) is the clearest reason.
        let reason = match listed {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => chain(&e),
            Err(_) => format!("no answer within {:?}", config.open_timeout),
        };
        Err(BranchError::Unreachable {
            branch: self.name.clone(),
            endpoint: config.endpoint.clone(),
            bucket: config.bucket.clone(),
            reason,
        })
    }

    fn block<F: Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    fn error(&self, op: &'static str, key: &BlobKey, e: object_store::Error) -> BranchError {
        match e {
            object_store::Error::NotFound { .. } => BranchError::NotFound {
                branch: self.name.clone(),
                key: key.clone(),
            },
            object_store::Error::AlreadyExists { .. } => BranchError::Exists {
                branch: self.name.clone(),
                key: key.clone(),
            },
            e => BranchError::Remote {
                branch: self.name.clone(),
                op,
                key: key.to_string(),
                source: RemoteFailure::Store(Box::new(e)),
            },
        }
    }

    async fn put_one(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        let path = Path::from(key.as_str());
        match self.store.head(&path).await {
            Ok(_) => {
                return Err(BranchError::Exists {
                    branch: self.name.clone(),
                    key: key.clone(),
                })
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.error("put", key, e)),
        }
        let payload = PutPayload::from(data.to_vec());
        self.store
            .put_opts(&path, payload, PutOptions::from(PutMode::Create))
            .await
            .map(drop)
            .map_err(|e| self.error("put", key, e))
    }
}

impl Branch for S3Bucket {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        self.block(self.put_one(key, data))
    }

    /// Overlaps the round trips of several puts, which is most of their cost.
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        self.block(
            futures_util::stream::iter(blobs)
                .map(|(key, data)| self.put_one(key, data))
                .buffered(PUT_CONCURRENCY)
                .collect(),
        )
    }

    fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        let path = Path::from(key.as_str());
        self.block(async { self.store.get(&path).await?.bytes().await })
            .map(Vec::from)
            .map_err(|e| self.error("get", key, e))
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        if len == 0 {
            // An empty range is not a valid HTTP range; the blob must still exist.
            return self.size(key).map(|_| Vec::new());
        }
        let path = Path::from(key.as_str());
        let end = offset.saturating_add(len as u64);
        let failure = match self.block(self.store.get_range(&path, offset..end)) {
            Ok(bytes) if bytes.len() == len => return Ok(bytes.into()),
            Ok(_) => None,
            Err(e @ object_store::Error::NotFound { .. }) => return Err(self.error("read", key, e)),
            Err(e) => Some(e),
        };
        // A range past the end is refused (416) or cut short; only the
        // blob's size tells that apart from a failed request.
        match self.size(key) {
            Ok(size) if end > size => Err(BranchError::Truncated {
                branch: self.name.clone(),
                key: key.clone(),
                offset,
                wanted: len,
                size,
            }),
            Err(e @ BranchError::NotFound { .. }) => Err(e),
            _ => Err(match failure {
                Some(e) => self.error("read", key, e),
                None => BranchError::Remote {
                    branch: self.name.clone(),
                    op: "read",
                    key: key.to_string(),
                    source: RemoteFailure::ShortRead {
                        wanted: len,
                        offset,
                    },
                },
            }),
        }
    }

    fn size(&self, key: &BlobKey) -> Result<u64> {
        let path = Path::from(key.as_str());
        self.block(self.store.head(&path))
            .map(|meta| meta.size)
            .map_err(|e| self.error("stat", key, e))
    }

    /// S3 lists by whole path segments, so this lists the prefix's last
    /// complete directory and keeps the keys that start with the prefix.
    /// Directory markers (`p/`, which some stores list and which arrive
    /// here as `p`) are dropped: a key that is a directory of another key is
    /// never a blob, as no branch can hold both `p` and `p/x`.
    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        let dir = prefix.rsplit_once('/').map(|(dir, _)| Path::from(dir));
        let metas = self
            .block(self.store.list(dir.as_ref()).try_collect::<Vec<_>>())
            .map_err(|e| BranchError::Remote {
                branch: self.name.clone(),
                op: "list",
                key: prefix.to_string(),
                source: RemoteFailure::Store(Box::new(e)),
            })?;
        let names: Vec<&str> = metas
            .iter()
            .map(|m| m.location.as_ref())
            .filter(|name| name.starts_with(prefix))
            .collect();
        let dirs: HashSet<&str> = names
            .iter()
            .flat_map(|name| name.match_indices('/').map(|(i, _)| &name[..i]))
            .collect();
        let mut keys: Vec<BlobKey> = names
            .into_iter()
            .filter(|name| !dirs.contains(name))
            .filter_map(|name| BlobKey::new(name).ok())
            .collect();
        keys.sort();
        Ok(keys)
    }

    fn delete(&self, key: &BlobKey) -> Result<()> {
        let path = Path::from(key.as_str());
        match self.block(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", key, e)),
        }
    }
}

/// An error and its causes on one line: the transport's own message (such as
/// "connection refused") is often only in a source.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

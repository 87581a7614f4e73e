//! Who may do what: SigV4 secrets from the repository's keys (s3s checks
//! the signature, header or presigned, and refuses unsigned requests), and
//! per-key bucket permissions.

use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::error::refused;
use crate::keys::Keyring;

pub struct Auth {
    keys: Arc<Keyring>,
}

impl Auth {
    pub fn new(keys: Arc<Keyring>) -> Auth {
        Auth { keys }
    }
}

fn denied(msg: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::AccessDenied, msg.to_string())
}

#[async_trait::async_trait]
impl S3Auth for Auth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.keys.grant(access_key) {
            Some(g) => Ok(SecretKey::from(g.secret)),
            None => {
                tracing::warn!(key = %access_key, "refused a request signed with an unknown access key");
                Err(refused(S3ErrorCode::InvalidAccessKeyId))
            }
        }
    }
}

#[async_trait::async_trait]
impl S3Access for Auth {
    /// Every request is signed but a GET or HEAD of an object in a
    /// public-read bucket; a key limited to some buckets reaches only
    /// those (listing buckets is filtered instead), and a read-only key
    /// only reads (GET and HEAD).
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(creds) = cx.credentials() else {
            let object_read = matches!(cx.s3_op().name(), "GetObject" | "HeadObject");
            let public = match cx.s3_path() {
                S3Path::Object { bucket, .. } => self.keys.is_public(bucket),
                _ => false,
            };
            if object_read && public {
                return Ok(());
            }
            return Err(denied("the request is not signed"));
        };
        let Some(grant) = self.keys.grant(&creds.access_key) else {
            return Err(denied("the access key was revoked"));
        };
        if let Some(bucket) = cx.s3_path().get_bucket_name() {
            if !grant.buckets.is_empty() && !grant.buckets.iter().any(|b| b == bucket) {
                tracing::warn!(key = %creds.access_key, bucket, "refused a request outside the key's buckets");
                return Err(denied("this access key does not reach this bucket"));
            }
        }
        let reads = matches!(*cx.method(), http::Method::GET | http::Method::HEAD);
        if grant.read_only && !reads {
            tracing::warn!(key = %creds.access_key, op = cx.s3_op().name(), "refused a write with a read-only key");
            return Err(denied("this access key is read-only"));
        }
        Ok(())
    }
}

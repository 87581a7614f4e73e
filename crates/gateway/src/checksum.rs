//! The checksums a PUT or a part declares (`x-amz-checksum-*` headers, or
//! trailers of an `aws-chunked` body named in `x-amz-trailer`, which
//! current boto3 and the AWS CLI send by default), computed over the body
//! as it streams in and checked before anything is kept. They are checked,
//! not stored.

use s3s::checksum::ChecksumHasher;
use s3s::dto::{Checksum, ChecksumAlgorithm};
use s3s::{S3Error, S3ErrorCode, S3Result, TrailingHeaders};

const NAMES: [&str; 5] = [
    "x-amz-checksum-crc32",
    "x-amz-checksum-crc32c",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
    "x-amz-checksum-crc64nvme",
];

pub struct Declared {
    want: Checksum,
    trailers: Option<TrailingHeaders>,
    hasher: ChecksumHasher,
}

impl Declared {
    pub fn new(
        want: Checksum,
        algorithm: Option<&ChecksumAlgorithm>,
        headers: &http::HeaderMap,
        trailers: Option<TrailingHeaders>,
    ) -> Declared {
        let mut hasher = ChecksumHasher::default();
        let mut enable = |name: &str| match name {
            "x-amz-checksum-crc32" | "CRC32" => hasher.crc32 = Some(Default::default()),
            "x-amz-checksum-crc32c" | "CRC32C" => hasher.crc32c = Some(Default::default()),
            "x-amz-checksum-sha1" | "SHA1" => hasher.sha1 = Some(Default::default()),
            "x-amz-checksum-sha256" | "SHA256" => hasher.sha256 = Some(Default::default()),
            "x-amz-checksum-crc64nvme" | "CRC64NVME" => hasher.crc64nvme = Some(Default::default()),
            _ => {}
        };
        for (name, v) in NAMES.iter().zip(values(&want)) {
            if v.is_some() {
                enable(name);
            }
        }
        if let Some(a) = algorithm {
            enable(a.as_str());
        }
        for v in headers.get_all("x-amz-trailer") {
            for name in v.to_str().unwrap_or("").split(',') {
                enable(name.trim().to_ascii_lowercase().as_str());
            }
        }
        Declared {
            want,
            trailers,
            hasher,
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    /// After the whole body: each declared checksum matches it, else
    /// `BadDigest`.
    pub fn verify(self) -> S3Result<()> {
        let mut want = values(&self.want).map(|v| v.cloned());
        if let Some(t) = self.trailers.and_then(|t| t.take()) {
            for (slot, name) in want.iter_mut().zip(NAMES) {
                if let Some(v) = t.get(name) {
                    *slot = Some(v.to_str().unwrap_or("").to_string());
                }
            }
        }
        let got = self.hasher.finalize();
        for ((name, w), g) in NAMES.iter().zip(want).zip(values(&got)) {
            if let Some(w) = w {
                if Some(&w) != g {
                    return Err(S3Error::with_message(
                        S3ErrorCode::BadDigest,
                        format!("the body does not match its {name}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn values(c: &Checksum) -> [Option<&String>; 5] {
    [
        c.checksum_crc32.as_ref(),
        c.checksum_crc32c.as_ref(),
        c.checksum_sha1.as_ref(),
        c.checksum_sha256.as_ref(),
        c.checksum_crc64nvme.as_ref(),
    ]
}

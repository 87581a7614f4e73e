"""boto3 against a running `cairn serve`: the operations of the gateway's
first slice, the mount and S3 seeing one namespace, and requests that must
be refused without storing anything.

Environment: ENDPOINT, KEY_ID, SECRET, RO_KEY_ID, RO_SECRET, MOUNT (the
mount point), EXPECTED (a directory outside the mount where the bytes each
object must hold are written, with manifest.json mapping mount paths to
them, for the test to compare after a remount)."""

import hashlib
import json
import os
import random
import time

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["ENDPOINT"]
MOUNT = os.environ["MOUNT"]
EXPECTED = os.environ["EXPECTED"]
CFG = Config(signature_version="s3v4", s3={"addressing_style": "path"},
             retries={"max_attempts": 1})


def client(key_id, secret, **kw):
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=kw.get("config", CFG),
    )


def code(fn):
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError("the request succeeded")


rng = random.Random(16)
s3 = client(os.environ["KEY_ID"], os.environ["SECRET"])
manifest = {}
serial = iter(range(1 << 30))


def gone_from_mount(path):
    """Whether `path` disappears from the mount: the kernel keeps a name it
    looked up for the mount's entry cache time (1 s) before it asks again."""
    deadline = time.monotonic() + 10
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def expect(key, data):
    name = "e%d" % next(serial)
    with open(os.path.join(EXPECTED, name), "wb") as f:
        f.write(data)
    manifest[os.path.join("photos", key)] = name


# Buckets are top-level directories of the mount.
s3.create_bucket(Bucket="photos")
assert os.path.isdir(os.path.join(MOUNT, "photos"))
assert code(lambda: s3.create_bucket(Bucket="photos"))[0] == "BucketAlreadyOwnedByYou"
os.mkdir(os.path.join(MOUNT, "from-mount"))
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
assert names == ["from-mount", "photos"], names
s3.head_bucket(Bucket="photos")
s3.get_bucket_location(Bucket="photos")
assert code(lambda: s3.head_bucket(Bucket="nothing-here"))[1] == 404

# An object PUT through S3 is a file of the mount, byte for byte.
big = rng.randbytes(700_000)
key = "deep/a b/ü+%x/big.bin"
r = s3.put_object(Bucket="photos", Key=key, Body=big)
assert r["ETag"] == '"%s"' % hashlib.md5(big).hexdigest(), r["ETag"]
with open(os.path.join(MOUNT, "photos", key), "rb") as f:
    assert f.read() == big
expect(key, big)
got = s3.get_object(Bucket="photos", Key=key)
assert got["Body"].read() == big
assert got["ETag"] == r["ETag"]
part = s3.get_object(Bucket="photos", Key=key, Range="bytes=1000-1999")["Body"].read()
assert part == big[1000:2000]
s3.put_object(Bucket="photos", Key="empty", Body=b"")
assert s3.get_object(Bucket="photos", Key="empty")["Body"].read() == b""
expect("empty", b"")

# A file written through the mount is an object; its ETag is its MD5.
fused = rng.randbytes(200_000)
os.makedirs(os.path.join(MOUNT, "photos", "fuse"))
with open(os.path.join(MOUNT, "photos", "fuse", "written.bin"), "wb") as f:
    f.write(fused)
head = s3.head_object(Bucket="photos", Key="fuse/written.bin")
assert head["ContentLength"] == len(fused)
assert head["ETag"] == '"%s"' % hashlib.md5(fused).hexdigest()
assert s3.get_object(Bucket="photos", Key="fuse/written.bin")["Body"].read() == fused
expect("fuse/written.bin", fused)
# Changed through the mount: the ETag follows the bytes.
changed = rng.randbytes(150_000)
with open(os.path.join(MOUNT, "photos", "fuse", "written.bin"), "wb") as f:
    f.write(changed)
head = s3.head_object(Bucket="photos", Key="fuse/written.bin")
assert head["ETag"] == '"%s"' % hashlib.md5(changed).hexdigest()
expect("fuse/written.bin", changed)

# Listing: sorted as S3 sorts keys (by bytes: "a-z" before "a/"), pages
# joined by continuation tokens, prefix, delimiter and start-after.
small = {}
for k in ["list/a/1", "list/a/2", "list/a-z", "list/b", "list/c/d/e", "list/a+b", "list/ä"]:
    small[k] = rng.randbytes(rng.randrange(1, 3000))
for i in range(23):
    small["list/many/%03d" % i] = rng.randbytes(100)
for k, v in small.items():
    s3.put_object(Bucket="photos", Key=k, Body=v)
    expect(k, v)
want = sorted(small, key=lambda k: k.encode())
pages = s3.get_paginator("list_objects_v2").paginate(
    Bucket="photos", Prefix="list/", PaginationConfig={"PageSize": 7}
)
seen = []
for p in pages:
    assert len(p.get("Contents", [])) <= 7
    seen += [(o["Key"], o["Size"]) for o in p.get("Contents", [])]
assert [k for k, _ in seen] == want, seen
assert all(size == len(small[k]) for k, size in seen)
top = s3.list_objects_v2(Bucket="photos", Prefix="list/", Delimiter="/")
assert [o["Key"] for o in top["Contents"]] == ["list/a+b", "list/a-z", "list/b", "list/ä"], top
assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["list/a/", "list/c/", "list/many/"]
after = s3.list_objects_v2(Bucket="photos", Prefix="list/", StartAfter="list/b")
assert [o["Key"] for o in after["Contents"]] == [k for k in want if k.encode() > b"list/b"]
part = s3.list_objects_v2(Bucket="photos", Prefix="list/a")
assert [o["Key"] for o in part["Contents"]] == [k for k in want if k.startswith("list/a")]

# Where S3 and POSIX disagree: proper errors, nothing half-written.
assert code(lambda: s3.put_object(Bucket="photos", Key="empty/below", Body=b"x"))[1] == 409
assert code(lambda: s3.put_object(Bucket="photos", Key="list", Body=b"x"))[1] == 409
got = code(lambda: s3.put_object(Bucket="photos", Key="a//b", Body=b"x"))
assert got[0] == "InvalidArgument", got
assert code(lambda: s3.put_object(Bucket="photos", Key="k" * 1025, Body=b"x"))[0] == "KeyTooLongError"
assert code(lambda: s3.get_object(Bucket="photos", Key="missing"))[0] == "NoSuchKey"
assert code(lambda: s3.get_object(Bucket="nothing-here", Key="x"))[0] == "NoSuchBucket"
s3.put_object(Bucket="photos", Key="marker/", Body=b"")
assert os.path.isdir(os.path.join(MOUNT, "photos", "marker"))
assert "marker/" in [o["Key"] for o in s3.list_objects_v2(Bucket="photos")["Contents"]]

# Bad Content-MD5: BadDigest, nothing stored.
assert code(lambda: s3.put_object(Bucket="photos", Key="bad-md5", Body=b"abc",
                                  ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg=="))[0] == "BadDigest"

# Checksums boto3 computes are verified; a wrong one stores nothing.
for alg in ["CRC32", "SHA1", "SHA256"]:  # CRC32C needs awscrt in boto3
    s3.put_object(Bucket="photos", Key="summed-" + alg, Body=b"summed", ChecksumAlgorithm=alg)
    expect("summed-" + alg, b"summed")
got = code(lambda: s3.put_object(Bucket="photos", Key="bad-crc", Body=b"abc",
                                 ChecksumCRC32="AAAAAA=="))
assert got[0] == "BadDigest", got

# Forged signature, unknown key, unsigned: 403 and nothing stored.
forged = client(os.environ["KEY_ID"], "not-the-secret-" + "x" * 25)
assert code(lambda: forged.put_object(Bucket="photos", Key="forged", Body=b"f"))[1] == 403
unknown = client("CKNOTAKEY00000000000", os.environ["SECRET"])
assert code(lambda: unknown.put_object(Bucket="photos", Key="unknown", Body=b"u"))[1] == 403
anon = client("x", "y", config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"}))
assert code(lambda: anon.put_object(Bucket="photos", Key="anon", Body=b"a"))[1] == 403
assert code(lambda: anon.list_objects_v2(Bucket="photos"))[1] == 403
assert code(lambda: forged.delete_object(Bucket="photos", Key="empty"))[1] == 403

# A read-only key reads and cannot write.
ro = client(os.environ["RO_KEY_ID"], os.environ["RO_SECRET"])
assert ro.get_object(Bucket="photos", Key=key)["Body"].read() == big
assert code(lambda: ro.put_object(Bucket="photos", Key="ro", Body=b"r"))[0] == "AccessDenied"
assert code(lambda: ro.delete_object(Bucket="photos", Key="empty"))[0] == "AccessDenied"

# A presigned URL works; a body cut off before Content-Length stores
# nothing and leaves no temporary file behind.
import http.client
import urllib.parse
import urllib.request

url = s3.generate_presigned_url("put_object", Params={"Bucket": "photos", "Key": "presigned"})
urllib.request.urlopen(urllib.request.Request(url, data=b"signed", method="PUT")).read()
assert s3.get_object(Bucket="photos", Key="presigned")["Body"].read() == b"signed"
expect("presigned", b"signed")
url = urllib.parse.urlsplit(
    s3.generate_presigned_url("put_object", Params={"Bucket": "photos", "Key": "cut"}))
conn = http.client.HTTPConnection(url.hostname, url.port)
conn.putrequest("PUT", url.path + "?" + url.query)
conn.putheader("Content-Length", str(3 << 20))
conn.endheaders()
conn.send(rng.randbytes(2 << 20))
conn.sock.shutdown(2)
conn.close()
deadline = time.monotonic() + 10
while any(n.startswith(".cairn-put.") for n in os.listdir(os.path.join(MOUNT, "photos"))):
    assert time.monotonic() < deadline, os.listdir(os.path.join(MOUNT, "photos"))
    time.sleep(0.05)
expired = s3.generate_presigned_url("get_object", Params={"Bucket": "photos", "Key": "presigned"},
                                    ExpiresIn=1)
time.sleep(2)
try:
    urllib.request.urlopen(expired)
    raise AssertionError("an expired URL was served")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code

for k in ["bad-md5", "bad-crc", "forged", "unknown", "anon", "ro", "a", "empty/below", "cut"]:
    assert code(lambda: s3.head_object(Bucket="photos", Key=k))[1] == 404, k
leftovers = [n for _, _, files in os.walk(os.path.join(MOUNT, "photos"))
             for n in files if n.startswith(".cairn-put.")]
assert leftovers == [], leftovers

# Multipart: boto3's transfer manager splits a large object into parts;
# the ETag is the MD5 of the parts' MD5s with their count.
from boto3.s3.transfer import TransferConfig
import io

large = rng.randbytes(11 << 20)
s3.upload_fileobj(io.BytesIO(large), "photos", "multi/large.bin",
                  Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20))
head = s3.head_object(Bucket="photos", Key="multi/large.bin")
md5s = b"".join(hashlib.md5(large[i:i + (5 << 20)]).digest() for i in range(0, len(large), 5 << 20))
assert head["ETag"] == '"%s-3"' % hashlib.md5(md5s).hexdigest(), head["ETag"]
with open(os.path.join(MOUNT, "photos", "multi", "large.bin"), "rb") as f:
    assert f.read() == large
expect("multi/large.bin", large)
up = s3.create_multipart_upload(Bucket="photos", Key="multi/aborted")["UploadId"]
e1 = s3.upload_part(Bucket="photos", Key="multi/aborted", UploadId=up, PartNumber=1,
                    Body=b"p" * (5 << 20))["ETag"]
s3.upload_part(Bucket="photos", Key="multi/aborted", UploadId=up, PartNumber=2, Body=b"q")
parts = s3.list_parts(Bucket="photos", Key="multi/aborted", UploadId=up)["Parts"]
assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 5 << 20), (2, 1)], parts
assert parts[0]["ETag"] == e1
ups = s3.list_multipart_uploads(Bucket="photos")["Uploads"]
assert [(u["Key"], u["UploadId"]) for u in ups] == [("multi/aborted", up)], ups
listed = [o["Key"] for o in s3.list_objects_v2(Bucket="photos", Prefix="multi/")["Contents"]]
assert listed == ["multi/large.bin"], listed
assert not any(".cairn-put" in o["Key"] for o in s3.list_objects_v2(Bucket="photos")["Contents"])
bad = code(lambda: s3.complete_multipart_upload(
    Bucket="photos", Key="multi/aborted", UploadId=up,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]}))
assert bad[0] == "InvalidPart", bad
s3.abort_multipart_upload(Bucket="photos", Key="multi/aborted", UploadId=up)
assert code(lambda: s3.list_parts(Bucket="photos", Key="multi/aborted", UploadId=up))[0] == "NoSuchUpload"
assert s3.list_multipart_uploads(Bucket="photos").get("Uploads", []) == []
assert code(lambda: s3.head_object(Bucket="photos", Key="multi/aborted"))[1] == 404

# Delete: gone from the mount; a bucket with objects is not deleted.
s3.put_object(Bucket="photos", Key="doomed", Body=b"d")
s3.delete_object(Bucket="photos", Key="doomed")
assert gone_from_mount(os.path.join(MOUNT, "photos", "doomed"))
s3.delete_object(Bucket="photos", Key="never-was")
assert code(lambda: s3.delete_bucket(Bucket="photos"))[0] == "BucketNotEmpty"
s3.delete_bucket(Bucket="from-mount")
assert gone_from_mount(os.path.join(MOUNT, "from-mount"))

with open(os.path.join(EXPECTED, "manifest.json"), "w") as f:
    json.dump({k: v for k, v in manifest.items() if v is not None}, f)
print("OK")

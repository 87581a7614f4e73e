"""boto3 against a running `cairn serve`: pagination past 1,000 keys (keys
written through the mount), awkward keys and empty objects, conditional
PUTs, ListObjectVersions on an unversioned bucket, UploadPartCopy (whole
and ranged) and GetBucketLocation.

Environment: ENDPOINT, KEY_ID, SECRET, MANY (keys the test wrote through
the mount in bucket "many", each holding its own key's bytes), EXPECTED (a
directory outside the mount: the bytes each object must hold are written
there, with manifest.json mapping mount paths to them). Prints OK."""

import hashlib
import json
import os

from botocore.exceptions import ClientError
from cairn_s3 import client

s3 = client()
EXPECTED = os.environ["EXPECTED"]
manifest = {}


def expect(bucket, key, data):
    name = hashlib.sha256(f"{bucket}/{key}".encode()).hexdigest()
    with open(os.path.join(EXPECTED, name), "wb") as f:
        f.write(data)
    manifest[f"{bucket}/{key}"] = name


def error(fn, **kw):
    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{fn.__name__} succeeded")


# --- Pagination past 1,000 keys ------------------------------------------------
many = sorted(os.environ["MANY"].split(","), key=lambda k: k.encode())
assert len(many) > 1000
pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket="many"))
assert len(pages) == 2 and pages[0]["KeyCount"] == 1000 and pages[0]["IsTruncated"], len(pages)
assert [o["Key"] for p in pages for o in p["Contents"]] == many
v1 = list(s3.get_paginator("list_objects").paginate(Bucket="many"))
assert [o["Key"] for p in v1 for o in p["Contents"]] == many
versions = list(s3.get_paginator("list_object_versions").paginate(Bucket="many"))
assert len(versions) == 2, len(versions)
listed = [v for p in versions for v in p["Versions"]]
assert [v["Key"] for v in listed] == many
assert all(v["VersionId"] == "null" and v["IsLatest"] for v in listed)
small = list(s3.get_paginator("list_objects_v2").paginate(
    Bucket="many", PaginationConfig={"PageSize": 333}))
assert len(small) == -(-len(many) // 333)
assert [o["Key"] for p in small for o in p["Contents"]] == many
for k in many[::97]:
    assert s3.get_object(Bucket="many", Key=k)["Body"].read() == k.encode()
# Unversioned: a key asked for by version "null" is the object.
assert s3.head_object(Bucket="many", Key=many[0])["ContentLength"] == len(many[0].encode())

# --- Awkward keys and empty objects ---------------------------------------------
B = "keys"
s3.create_bucket(Bucket=B)
assert s3.get_bucket_location(Bucket=B).get("LocationConstraint") in (None, "")
deep = "deep/" + "/".join(f"level {i}" for i in range(24)) + "/leaf"
awkward = ["with space", "plus+sign", "per%cent", "a+b%20c d", "ünï/日本 語.txt",
           "emoji 🙂/x", "question?mark", "hash#tag", "amp&er=sand", "tilde~", deep,
           "empty", "dir with space/empty too"]
for i, k in enumerate(awkward):
    data = b"" if "empty" in k else os.urandom(100 + i * 997)
    s3.put_object(Bucket=B, Key=k, Body=data)
    expect(B, k, data)
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=B)["Contents"]]
assert keys == sorted(awkward, key=lambda k: k.encode()), keys
for k in awkward:
    got = s3.get_object(Bucket=B, Key=k)
    assert got["Body"].read() == open(os.path.join(EXPECTED, manifest[f"{B}/{k}"]), "rb").read(), k
assert s3.head_object(Bucket=B, Key="empty")["ContentLength"] == 0
assert s3.head_object(Bucket=B, Key="empty")["ETag"] == '"d41d8cd98f00b204e9800998ecf8427e"'
top = s3.list_objects_v2(Bucket=B, Delimiter="/")
assert sorted(p["Prefix"] for p in top["CommonPrefixes"]) == sorted(
    ["deep/", "dir with space/", "emoji 🙂/", "ünï/"]), top["CommonPrefixes"]
inner = s3.list_objects_v2(Bucket=B, Prefix="deep/level 0/level 1/", Delimiter="/")
assert [p["Prefix"] for p in inner["CommonPrefixes"]] == ["deep/level 0/level 1/level 2/"]
v = s3.list_object_versions(Bucket=B, Prefix="ünï/")
assert [(x["Key"], x["VersionId"]) for x in v["Versions"]] == [("ünï/日本 語.txt", "null")]

# --- Conditional PUTs ------------------------------------------------------------
s3.put_object(Bucket=B, Key="cond", Body=b"first", IfNoneMatch="*")
assert error(s3.put_object, Bucket=B, Key="cond", Body=b"second", IfNoneMatch="*") == ("PreconditionFailed", 412)
first = s3.head_object(Bucket=B, Key="cond")["ETag"]
assert first == '"%s"' % hashlib.md5(b"first").hexdigest()
assert error(s3.put_object, Bucket=B, Key="cond", Body=b"third",
             IfMatch='"%s"' % hashlib.md5(b"other").hexdigest()) == ("PreconditionFailed", 412)
assert s3.get_object(Bucket=B, Key="cond")["Body"].read() == b"first"
s3.put_object(Bucket=B, Key="cond", Body=b"fourth", IfMatch=first)
assert s3.get_object(Bucket=B, Key="cond")["Body"].read() == b"fourth"
expect(B, "cond", b"fourth")
assert error(s3.put_object, Bucket=B, Key="missing/key", Body=b"x", IfMatch=first) == ("NoSuchKey", 404)
assert error(s3.head_object, Bucket=B, Key="missing/key")[1] == 404

# --- UploadPartCopy ----------------------------------------------------------------
src = os.urandom(6 << 20)
s3.put_object(Bucket=B, Key="src.bin", Body=src)
expect(B, "src.bin", src)
up = s3.create_multipart_upload(Bucket=B, Key="joined.bin")["UploadId"]
p1 = s3.upload_part_copy(Bucket=B, Key="joined.bin", UploadId=up, PartNumber=1,
                         CopySource={"Bucket": B, "Key": "src.bin"})["CopyPartResult"]["ETag"]
assert p1 == '"%s"' % hashlib.md5(src).hexdigest()
p2 = s3.upload_part_copy(Bucket=B, Key="joined.bin", UploadId=up, PartNumber=2,
                         CopySource={"Bucket": B, "Key": "src.bin"},
                         CopySourceRange="bytes=1000-2000999")["CopyPartResult"]["ETag"]
assert p2 == '"%s"' % hashlib.md5(src[1000:2001000]).hexdigest()
p3 = s3.upload_part(Bucket=B, Key="joined.bin", UploadId=up, PartNumber=3, Body=b"tail")["ETag"]
assert error(s3.upload_part_copy, Bucket=B, Key="joined.bin", UploadId=up, PartNumber=4,
             CopySource={"Bucket": B, "Key": "src.bin"},
             CopySourceRange=f"bytes={len(src)}-{len(src) + 10}")[0] == "InvalidRange"
done = s3.complete_multipart_upload(Bucket=B, Key="joined.bin", UploadId=up, MultipartUpload={
    "Parts": [{"PartNumber": 1, "ETag": p1}, {"PartNumber": 2, "ETag": p2}, {"PartNumber": 3, "ETag": p3}]})
assert done["ETag"].endswith('-3"'), done["ETag"]
joined = src + src[1000:2001000] + b"tail"
assert s3.get_object(Bucket=B, Key="joined.bin")["Body"].read() == joined
expect(B, "joined.bin", joined)
assert s3.list_multipart_uploads(Bucket=B).get("Uploads", []) == []

with open(os.path.join(EXPECTED, "manifest.json"), "w") as f:
    json.dump(manifest, f)
print("OK")

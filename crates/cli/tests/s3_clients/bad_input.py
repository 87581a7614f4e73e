"""Bad input against a running `cairn serve` started with
--max-put-size 1048576 --max-object-size 2097152: each request gets S3's
error code and stores nothing. boto3 where it can send the request, else a
request signed with botocore's SigV4 and written to a socket by hand.

Environment: ENDPOINT, KEY_ID, SECRET. Prints OK at the end."""

import base64
import hashlib
import os
import socket
import time
import urllib.error
import urllib.request
import zlib

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

ENDPOINT = os.environ["ENDPOINT"]
KEY_ID = os.environ["KEY_ID"]
SECRET = os.environ["SECRET"]
HOST = ENDPOINT[len("http://"):]
MAX_PUT = 1 << 20
CFG = Config(signature_version="s3v4", s3={"addressing_style": "path"},
             retries={"max_attempts": 1})


def client(key_id=KEY_ID, secret=SECRET):
    return boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id=key_id,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=CFG)


s3 = client()


def error(fn, **kw):
    """The (code, status) a boto3 call fails with."""
    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{fn.__name__} {list(kw)} succeeded")


def absent(bucket, key):
    assert error(s3.head_object, Bucket=bucket, Key=key)[1] == 404, key


def signed(method, path, headers, payload_hash, query=""):
    """Headers signing a request (SigV4, header form) for payload_hash."""
    url = f"{ENDPOINT}{path}" + (f"?{query}" if query else "")
    req = AWSRequest(method=method, url=url, headers=dict(headers))
    req.headers["X-Amz-Content-SHA256"] = payload_hash
    SigV4Auth(Credentials(KEY_ID, SECRET), "s3", "us-east-1").add_auth(req)
    return dict(req.headers.items())


def raw(method, path, headers, body=b"", query="", cut=False):
    """Writes a request to a socket as given (Content-Length is the
    caller's: it may disagree with body); with cut, closes the writing
    side after the body. The status and the body of the answer, or None
    when the connection closed without one, tried three times: a server
    closing a connection with bytes it did not read (a body longer than
    its Content-Length) resets it, which may drop an answer not yet sent."""
    for _ in range(3):
        answer = raw_once(method, path, headers, body, query, cut)
        if answer is not None:
            return answer
    return None


def raw_once(method, path, headers, body, query, cut):
    host, port = HOST.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    target = path + (f"?{query}" if query else "")
    head = [f"{method} {target} HTTP/1.1", f"Host: {HOST}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items() if k.lower() != "host"]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    if cut:
        sock.shutdown(socket.SHUT_WR)
    got = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                break
            got += b
            # An answer whose body is whole is enough: the server may be
            # waiting for the rest of a request body it will not read.
            if b"\r\n\r\n" in got:
                top, _, rest = got.partition(b"\r\n\r\n")
                length = [l for l in top.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if length and len(rest) >= int(length[0].split(b":")[1]):
                    break
    except ConnectionResetError:
        pass
    sock.close()
    if not got:
        return None
    status = int(got.split(b" ", 2)[1])
    return status, got.partition(b"\r\n\r\n")[2].decode(errors="replace")


def has_code(answer, status, code):
    assert answer is not None and answer[0] == status and f"<Code>{code}</Code>" in answer[1], answer


B = "bad"
s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="keep", Body=b"kept")

# --- Bodies over the limit -------------------------------------------------
assert error(s3.put_object, Bucket=B, Key="new/dir/big", Body=b"x" * (MAX_PUT + 1)) == ("EntityTooLarge", 400)
absent(B, "new/dir/big")
# Refused before it is read: the answer comes while the 6 GB body it
# announces has not been sent.
h = signed("PUT", f"/{B}/huge", {"Content-Length": "6000000000"}, "UNSIGNED-PAYLOAD")
has_code(raw("PUT", f"/{B}/huge", h), 400, "EntityTooLarge")
absent(B, "huge")
# A part is held to the same limit.
up = s3.create_multipart_upload(Bucket=B, Key="parts")["UploadId"]
assert error(s3.upload_part, Bucket=B, Key="parts", UploadId=up, PartNumber=1,
             Body=b"p" * (MAX_PUT + 1)) == ("EntityTooLarge", 400)
# Parts each within the limit, together over the object limit (2 MiB).
etags = [s3.upload_part(Bucket=B, Key="parts", UploadId=up, PartNumber=n, Body=body)["ETag"]
         for n, body in [(1, b"a" * MAX_PUT), (2, b"b" * MAX_PUT), (3, b"c")]]
done = {"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]}
assert error(s3.complete_multipart_upload, Bucket=B, Key="parts", UploadId=up,
             MultipartUpload=done) == ("EntityTooLarge", 400)
absent(B, "parts")
# Within the limit, the same upload completes.
done["Parts"] = done["Parts"][1:]
s3.complete_multipart_upload(Bucket=B, Key="parts", UploadId=up, MultipartUpload=done)
assert s3.get_object(Bucket=B, Key="parts")["Body"].read() == b"b" * MAX_PUT + b"c"
s3.delete_object(Bucket=B, Key="parts")

# --- Names -----------------------------------------------------------------
assert error(s3.put_object, Bucket=B, Key="k" * 1025, Body=b"x") == ("KeyTooLongError", 400)
assert error(s3.put_object, Bucket=B, Key="d/" + "k" * 1023, Body=b"x") == ("KeyTooLongError", 400)
absent(B, "d/")
for name in ["Bad_Name", "ab", "-dash-first", "a" * 64]:
    assert error(s3.create_bucket, Bucket=name) == ("InvalidBucketName", 400), name
assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == [B]

# --- Malformed XML -----------------------------------------------------------
xml = b"<Delete><Object><Key>keep</Key></Object>"  # never closed
h = signed("POST", f"/{B}", {
    "Content-Length": str(len(xml)),
    "Content-MD5": base64.b64encode(hashlib.md5(xml).digest()).decode(),
}, hashlib.sha256(xml).hexdigest(), query="delete=")
has_code(raw("POST", f"/{B}", h, xml, query="delete="), 400, "MalformedXML")
assert s3.get_object(Bucket=B, Key="keep")["Body"].read() == b"kept"
up = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
s3.upload_part(Bucket=B, Key="mp", UploadId=up, PartNumber=1, Body=b"part")
xml = b"<CompleteMultipartUpload><Part><PartNumber>1</Part>"
h = signed("POST", f"/{B}/mp", {"Content-Length": str(len(xml))},
           hashlib.sha256(xml).hexdigest(), query=f"uploadId={up}")
has_code(raw("POST", f"/{B}/mp", h, xml, query=f"uploadId={up}"), 400, "MalformedXML")
absent(B, "mp")
s3.abort_multipart_upload(Bucket=B, Key="mp", UploadId=up)

# --- Bodies not as long as they say -----------------------------------------
body = os.urandom(1000)
h = signed("PUT", f"/{B}/cut/short", {"Content-Length": "1000"}, "UNSIGNED-PAYLOAD")
has_code(raw("PUT", f"/{B}/cut/short", h, body[:500], cut=True), 400, "IncompleteBody")
h = signed("PUT", f"/{B}/cut/signed", {"Content-Length": "1000"}, hashlib.sha256(body).hexdigest())
has_code(raw("PUT", f"/{B}/cut/signed", h, body[:500], cut=True), 400, "IncompleteBody")
# Longer than Content-Length: the signed hash is of all 1000 bytes, the
# server reads 500 of them.
h = signed("PUT", f"/{B}/long/signed", {"Content-Length": "500"}, hashlib.sha256(body).hexdigest())
has_code(raw("PUT", f"/{B}/long/signed", h, body), 400, "XAmzContentSHA256Mismatch")
h = signed("PUT", f"/{B}/long/md5", {
    "Content-Length": "500",
    "Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode(),
}, "UNSIGNED-PAYLOAD")
has_code(raw("PUT", f"/{B}/long/md5", h, body), 400, "BadDigest")
for k in ["cut/short", "cut/signed", "long/signed", "long/md5", "cut/", "long/"]:
    absent(B, k)


# --- Checksum trailers -------------------------------------------------------
def chunked_put(key, data, crc):
    body = b"%x\r\n%s\r\n0\r\nx-amz-checksum-crc32:%s\r\n\r\n" % (len(data), data, crc.encode())
    h = signed("PUT", f"/{B}/{key}", {
        "Content-Length": str(len(body)),
        "Content-Encoding": "aws-chunked",
        "X-Amz-Decoded-Content-Length": str(len(data)),
        "X-Amz-Trailer": "x-amz-checksum-crc32",
    }, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    return raw("PUT", f"/{B}/{key}", h, body)


data = os.urandom(3000)
good = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
bad = base64.b64encode((zlib.crc32(data) ^ 1).to_bytes(4, "big")).decode()
has_code(chunked_put("trailer/bad", data, bad), 400, "BadDigest")
absent(B, "trailer/bad")
# The same body with its right trailer is stored: the refusal was the
# checksum's.
answer = chunked_put("trailer/good", data, good)
assert answer is not None and answer[0] == 200, answer
assert s3.get_object(Bucket=B, Key="trailer/good")["Body"].read() == data
s3.delete_object(Bucket=B, Key="trailer/good")

# --- Signatures --------------------------------------------------------------
put = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "presigned"}, ExpiresIn=1)
get = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "keep"}, ExpiresIn=1)
time.sleep(2.5)
for url, method, data in [(put, "PUT", b"late"), (get, "GET", None)]:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=data, method=method))
        raise AssertionError(f"an expired presigned {method} was served")
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        assert e.code == 403 and "<Code>AccessDenied</Code>" in text, (e.code, text)
absent(B, "presigned")
fresh = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "presigned"}, ExpiresIn=600)
urllib.request.urlopen(urllib.request.Request(fresh, data=b"in time", method="PUT"))
assert s3.get_object(Bucket=B, Key="presigned")["Body"].read() == b"in time"
s3.delete_object(Bucket=B, Key="presigned")

forged = client(secret=SECRET[:-1] + ("A" if SECRET[-1] != "A" else "B"))
assert error(forged.put_object, Bucket=B, Key="forged", Body=b"x") == ("SignatureDoesNotMatch", 403)
unknown = client(key_id="CKUNKNOWNKEY0000")
assert error(unknown.put_object, Bucket=B, Key="forged", Body=b"x") == ("InvalidAccessKeyId", 403)
# A body altered after signing (the signature is over its hash).
h = signed("PUT", f"/{B}/forged", {"Content-Length": "4"}, hashlib.sha256(b"good").hexdigest())
has_code(raw("PUT", f"/{B}/forged", h, b"evil"), 400, "XAmzContentSHA256Mismatch")
absent(B, "forged")

# Nothing of all this was stored.
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=B).get("Contents", [])]
assert keys == ["keep"], keys
assert s3.list_multipart_uploads(Bucket=B).get("Uploads", []) == []
print("OK")

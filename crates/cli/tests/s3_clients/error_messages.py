"""Every refusal a client can meet names its S3 code and says why: boto3
(and so the AWS CLI) prints "Unknown" for an error answer without a
<Message>, or without a <Code>. Against a running `cairn serve`.

Environment: as `cairn_s3.client()`. Prints OK at the end."""

import os

from botocore.exceptions import ClientError

from cairn_s3 import client

s3 = client()


def refusal(fn, **kw):
    """The (code, message) a boto3 call fails with; each is S3's, never
    botocore's stand-in "Unknown"."""
    try:
        fn(**kw)
    except ClientError as e:
        err = e.response["Error"]
        code, message = err.get("Code", ""), err.get("Message", "")
        assert code and code != "Unknown", (fn.__name__, kw, err, str(e))
        assert message and message != "Unknown", (fn.__name__, kw, err, str(e))
        assert "Unknown" not in str(e), str(e)
        return code, message
    raise AssertionError(f"{fn.__name__} {list(kw)} succeeded")


def expect(code, fn, **kw):
    got, message = refusal(fn, **kw)
    assert got == code, (fn.__name__, code, got, message)
    print(f"{fn.__name__}: {got}: {message}")


B = "errs"
s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="four", Body=b"four")
s3.put_object(Bucket=B, Key="dir/inner", Body=b"x")

expect("NoSuchKey", s3.get_object, Bucket=B, Key="missing")
expect("NoSuchKey", s3.get_object, Bucket=B, Key="four/below")
expect("NoSuchKey", s3.copy_object, Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "missing"})
expect("NoSuchBucket", s3.get_object, Bucket="nobucket", Key="k")
expect("NoSuchBucket", s3.list_objects_v2, Bucket="nobucket")
expect("NoSuchBucket", s3.delete_bucket, Bucket="nobucket")
expect("NoSuchBucket", s3.put_object, Bucket="nobucket", Key="k", Body=b"x")
expect("BucketNotEmpty", s3.delete_bucket, Bucket=B)
expect("BucketAlreadyOwnedByYou", s3.create_bucket, Bucket=B)
expect("InvalidBucketName", s3.create_bucket, Bucket="Bad_Name")
expect("KeyTooLongError", s3.put_object, Bucket=B, Key="k" * 1025, Body=b"x")
expect("InvalidRange", s3.get_object, Bucket=B, Key="four", Range="bytes=100-200")
expect("PreconditionFailed", s3.get_object, Bucket=B, Key="four", IfMatch='"0123"')
expect("PreconditionFailed", s3.put_object, Bucket=B, Key="four", Body=b"x", IfNoneMatch="*")
expect("NoSuchUpload", s3.upload_part, Bucket=B, Key="mp", UploadId="no-such-upload",
       PartNumber=1, Body=b"x")
up = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
s3.upload_part(Bucket=B, Key="mp", UploadId=up, PartNumber=1, Body=b"part")
expect("InvalidPart", s3.complete_multipart_upload, Bucket=B, Key="mp", UploadId=up,
       MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]})
s3.abort_multipart_upload(Bucket=B, Key="mp", UploadId=up)

# Refusals s3s answers before the gateway sees the request.
secret = os.environ["SECRET"]
os.environ["SECRET"] = secret[:-1] + ("A" if secret[-1] != "A" else "B")
expect("SignatureDoesNotMatch", client().get_object, Bucket=B, Key="four")
os.environ["SECRET"] = secret
os.environ["KEY_ID"], key_id = "CKUNKNOWNKEY0000", os.environ["KEY_ID"]
expect("InvalidAccessKeyId", client().get_object, Bucket=B, Key="four")
os.environ["KEY_ID"] = key_id

# A HEAD answer has no body: botocore names the status, never "Unknown".
code, message = refusal(s3.head_object, Bucket=B, Key="missing")
assert (code, message) == ("404", "Not Found"), (code, message)
print("OK")

"""The boto3 client every S3 test script uses: the gateway at ENDPOINT with
the key KEY_ID / SECRET from the environment (`Served::python` sets them),
path-style addressing, and one attempt per request (on loopback a retry
would only hide a fault). Keyword arguments go into botocore's Config."""

import os

import boto3
from botocore.config import Config


def client(**config):
    config.setdefault("retries", {"max_attempts": 1})
    return boto3.client(
        "s3",
        endpoint_url=os.environ["ENDPOINT"],
        aws_access_key_id=os.environ["KEY_ID"],
        aws_secret_access_key=os.environ["SECRET"],
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, **config),
    )

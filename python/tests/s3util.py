"""Helpers shared by the S3 tests (boto3 clients, bucket cleanup, ETag arithmetic)."""

from __future__ import annotations

import hashlib
import uuid

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

MiB = 1024 * 1024
REGION = "us-east-1"


def make_s3(endpoint: str, creds=None, region: str = REGION, **config):
    """A boto3 S3 client for a Gristmill proxy: path-style, SigV4 with `creds` (an object with
    access_key / secret_key), or unsigned requests when `creds` is None."""
    cfg = Config(
        signature_version=UNSIGNED if creds is None else "s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": 1, "mode": "standard"},
        **config,
    )
    kw = {}
    if creds is not None:
        kw = {"aws_access_key_id": creds.access_key, "aws_secret_access_key": creds.secret_key}
    return boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region, config=cfg, **kw)


def new_bucket_name(prefix: str = "s3t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def empty_and_delete(s3, name: str) -> None:
    """Best-effort cleanup: aborts uploads, deletes every object, removes the bucket."""
    try:
        for u in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
            s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        # A versioned bucket keeps noncurrent versions and delete markers: those go too.
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
            keys = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if keys:
                s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        s3.delete_bucket(Bucket=name)
    except ClientError:
        pass


def err(exc_info) -> tuple[str, int]:
    """(S3 error code, HTTP status) of a pytest.raises(ClientError) result."""
    e = exc_info.value
    return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]


def outcome(call) -> tuple[str, int] | None:
    """None when `call()` succeeds, else its (S3 error code, HTTP status)."""
    from botocore.exceptions import ClientError

    try:
        call()
        return None
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]


def multipart_etag(path, part_size: int) -> str:
    """The S3 ETag of a file uploaded in parts of `part_size` bytes: md5 of the parts' md5s, -N."""
    digests = []
    with open(path, "rb") as f:
        while chunk := f.read(part_size):
            digests.append(hashlib.md5(chunk).digest())
    return f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(digests)}"'


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()

"""SSE-C through the S3 front (issue 32), with boto3 against a real cluster: objects written
with a customer key are stored as ciphertext (read back over the native API, the bytes on the
targets are not the plaintext), read back only with the same key (none or another: 400), whole
or by any range, single-part or multipart (parts listed with gaps, ranges across part
boundaries, a part sent again re-encrypted under a fresh IV); a part under another key is
refused; copies of SSE-C objects are refused (501),
never copied as ciphertext; SSE-S3/KMS headers are refused (501), never ignored.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import urllib.request

import pytest

from s3util import MiB, make_s3, new_bucket_name, outcome


def _key(seed: int) -> dict:
    raw = bytes([seed]) * 32
    return {
        "SSECustomerAlgorithm": "AES256",
        "SSECustomerKey": base64.b64encode(raw).decode(),
        "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(raw).digest()).decode(),
    }


KEY, OTHER = _key(1), _key(2)


@pytest.fixture
def s3(s3_endpoint, default_creds):
    c = make_s3(s3_endpoint, default_creds)
    yield c
    c.close()


@pytest.fixture
def bkt(s3):
    name = new_bucket_name("ssec")
    s3.create_bucket(Bucket=name)
    return name


def _stored_bytes(endpoint: str, bucket: str, key: str) -> bytes:
    """What the cluster keeps, read over the native API (no key involved)."""
    with urllib.request.urlopen(f"{endpoint}/v1/objects/{bucket}/{key}") as r:
        return r.read()


def test_single_part_round_trip_ranges_and_wrong_keys(s3, bkt, s3_endpoint):
    data = os.urandom(300_001)
    put = s3.put_object(Bucket=bkt, Key="o", Body=data, **KEY)
    assert put["SSECustomerKeyMD5"] == KEY["SSECustomerKeyMD5"]
    stored = _stored_bytes(s3_endpoint, bkt, "o")
    assert len(stored) == len(data) and stored != data
    got = s3.get_object(Bucket=bkt, Key="o", **KEY)
    assert got["Body"].read() == data
    assert got["SSECustomerAlgorithm"] == "AES256"
    for first, last in [(0, 0), (15, 16), (17, 40_000), (299_990, 300_000), (123_457, 299_999)]:
        part = s3.get_object(Bucket=bkt, Key="o", Range=f"bytes={first}-{last}", **KEY)
        assert part["Body"].read() == data[first:last + 1], (first, last)
    assert s3.head_object(Bucket=bkt, Key="o", **KEY)["ContentLength"] == len(data)
    assert outcome(lambda: s3.get_object(Bucket=bkt, Key="o")) == ("InvalidRequest", 400)
    assert outcome(lambda: s3.get_object(Bucket=bkt, Key="o", **OTHER)) == ("InvalidRequest", 400)
    assert outcome(lambda: s3.head_object(Bucket=bkt, Key="o"))[1] == 400
    bad_md5 = {**KEY, "SSECustomerKeyMD5": OTHER["SSECustomerKeyMD5"]}
    assert outcome(lambda: s3.put_object(Bucket=bkt, Key="p", Body=b"x", **bad_md5)) \
        == ("InvalidArgument", 400)
    # A plain object read with a key: the parameters do not apply.
    s3.put_object(Bucket=bkt, Key="plain", Body=b"plain")
    assert outcome(lambda: s3.get_object(Bucket=bkt, Key="plain", **KEY)) == ("InvalidRequest", 400)


def test_multipart_with_gaps_and_ranges_across_parts(s3, bkt):
    rng = random.Random(7)
    sizes = {1: 5 * MiB + 3, 3: 5 * MiB, 4: 1234}
    parts = {n: rng.randbytes(size) for n, size in sizes.items()}
    up = s3.create_multipart_upload(Bucket=bkt, Key="mp", **KEY)
    listed = []
    for n, body in parts.items():
        r = s3.upload_part(Bucket=bkt, Key="mp", UploadId=up["UploadId"], PartNumber=n,
                           Body=body, **KEY)
        listed.append({"PartNumber": n, "ETag": r["ETag"]})
    # A part sent again is encrypted under a fresh IV: the same plaintext gives another
    # ciphertext (its ETag is the ciphertext's MD5), so no keystream covers two plaintexts.
    again = s3.upload_part(Bucket=bkt, Key="mp", UploadId=up["UploadId"], PartNumber=4,
                           Body=parts[4], **KEY)
    assert again["ETag"] != listed[-1]["ETag"]
    listed[-1] = {"PartNumber": 4, "ETag": again["ETag"]}
    # A part under another key, or none, is refused.
    assert outcome(lambda: s3.upload_part(Bucket=bkt, Key="mp", UploadId=up["UploadId"],
                                        PartNumber=2, Body=b"x", **OTHER))[1] == 400
    assert outcome(lambda: s3.upload_part(Bucket=bkt, Key="mp", UploadId=up["UploadId"],
                                        PartNumber=2, Body=b"x"))[1] == 400
    s3.complete_multipart_upload(Bucket=bkt, Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": listed})
    data = b"".join(parts.values())
    assert s3.get_object(Bucket=bkt, Key="mp", **KEY)["Body"].read() == data
    b1 = sizes[1]
    for first, last in [(b1 - 5, b1 + 5), (0, len(data) - 1), (b1 + 5 * MiB - 1, len(data) - 1)]:
        got = s3.get_object(Bucket=bkt, Key="mp", Range=f"bytes={first}-{last}", **KEY)
        assert got["Body"].read() == data[first:last + 1], (first, last)
    second = s3.get_object(Bucket=bkt, Key="mp", PartNumber=2, **KEY)
    assert second["Body"].read() == parts[3]
    assert outcome(lambda: s3.get_object(Bucket=bkt, Key="mp", **OTHER))[1] == 400


def test_copies_of_encrypted_objects_and_other_sse_are_refused(s3, bkt):
    s3.put_object(Bucket=bkt, Key="src", Body=b"secret", **KEY)
    assert outcome(lambda: s3.copy_object(Bucket=bkt, Key="dst",
                                        CopySource={"Bucket": bkt, "Key": "src"})) \
        == ("NotImplemented", 501)
    assert outcome(lambda: s3.copy_object(
        Bucket=bkt, Key="dst", CopySource={"Bucket": bkt, "Key": "src"},
        CopySourceSSECustomerAlgorithm="AES256",
        CopySourceSSECustomerKey=KEY["SSECustomerKey"],
        CopySourceSSECustomerKeyMD5=KEY["SSECustomerKeyMD5"],
    ))[1] == 501
    assert outcome(lambda: s3.head_object(Bucket=bkt, Key="dst"))[1] == 404
    assert outcome(lambda: s3.put_object(Bucket=bkt, Key="kms", Body=b"x",
                                       ServerSideEncryption="aws:kms")) \
        == ("NotImplemented", 501)
    assert outcome(lambda: s3.head_object(Bucket=bkt, Key="kms"))[1] == 404

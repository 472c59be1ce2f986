"""S3 API semantics checked with boto3 (an unmodified client) against a cluster with S3 auth on.

Error codes are asserted as the S3 error code in the XML body (boto3's `Error.Code`) plus the
HTTP status, the way real S3 clients classify failures.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import logging
import os
import time
import urllib.error
import urllib.request
import warnings
import xml.etree.ElementTree as ET
import zlib
from unittest import mock

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from gristmill import Client
from s3util import MiB, empty_and_delete, err, make_s3, new_bucket_name


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def http_get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def xml_code(body: bytes) -> str:
    root = ET.fromstring(body)
    return root.findtext("Code") or ""


@pytest.fixture(scope="module")
def s3(auth_s3_endpoint, admin_creds):
    c = make_s3(auth_s3_endpoint, admin_creds)
    yield c
    c.close()


@pytest.fixture
def bkt(s3):
    """A fresh S3 bucket on the auth-on cluster, emptied and removed afterwards."""
    name = new_bucket_name()
    s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete(s3, name)


# --- authentication and authorization ---------------------------------------------------------


def test_wrong_secret_is_signature_mismatch(auth_s3_endpoint, admin_creds):
    bad = type(admin_creds)(admin_creds.access_key, admin_creds.secret_key + "x")
    with pytest.raises(ClientError) as ei:
        make_s3(auth_s3_endpoint, bad).list_buckets()
    assert err(ei) == ("SignatureDoesNotMatch", 403)


def test_unknown_access_key(auth_s3_endpoint, admin_creds):
    bad = type(admin_creds)("nobody", "whatever-secret")
    with pytest.raises(ClientError) as ei:
        make_s3(auth_s3_endpoint, bad).list_buckets()
    assert err(ei) == ("InvalidAccessKeyId", 403)


def test_unsigned_request_denied_when_auth_on(auth_s3_endpoint, s3, bkt):
    anon = make_s3(auth_s3_endpoint, None)
    with pytest.raises(ClientError) as ei:
        anon.list_buckets()
    assert err(ei) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as ei:
        anon.put_object(Bucket=bkt, Key="anon", Body=b"x")
    assert err(ei) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="anon")
    assert err(ei)[1] == 404


def test_auth_off_accepts_unsigned_and_default_key(s3_endpoint, default_creds, admin_creds):
    anon = make_s3(s3_endpoint, None)
    signed = make_s3(s3_endpoint, default_creds)
    name = new_bucket_name()
    anon.create_bucket(Bucket=name)
    try:
        anon.put_object(Bucket=name, Key="k", Body=b"anon")
        assert signed.get_object(Bucket=name, Key="k")["Body"].read() == b"anon"
        signed.put_object(Bucket=name, Key="k2", Body=b"signed")
        assert anon.get_object(Bucket=name, Key="k2")["Body"].read() == b"signed"
        # Keys configured on the other cluster mean nothing here.
        with pytest.raises(ClientError) as ei:
            make_s3(s3_endpoint, admin_creds).list_buckets()
        assert err(ei) == ("InvalidAccessKeyId", 403)
    finally:
        empty_and_delete(anon, name)


def test_clock_skew_refused(auth_s3_endpoint, admin_creds):
    skewed = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(minutes=16)
    c = make_s3(auth_s3_endpoint, admin_creds)
    with mock.patch.object(botocore.auth, "get_current_datetime", lambda *a, **k: skewed):
        with pytest.raises(ClientError) as ei:
            c.list_buckets()
    assert err(ei) == ("RequestTimeTooSkewed", 403)
    # 5 minutes off is within S3's tolerance.
    ok = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(minutes=5)
    with mock.patch.object(botocore.auth, "get_current_datetime", lambda *a, **k: ok):
        c.list_buckets()


def test_reader_may_read_but_not_write(auth_s3_endpoint, reader_creds, s3, bkt):
    s3.put_object(Bucket=bkt, Key="readable", Body=b"for readers")
    reader = make_s3(auth_s3_endpoint, reader_creds)
    assert reader.get_object(Bucket=bkt, Key="readable")["Body"].read() == b"for readers"
    assert any(b["Name"] == bkt for b in reader.list_buckets()["Buckets"])
    with pytest.raises(ClientError) as ei:
        reader.put_object(Bucket=bkt, Key="denied", Body=b"nope")
    assert err(ei) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="denied")
    assert err(ei)[1] == 404
    with pytest.raises(ClientError) as ei:
        reader.delete_object(Bucket=bkt, Key="readable")
    assert err(ei) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as ei:
        reader.create_bucket(Bucket=new_bucket_name())
    assert err(ei) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as ei:
        reader.copy_object(Bucket=bkt, Key="copied", CopySource={"Bucket": bkt, "Key": "readable"})
    assert err(ei) == ("AccessDenied", 403)
    assert s3.get_object(Bucket=bkt, Key="readable")["Body"].read() == b"for readers"


def test_presigned_get_works(s3, bkt):
    s3.put_object(Bucket=bkt, Key="dir/pre signed.txt", Body=b"presigned body")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bkt, "Key": "dir/pre signed.txt"}, ExpiresIn=300)
    assert http_get(url) == (200, b"presigned body")
    # Tampering with the signed query is refused.
    status, body = http_get(url.replace("X-Amz-Expires=300", "X-Amz-Expires=301"))
    assert status == 403 and xml_code(body) == "SignatureDoesNotMatch"


def test_presigned_put_works(s3, bkt):
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bkt, "Key": "up"}, ExpiresIn=300)
    req = urllib.request.Request(url, data=b"uploaded via presigned PUT", method="PUT")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
    assert s3.get_object(Bucket=bkt, Key="up")["Body"].read() == b"uploaded via presigned PUT"


def test_presigned_expired_refused(s3, bkt):
    s3.put_object(Bucket=bkt, Key="k", Body=b"v")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bkt, "Key": "k"}, ExpiresIn=1)
    time.sleep(2.2)
    status, body = http_get(url)
    assert status == 403
    assert xml_code(body) == "AccessDenied"


# --- buckets ----------------------------------------------------------------------------------


def test_bucket_lifecycle_and_errors(s3):
    name = new_bucket_name()
    s3.create_bucket(Bucket=name)
    try:
        assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        s3.head_bucket(Bucket=name)
        loc = s3.get_bucket_location(Bucket=name)["LocationConstraint"]
        assert loc in (None, "", "us-east-1")
        # AWS's CreateBucket reference: in us-east-1 the owner's second create is a 200
        # that changes nothing (409 BucketAlreadyOwnedByYou in other regions).
        s3.create_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="x", Body=b"1")
        with pytest.raises(ClientError) as ei:
            s3.delete_bucket(Bucket=name)
        assert err(ei) == ("BucketNotEmpty", 409)
        s3.delete_object(Bucket=name, Key="x")
        s3.delete_bucket(Bucket=name)
    finally:
        empty_and_delete(s3, name)
    with pytest.raises(ClientError) as ei:
        s3.head_bucket(Bucket=name)
    assert err(ei)[1] == 404
    with pytest.raises(ClientError) as ei:
        s3.list_objects_v2(Bucket=name)
    assert err(ei) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=name, Key="x")
    assert err(ei) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=name, Key="x", Body=b"1")
    assert err(ei) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as ei:
        s3.delete_bucket(Bucket=name)
    assert err(ei) == ("NoSuchBucket", 404)


def test_answers_carry_the_request_id(s3, bkt):
    """Every S3 answer names its request (x-amz-request-id, and <RequestId> in an error
    document, which boto3 reads into ResponseMetadata) — the id the nodes log it under: the
    client's X-Request-Id when it sends one."""
    r = s3.put_object(Bucket=bkt, Key="k", Body=b"1")
    made = r["ResponseMetadata"]["RequestId"]
    assert len(made) == 32 and made == r["ResponseMetadata"]["HTTPHeaders"]["x-request-id"]
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="missing")
    assert err(ei) == ("NoSuchKey", 404)
    meta = ei.value.response["ResponseMetadata"]
    assert meta["RequestId"] == meta["HTTPHeaders"]["x-request-id"], meta
    assert len(meta["RequestId"]) == 32

    def with_id(request, **_):
        request.headers["X-Request-Id"] = "client-chosen-<&>-0001"
    s3.meta.events.register("before-sign.s3.GetObject", with_id)
    try:
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=bkt, Key="missing")
        assert ei.value.response["ResponseMetadata"]["RequestId"] == "client-chosen-<&>-0001"
        assert ei.value.response["Error"]["Code"] == "NoSuchKey"
    finally:
        s3.meta.events.unregister("before-sign.s3.GetObject", with_id)
    # The error document itself, as any client sees it (escaped XML).
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bkt, "Key": "missing"})
    req = urllib.request.Request(url, headers={"X-Request-Id": "raw-0002"})
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(req, timeout=10)
    body = he.value.read().decode()
    assert he.value.headers["x-amz-request-id"] == "raw-0002"
    assert ET.fromstring(body).findtext("RequestId") == "raw-0002", body
    assert ET.fromstring(body).findtext("Code") == "NoSuchKey", body


@pytest.mark.parametrize("name", ["ab", "x" * 64, "Upper-Case", "under_score", "-leading", "192.168.1.1", "a..b"])
def test_invalid_bucket_name(s3, name):
    with pytest.raises(ClientError) as ei:
        s3.create_bucket(Bucket=name)
    assert err(ei) == ("InvalidBucketName", 400)


# --- objects ----------------------------------------------------------------------------------


def test_put_get_head_delete_and_nosuchkey(s3, bkt):
    data = os.urandom(1000)
    r = s3.put_object(Bucket=bkt, Key="a/b/c.bin", Body=data)
    assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    g = s3.get_object(Bucket=bkt, Key="a/b/c.bin")
    assert g["Body"].read() == data
    assert g["ContentLength"] == 1000 and g["ETag"] == r["ETag"]
    h = s3.head_object(Bucket=bkt, Key="a/b/c.bin")
    assert h["ContentLength"] == 1000 and h["ETag"] == r["ETag"]
    assert isinstance(h["LastModified"], datetime.datetime)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - h["LastModified"]).total_seconds()) < 120
    s3.delete_object(Bucket=bkt, Key="a/b/c.bin")
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="a/b/c.bin")
    assert err(ei) == ("NoSuchKey", 404)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="a/b/c.bin")
    assert err(ei)[1] == 404
    # Deleting a missing key succeeds in S3.
    s3.delete_object(Bucket=bkt, Key="a/b/c.bin")


def test_empty_object_and_odd_keys(s3, bkt):
    keys = ["empty", "with space/and+plus", "unicode/ünïcødé-ключ", "q?uery#hash&amp=x", "trailing/"]
    for k in keys:
        s3.put_object(Bucket=bkt, Key=k, Body=k.encode() if k != "empty" else b"")
    for k in keys:
        assert s3.get_object(Bucket=bkt, Key=k)["Body"].read() == (k.encode() if k != "empty" else b"")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bkt)["Contents"]]
    assert sorted(listed) == sorted(keys)


def test_key_too_long(s3, bkt):
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bkt, Key="k" * 1025, Body=b"x")
    assert err(ei) == ("KeyTooLongError", 400)
    s3.put_object(Bucket=bkt, Key="k" * 1024, Body=b"x")  # the limit itself is fine
    assert s3.head_object(Bucket=bkt, Key="k" * 1024)["ContentLength"] == 1


def test_range_get_with_default_checksum_validation(auth_s3_endpoint, admin_creds, bkt, caplog):
    # Default config: boto3 sends a CRC32 on PUT and validates checksums it gets back on GET.
    c = make_s3(auth_s3_endpoint, admin_creds)
    data = os.urandom(64 * 1024)
    c.put_object(Bucket=bkt, Key="r", Body=data)
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")
        r = c.get_object(Bucket=bkt, Key="r", Range="bytes=100-1099")
        assert r["Body"].read() == data[100:1100]
        assert r["ContentRange"] == f"bytes 100-1099/{len(data)}"
        assert r["ContentLength"] == 1000
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert c.get_object(Bucket=bkt, Key="r", Range="bytes=-10")["Body"].read() == data[-10:]
        assert c.get_object(Bucket=bkt, Key="r", Range=f"bytes={len(data) - 5}-")["Body"].read() == data[-5:]
        # A range past the end is clamped.
        assert c.get_object(Bucket=bkt, Key="r", Range="bytes=65530-99999999")["Body"].read() == data[65530:]
        # Full GET: the checksum the server returns (if any) must validate.
        assert c.get_object(Bucket=bkt, Key="r")["Body"].read() == data
        assert c.get_object(Bucket=bkt, Key="r", ChecksumMode="ENABLED")["Body"].read() == data
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    with pytest.raises(ClientError) as ei:
        c.get_object(Bucket=bkt, Key="r", Range=f"bytes={len(data)}-")
    assert err(ei) == ("InvalidRange", 416)


def test_conditional_get(s3, bkt):
    etag = s3.put_object(Bucket=bkt, Key="c", Body=b"conditional")["ETag"]
    lm = s3.head_object(Bucket=bkt, Key="c")["LastModified"]
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="c", IfNoneMatch=etag)
    assert err(ei)[1] == 304  # boto3 reports Code "304" / "Not Modified"
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="c", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert err(ei) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bkt, Key="c", IfMatch=etag)["Body"].read() == b"conditional"
    assert s3.get_object(Bucket=bkt, Key="c", IfNoneMatch='"other"')["Body"].read() == b"conditional"
    future = lm + datetime.timedelta(hours=1)
    past = lm - datetime.timedelta(hours=1)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="c", IfModifiedSince=future)
    assert err(ei)[1] == 304
    assert s3.get_object(Bucket=bkt, Key="c", IfModifiedSince=past)["Body"].read() == b"conditional"
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="c", IfUnmodifiedSince=past)
    assert err(ei) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bkt, Key="c", IfUnmodifiedSince=future)["Body"].read() == b"conditional"
    # HEAD honours the same conditions (no body, so status only).
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="c", IfNoneMatch=etag)
    assert err(ei)[1] == 304
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="c", IfMatch='"nope"')
    assert err(ei)[1] == 412


META = {
    "Metadata": {"color": "blue", "owner-id": "42"},
    "ContentType": "application/x-gristmill-test",
    "ContentEncoding": "identity",
    "CacheControl": "max-age=3600, must-revalidate",
    "ContentDisposition": 'attachment; filename="report.bin"',
}


def _assert_meta(r, meta=META):
    assert r["Metadata"] == meta["Metadata"]
    for k in ("ContentType", "ContentEncoding", "CacheControl", "ContentDisposition"):
        assert r.get(k) == meta[k], k


def test_metadata_round_trip(s3, bkt):
    s3.put_object(Bucket=bkt, Key="m", Body=b"meta", **META)
    _assert_meta(s3.head_object(Bucket=bkt, Key="m"))
    g = s3.get_object(Bucket=bkt, Key="m")
    _assert_meta(g)
    assert g["Body"].read() == b"meta"
    # response-content-* query overrides
    o = s3.get_object(
        Bucket=bkt, Key="m", ResponseContentType="text/plain", ResponseCacheControl="no-cache",
        ResponseContentDisposition="inline", ResponseContentEncoding="identity",
        ResponseContentLanguage="en",
    )
    assert o["ContentType"] == "text/plain"
    assert o["CacheControl"] == "no-cache"
    assert o["ContentDisposition"] == "inline"
    assert o["ContentLanguage"] == "en"
    assert o["Body"].read() == b"meta"


def test_default_content_type(s3, bkt):
    s3.put_object(Bucket=bkt, Key="plain", Body=b"x")
    assert s3.head_object(Bucket=bkt, Key="plain")["ContentType"] in ("binary/octet-stream", "application/octet-stream")


def test_copy_object_metadata_directive(s3, bkt):
    s3.put_object(Bucket=bkt, Key="src", Body=b"copy me", **META)
    src_etag = s3.head_object(Bucket=bkt, Key="src")["ETag"]
    r = s3.copy_object(Bucket=bkt, Key="dst-copy", CopySource={"Bucket": bkt, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == src_etag
    h = s3.head_object(Bucket=bkt, Key="dst-copy")
    _assert_meta(h)
    assert h["ETag"] == src_etag
    s3.copy_object(
        Bucket=bkt, Key="dst-replace", CopySource={"Bucket": bkt, "Key": "src"},
        MetadataDirective="REPLACE", Metadata={"fresh": "yes"}, ContentType="text/csv",
    )
    h = s3.head_object(Bucket=bkt, Key="dst-replace")
    assert h["Metadata"] == {"fresh": "yes"}
    assert h["ContentType"] == "text/csv"
    assert "CacheControl" not in h and "ContentDisposition" not in h
    assert s3.get_object(Bucket=bkt, Key="dst-replace")["Body"].read() == b"copy me"
    # Copy across buckets, source key with characters that need escaping.
    other = new_bucket_name()
    s3.create_bucket(Bucket=other)
    try:
        for i, key in enumerate(["dir/a b+c", "dir/ünï cødé&=?.txt"]):
            s3.put_object(Bucket=bkt, Key=key, Body=b"escaped")
            s3.copy_object(Bucket=other, Key=f"copied{i}", CopySource={"Bucket": bkt, "Key": key})
            assert s3.get_object(Bucket=other, Key=f"copied{i}")["Body"].read() == b"escaped"
    finally:
        empty_and_delete(s3, other)
    # Copying onto itself without REPLACE is an error in S3.
    with pytest.raises(ClientError) as ei:
        s3.copy_object(Bucket=bkt, Key="src", CopySource={"Bucket": bkt, "Key": "src"})
    assert err(ei) == ("InvalidRequest", 400)
    # ...but with REPLACE it rewrites the metadata.
    s3.copy_object(Bucket=bkt, Key="src", CopySource={"Bucket": bkt, "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"v": "2"})
    assert s3.head_object(Bucket=bkt, Key="src")["Metadata"] == {"v": "2"}
    with pytest.raises(ClientError) as ei:
        s3.copy_object(Bucket=bkt, Key="x", CopySource={"Bucket": bkt, "Key": "missing"})
    assert err(ei) == ("NoSuchKey", 404)


def test_list_object_versions(s3, bkt):
    s3.put_object(Bucket=bkt, Key="v1", Body=b"one")
    s3.put_object(Bucket=bkt, Key="v2", Body=b"two")
    s3.put_object(Bucket=bkt, Key="v2", Body=b"two again")
    r = s3.list_object_versions(Bucket=bkt)
    vs = r["Versions"]
    assert [v["Key"] for v in vs] == ["v1", "v2"]
    for v in vs:
        assert v["VersionId"] == "null"
        assert v["IsLatest"] is True
    assert vs[1]["Size"] == len(b"two again")
    assert vs[1]["ETag"] == f'"{hashlib.md5(b"two again").hexdigest()}"'
    assert not r.get("DeleteMarkers")
    assert s3.list_object_versions(Bucket=bkt, Prefix="v2")["Versions"][0]["Key"] == "v2"


def test_delete_objects(s3, bkt):
    keys = [f"d/{i}" for i in range(20)]
    for k in keys:
        s3.put_object(Bucket=bkt, Key=k, Body=k.encode())
    r = s3.delete_objects(Bucket=bkt, Delete={"Objects": [{"Key": k} for k in keys[:10]] + [{"Key": "d/missing"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == sorted(keys[:10] + ["d/missing"])
    assert not r.get("Errors")
    r = s3.delete_objects(Bucket=bkt, Delete={"Objects": [{"Key": k} for k in keys[10:]], "Quiet": True})
    assert not r.get("Deleted") and not r.get("Errors")
    assert s3.list_objects_v2(Bucket=bkt)["KeyCount"] == 0


# --- listing ----------------------------------------------------------------------------------


@pytest.fixture
def listing_bkt(s3, bkt):
    keys = ["a.txt", "b/1", "b/2", "b/c/3", "c/4", "c/5", "d", "e+f g", "z/%zz"]
    for k in keys:
        s3.put_object(Bucket=bkt, Key=k, Body=b"x" * len(k))
    return bkt, keys


def test_list_v2_prefix_delimiter_pagination(s3, listing_bkt):
    bkt, keys = listing_bkt
    r = s3.list_objects_v2(Bucket=bkt)
    assert [o["Key"] for o in r["Contents"]] == sorted(keys)
    assert r["KeyCount"] == len(keys) and not r["IsTruncated"]
    assert all(o["Size"] == len(o["Key"]) for o in r["Contents"])
    assert all(o["ETag"] == f'"{hashlib.md5(b"x" * len(o["Key"])).hexdigest()}"' for o in r["Contents"])
    assert "Owner" not in r["Contents"][0]

    r = s3.list_objects_v2(Bucket=bkt, Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["a.txt", "d", "e+f g"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["b/", "c/", "z/"]
    assert r["KeyCount"] == 6

    r = s3.list_objects_v2(Bucket=bkt, Prefix="b/", Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["b/1", "b/2"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["b/c/"]

    r = s3.list_objects_v2(Bucket=bkt, Prefix="nothing-here")
    assert r["KeyCount"] == 0 and "Contents" not in r

    # Pagination by max-keys with continuation tokens (counting prefixes as keys).
    seen, token, pages = [], None, 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        r = s3.list_objects_v2(Bucket=bkt, MaxKeys=2, Delimiter="/", **kw)
        pages += 1
        seen += [o["Key"] for o in r.get("Contents", [])] + [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        assert r["KeyCount"] <= 2
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    assert sorted(seen) == ["a.txt", "b/", "c/", "d", "e+f g", "z/"]
    assert pages == 3

    # The paginator, start-after, fetch-owner.
    all_keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bkt, PaginationConfig={"PageSize": 3}) for o in p["Contents"]]
    assert all_keys == sorted(keys)
    r = s3.list_objects_v2(Bucket=bkt, StartAfter="c/4")
    assert [o["Key"] for o in r["Contents"]] == ["c/5", "d", "e+f g", "z/%zz"]
    r = s3.list_objects_v2(Bucket=bkt, FetchOwner=True, MaxKeys=1)
    assert "ID" in r["Contents"][0]["Owner"]


def test_listing_etag_matches_head(s3, bkt):
    s3.put_object(Bucket=bkt, Key="e", Body=b"etag in listings")
    etag = s3.head_object(Bucket=bkt, Key="e")["ETag"]
    assert etag == f'"{hashlib.md5(b"etag in listings").hexdigest()}"'
    assert s3.list_objects_v2(Bucket=bkt)["Contents"][0]["ETag"] == etag
    assert s3.list_objects(Bucket=bkt)["Contents"][0]["ETag"] == etag
    assert s3.list_object_versions(Bucket=bkt)["Versions"][0]["ETag"] == etag


def test_listing_last_modified(s3, bkt):
    s3.put_object(Bucket=bkt, Key="t", Body=b"time")
    lm = s3.head_object(Bucket=bkt, Key="t")["LastModified"]
    for listed in (s3.list_objects_v2(Bucket=bkt)["Contents"][0], s3.list_objects(Bucket=bkt)["Contents"][0],
                   s3.list_object_versions(Bucket=bkt)["Versions"][0]):
        assert abs((listed["LastModified"] - lm).total_seconds()) < 2


def test_list_v1_marker(s3, listing_bkt):
    bkt, keys = listing_bkt
    r = s3.list_objects(Bucket=bkt, MaxKeys=4)
    assert [o["Key"] for o in r["Contents"]] == sorted(keys)[:4]
    assert r["IsTruncated"]
    r2 = s3.list_objects(Bucket=bkt, Marker=r["Contents"][-1]["Key"])
    assert [o["Key"] for o in r2["Contents"]] == sorted(keys)[4:]
    assert not r2["IsTruncated"]
    # With a delimiter v1 returns NextMarker.
    r = s3.list_objects(Bucket=bkt, Delimiter="/", MaxKeys=2)
    assert r["IsTruncated"] and r["NextMarker"]
    rest = s3.list_objects(Bucket=bkt, Delimiter="/", Marker=r["NextMarker"])
    got = [o["Key"] for o in r.get("Contents", []) + rest.get("Contents", [])]
    got += [p["Prefix"] for p in r.get("CommonPrefixes", []) + rest.get("CommonPrefixes", [])]
    assert sorted(got) == ["a.txt", "b/", "c/", "d", "e+f g", "z/"]
    all_keys = [o["Key"] for p in s3.get_paginator("list_objects").paginate(Bucket=bkt, PaginationConfig={"PageSize": 2}) for o in p["Contents"]]
    assert all_keys == sorted(keys)


def test_list_encoding_type_url(s3, listing_bkt):
    bkt, keys = listing_bkt
    # boto3 asks for EncodingType=url by default and decodes the keys back.
    r = s3.list_objects_v2(Bucket=bkt)
    assert "e+f g" in [o["Key"] for o in r["Contents"]]
    assert "z/%zz" in [o["Key"] for o in r["Contents"]]
    # Without boto3's decoding: the raw XML carries encoded keys.
    raw = []
    s3.meta.events.register("after-call.s3.ListObjectsV2", lambda http_response, **kw: raw.append(http_response.content))
    try:
        s3.list_objects_v2(Bucket=bkt, EncodingType="url", Prefix="e")
    finally:
        s3.meta.events.unregister("after-call.s3.ListObjectsV2")
    assert b"<EncodingType>url</EncodingType>" in raw[0]
    assert b"e%2Bf%20g" in raw[0] or b"e%2Bf+g" in raw[0]


# --- multipart --------------------------------------------------------------------------------


def test_multipart_list_parts_abort(s3, bkt):
    up = s3.create_multipart_upload(Bucket=bkt, Key="mp/obj", ContentType="text/x-mp", Metadata={"m": "1"})
    uid = up["UploadId"]
    ups = s3.list_multipart_uploads(Bucket=bkt)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in ups] == [("mp/obj", uid)]
    assert s3.list_multipart_uploads(Bucket=bkt, Prefix="other").get("Uploads", []) == []
    p1 = os.urandom(5 * MiB)
    p2 = os.urandom(1234)
    e1 = s3.upload_part(Bucket=bkt, Key="mp/obj", UploadId=uid, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket=bkt, Key="mp/obj", UploadId=uid, PartNumber=2, Body=p2)["ETag"]
    assert e1 == f'"{hashlib.md5(p1).hexdigest()}"'
    parts = s3.list_parts(Bucket=bkt, Key="mp/obj", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [(1, e1, len(p1)), (2, e2, len(p2))]
    r = s3.list_parts(Bucket=bkt, Key="mp/obj", UploadId=uid, MaxParts=1)
    assert len(r["Parts"]) == 1 and r["IsTruncated"]
    r = s3.list_parts(Bucket=bkt, Key="mp/obj", UploadId=uid, PartNumberMarker=r["NextPartNumberMarker"])
    assert [p["PartNumber"] for p in r["Parts"]] == [2]
    # The object does not exist until completed.
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="mp/obj")
    assert err(ei)[1] == 404
    s3.abort_multipart_upload(Bucket=bkt, Key="mp/obj", UploadId=uid)
    assert s3.list_multipart_uploads(Bucket=bkt).get("Uploads", []) == []
    with pytest.raises(ClientError) as ei:
        s3.list_parts(Bucket=bkt, Key="mp/obj", UploadId=uid)
    assert err(ei) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as ei:
        s3.upload_part(Bucket=bkt, Key="mp/obj", UploadId=uid, PartNumber=3, Body=b"x")
    assert err(ei) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="mp/obj")
    assert err(ei)[1] == 404


def test_multipart_etag_and_metadata(s3, bkt):
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(100)]
    uid = s3.create_multipart_upload(Bucket=bkt, Key="mp", ContentType="text/x-mp", Metadata={"m": "1"})["UploadId"]
    done = []
    for n, p in enumerate(parts, 1):
        done.append({"PartNumber": n, "ETag": s3.upload_part(Bucket=bkt, Key="mp", UploadId=uid, PartNumber=n, Body=p)["ETag"]})
    r = s3.complete_multipart_upload(Bucket=bkt, Key="mp", UploadId=uid, MultipartUpload={"Parts": done})
    want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    assert r["ETag"] == f'"{want}"'
    h = s3.head_object(Bucket=bkt, Key="mp")
    assert h["ETag"] == f'"{want}"'
    assert h["ContentLength"] == sum(map(len, parts))
    assert h["ContentType"] == "text/x-mp" and h["Metadata"] == {"m": "1"}
    assert hashlib.sha256(s3.get_object(Bucket=bkt, Key="mp")["Body"].read()).digest() == hashlib.sha256(b"".join(parts)).digest()
    assert s3.get_object(Bucket=bkt, Key="mp", Range=f"bytes={5 * MiB - 3}-{5 * MiB + 2}")["Body"].read() == parts[0][-3:] + parts[1][:3]
    assert s3.list_multipart_uploads(Bucket=bkt).get("Uploads", []) == []
    listed = s3.list_objects_v2(Bucket=bkt)["Contents"][0]
    assert listed["ETag"] == f'"{want}"' and listed["Size"] == sum(map(len, parts))


def test_upload_part_copy(s3, bkt):
    src = os.urandom(6 * MiB)
    s3.put_object(Bucket=bkt, Key="src", Body=src)
    uid = s3.create_multipart_upload(Bucket=bkt, Key="assembled")["UploadId"]
    r1 = s3.upload_part_copy(Bucket=bkt, Key="assembled", UploadId=uid, PartNumber=1,
                             CopySource={"Bucket": bkt, "Key": "src"}, CopySourceRange=f"bytes=0-{5 * MiB - 1}")
    r2 = s3.upload_part_copy(Bucket=bkt, Key="assembled", UploadId=uid, PartNumber=2,
                             CopySource={"Bucket": bkt, "Key": "src"})
    p3 = b"tail bytes"
    e3 = s3.upload_part(Bucket=bkt, Key="assembled", UploadId=uid, PartNumber=3, Body=p3)["ETag"]
    assert r1["CopyPartResult"]["ETag"] == f'"{hashlib.md5(src[:5 * MiB]).hexdigest()}"'
    s3.complete_multipart_upload(Bucket=bkt, Key="assembled", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": r1["CopyPartResult"]["ETag"]},
        {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]},
        {"PartNumber": 3, "ETag": e3},
    ]})
    assert s3.get_object(Bucket=bkt, Key="assembled")["Body"].read() == src[:5 * MiB] + src + p3


def test_multipart_errors(s3, bkt):
    uid = s3.create_multipart_upload(Bucket=bkt, Key="bad")["UploadId"]
    a, b = os.urandom(5 * MiB), os.urandom(5 * MiB)
    ea = s3.upload_part(Bucket=bkt, Key="bad", UploadId=uid, PartNumber=1, Body=a)["ETag"]
    eb = s3.upload_part(Bucket=bkt, Key="bad", UploadId=uid, PartNumber=2, Body=b)["ETag"]

    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="bad", UploadId=uid, MultipartUpload={"Parts": [
            {"PartNumber": 2, "ETag": eb}, {"PartNumber": 1, "ETag": ea}]})
    assert err(ei) == ("InvalidPartOrder", 400)

    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="bad", UploadId=uid, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": ea}, {"PartNumber": 2, "ETag": '"00000000000000000000000000000000"'}]})
    assert err(ei) == ("InvalidPart", 400)

    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="bad", UploadId=uid, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": ea}, {"PartNumber": 7, "ETag": eb}]})
    assert err(ei) == ("InvalidPart", 400)

    # The failed completes left the upload intact.
    s3.complete_multipart_upload(Bucket=bkt, Key="bad", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": ea}, {"PartNumber": 2, "ETag": eb}]})
    assert s3.get_object(Bucket=bkt, Key="bad")["Body"].read() == a + b

    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="bad", UploadId=uid, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": ea}]})
    assert err(ei) == ("NoSuchUpload", 404)

    uid = s3.create_multipart_upload(Bucket=bkt, Key="small")["UploadId"]
    e1 = s3.upload_part(Bucket=bkt, Key="small", UploadId=uid, PartNumber=1, Body=b"1")["ETag"]
    e2 = s3.upload_part(Bucket=bkt, Key="small", UploadId=uid, PartNumber=2, Body=b"2")["ETag"]
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="small", UploadId=uid, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert err(ei) == ("EntityTooSmall", 400)
    # A single small part is a valid (last) part.
    s3.complete_multipart_upload(Bucket=bkt, Key="small", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1}]})
    assert s3.get_object(Bucket=bkt, Key="small")["Body"].read() == b"1"

    with pytest.raises(ClientError) as ei:
        s3.upload_part(Bucket=bkt, Key="small", UploadId="no-such-upload", PartNumber=1, Body=b"x")
    assert err(ei) == ("NoSuchUpload", 404)


# --- checksums --------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["SHA256", "CRC32"])
def test_checksum_round_trip(s3, bkt, algo):
    data = os.urandom(300 * 1024)
    r = s3.put_object(Bucket=bkt, Key="ck", Body=data, ChecksumAlgorithm=algo)
    if algo == "SHA256":
        want = b64(hashlib.sha256(data).digest())
    else:
        want = _crc32_b64(data)
    assert r[f"Checksum{algo}"] == want
    g = s3.get_object(Bucket=bkt, Key="ck", ChecksumMode="ENABLED")
    assert g[f"Checksum{algo}"] == want
    assert g["Body"].read() == data
    h = s3.head_object(Bucket=bkt, Key="ck", ChecksumMode="ENABLED")
    assert h[f"Checksum{algo}"] == want
    # Not returned on a ranged GET (it would not match the partial body).
    g = s3.get_object(Bucket=bkt, Key="ck", ChecksumMode="ENABLED", Range="bytes=0-9")
    assert f"Checksum{algo}" not in g
    assert g["Body"].read() == data[:10]




def _assert_bad_digest(ei):
    code, status = err(ei)
    assert status == 400 and code in ("BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest"), code


def test_multipart_part_checksums(s3, bkt):
    uid = s3.create_multipart_upload(Bucket=bkt, Key="mpck", ChecksumAlgorithm="SHA256")["UploadId"]
    parts = [os.urandom(5 * MiB), os.urandom(100)]
    done = []
    for n, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bkt, Key="mpck", UploadId=uid, PartNumber=n, Body=p, ChecksumAlgorithm="SHA256")
        assert r["ChecksumSHA256"] == b64(hashlib.sha256(p).digest())
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
    s3.complete_multipart_upload(Bucket=bkt, Key="mpck", UploadId=uid, MultipartUpload={"Parts": done})
    assert s3.get_object(Bucket=bkt, Key="mpck", ChecksumMode="ENABLED")["Body"].read() == b"".join(parts)


def test_multipart_composite_checksum(s3, bkt):
    uid = s3.create_multipart_upload(Bucket=bkt, Key="mpck", ChecksumAlgorithm="SHA256")["UploadId"]
    parts = [os.urandom(5 * MiB), os.urandom(100)]
    done = []
    for n, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bkt, Key="mpck", UploadId=uid, PartNumber=n, Body=p, ChecksumAlgorithm="SHA256")
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
    listed = s3.list_parts(Bucket=bkt, Key="mpck", UploadId=uid)["Parts"]
    assert [p.get("ChecksumSHA256") for p in listed] == [d["ChecksumSHA256"] for d in done]
    r = s3.complete_multipart_upload(Bucket=bkt, Key="mpck", UploadId=uid, MultipartUpload={"Parts": done})
    want = b64(hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()) + "-2"
    assert r.get("ChecksumSHA256") == want
    assert s3.head_object(Bucket=bkt, Key="mpck", ChecksumMode="ENABLED").get("ChecksumSHA256") == want


def test_checksum_header_mismatch_rejected(s3, bkt):
    wrong = b64(hashlib.sha256(b"something else").digest())
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bkt, Key="bad-ck", Body=b"payload", ChecksumSHA256=wrong)
    _assert_bad_digest(ei)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="bad-ck")
    assert err(ei)[1] == 404


def test_content_md5_mismatch_rejected(s3, bkt):
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bkt, Key="bad-md5", Body=b"payload", ContentMD5=b64(hashlib.md5(b"other").digest()))
    assert err(ei) == ("BadDigest", 400)


def test_content_md5_and_checksum_headers_accepted(s3, bkt):
    s3.put_object(Bucket=bkt, Key="good-md5", Body=b"payload", ContentMD5=b64(hashlib.md5(b"payload").digest()),
                  ChecksumSHA256=b64(hashlib.sha256(b"payload").digest()))
    h = s3.head_object(Bucket=bkt, Key="good-md5", ChecksumMode="ENABLED")
    assert h["ChecksumSHA256"] == b64(hashlib.sha256(b"payload").digest())
    assert h["ETag"] == f'"{hashlib.md5(b"payload").hexdigest()}"'


# Raw SigV4 requests: aws-chunked bodies as SDKs send them over TLS (botocore only uses trailers
# over https, so these are built by hand).


def _crc32_b64(data: bytes) -> str:
    return b64(zlib.crc32(data).to_bytes(4, "big"))


def _signing_key(secret: str, day: str, region: str = "us-east-1") -> bytes:
    k = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def raw_put(url: str, body: bytes, headers: dict, creds=None, chunk_signer=None):
    """PUT `body` to `url` with `headers`; signs the headers (SigV4, keeping the given
    x-amz-content-sha256) when `creds` is set. `chunk_signer(seed_signature, amz_date)` may
    return the body to send (for signed chunks). Returns (status, body, headers)."""
    if creds is not None:
        req = AWSRequest("PUT", url, data=body, headers=headers)
        SigV4Auth(Credentials(creds.access_key, creds.secret_key), "s3", "us-east-1").add_auth(req)
        headers = dict(req.prepare().headers)
        if chunk_signer is not None:
            seed = headers["Authorization"].rsplit("Signature=", 1)[1]
            body = chunk_signer(seed, headers["X-Amz-Date"])
    r = urllib.request.Request(url, data=body, headers=headers, method="PUT")
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def unsigned_trailer_body(data: bytes, checksum: str, chunk: int = 64 * 1024) -> bytes:
    out = b""
    for i in range(0, len(data), chunk):
        piece = data[i:i + chunk]
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n" + f"x-amz-checksum-crc32:{checksum}\r\n\r\n".encode()


def trailer_headers(data: bytes, body_len: int, content_sha: str) -> dict:
    return {
        "x-amz-content-sha256": content_sha,
        "Content-Encoding": "aws-chunked",
        "x-amz-trailer": "x-amz-checksum-crc32",
        "x-amz-decoded-content-length": str(len(data)),
        "Content-Length": str(body_len),
        "Content-Type": "application/octet-stream",
    }


def test_signed_unsigned_payload_trailer_upload(auth_s3_endpoint, admin_creds, s3, bkt):
    """STREAMING-UNSIGNED-PAYLOAD-TRAILER (what boto3 and the Go/Java SDKs send over https)."""
    data = os.urandom(200 * 1024 + 7)
    body = unsigned_trailer_body(data, _crc32_b64(data))
    status, out, hdrs = raw_put(f"{auth_s3_endpoint}/{bkt}/trailer", body,
                                trailer_headers(data, len(body), "STREAMING-UNSIGNED-PAYLOAD-TRAILER"), admin_creds)
    assert status == 200, out
    assert hdrs["x-amz-checksum-crc32"] == _crc32_b64(data)
    g = s3.get_object(Bucket=bkt, Key="trailer", ChecksumMode="ENABLED")
    assert g["Body"].read() == data
    assert g["ChecksumCRC32"] == _crc32_b64(data)


def test_aws_chunked_content_encoding_not_stored(auth_s3_endpoint, admin_creds, s3, bkt):
    data = b"chunked body"
    body = unsigned_trailer_body(data, _crc32_b64(data))
    status, out, _ = raw_put(f"{auth_s3_endpoint}/{bkt}/ce", body,
                             trailer_headers(data, len(body), "STREAMING-UNSIGNED-PAYLOAD-TRAILER"), admin_creds)
    assert status == 200, out
    assert "ContentEncoding" not in s3.head_object(Bucket=bkt, Key="ce")


def test_trailer_checksum_mismatch_rejected(auth_s3_endpoint, admin_creds, s3, bkt):
    data = b"trailer says otherwise"
    body = unsigned_trailer_body(data, _crc32_b64(b"not the data"))
    status, out, _ = raw_put(f"{auth_s3_endpoint}/{bkt}/bad-trailer", body,
                             trailer_headers(data, len(body), "STREAMING-UNSIGNED-PAYLOAD-TRAILER"), admin_creds)
    assert status == 400 and xml_code(out) == "BadDigest", (status, out)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="bad-trailer")
    assert err(ei)[1] == 404


def _signed_chunked_put(endpoint, creds, bkt, key, data, tamper=False):
    """PUT with STREAMING-AWS4-HMAC-SHA256-PAYLOAD (every chunk signed; minio-go, older Java SDKs)."""
    chunk = 64 * 1024
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    empty = hashlib.sha256(b"").hexdigest()

    def framed_len() -> int:
        return sum(len(f"{len(p):x};chunk-signature=".encode()) + 64 + 2 + len(p) + 2 for p in pieces)

    def signer(seed: str, amz_date: str, tamper: bool = False) -> bytes:
        day = amz_date[:8]
        skey = _signing_key(creds.secret_key, day)
        scope = f"{day}/us-east-1/s3/aws4_request"
        prev, out = seed, b""
        for p in pieces:
            sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, empty, hashlib.sha256(p).hexdigest()])
            prev = hmac.new(skey, sts.encode(), hashlib.sha256).hexdigest()
            body = p if not (tamper and p) else bytes([p[0] ^ 1]) + p[1:]
            out += f"{len(p):x};chunk-signature={prev}\r\n".encode() + body + b"\r\n"
        return out

    headers = {
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(data)),
        "Content-Length": str(framed_len()),
    }
    return raw_put(f"{endpoint}/{bkt}/{key}", b"", headers, creds, lambda seed, d: signer(seed, d, tamper))


def test_signed_chunked_payload_upload(auth_s3_endpoint, admin_creds, s3, bkt):
    data = os.urandom(150 * 1024 + 3)
    status, out, _ = _signed_chunked_put(auth_s3_endpoint, admin_creds, bkt, "signed-chunks", data)
    assert status == 200, out
    assert s3.get_object(Bucket=bkt, Key="signed-chunks")["Body"].read() == data
    # A chunk whose bytes do not match its signature is refused, and nothing is stored.
    status, out, _ = _signed_chunked_put(auth_s3_endpoint, admin_creds, bkt, "tampered", data, tamper=True)
    assert 400 <= status < 500, (status, out)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="tampered")
    assert err(ei)[1] == 404


def test_signed_chunk_mismatch_error_code(auth_s3_endpoint, admin_creds, bkt):
    status, out, _ = _signed_chunked_put(auth_s3_endpoint, admin_creds, bkt, "tampered", os.urandom(100_000), tamper=True)
    assert (status, xml_code(out)) == (403, "SignatureDoesNotMatch"), out


def test_anonymous_unsigned_payload_trailer_upload(s3_endpoint):
    anon = make_s3(s3_endpoint, None)
    name = new_bucket_name()
    anon.create_bucket(Bucket=name)
    try:
        data = b"anonymous chunked upload"
        body = unsigned_trailer_body(data, _crc32_b64(data))
        status, out, _ = raw_put(f"{s3_endpoint}/{name}/anon-trailer", body,
                                 trailer_headers(data, len(body), "STREAMING-UNSIGNED-PAYLOAD-TRAILER"))
        assert status == 200, out
        assert anon.get_object(Bucket=name, Key="anon-trailer")["Body"].read() == data
    finally:
        empty_and_delete(anon, name)


# --- native API interop -----------------------------------------------------------------------


def test_s3_object_visible_natively_and_back(auth_cluster, s3, bkt):
    data = os.urandom(200 * 1024)
    s3.put_object(Bucket=bkt, Key="dir/s3-put.bin", Body=data)
    native = Client(auth_cluster)
    try:
        b = native.bucket(bkt)
        assert b.exists()
        o = b.object("dir/s3-put.bin")
        assert o.head().size == len(data)
        assert o.get() == data
        assert "dir/s3-put.bin" in [e.name for e in b.list_all_objects()]
        payload = os.urandom(12345)
        b.object("native/put.bin").put(payload)
        g = s3.get_object(Bucket=bkt, Key="native/put.bin")
        assert g["ContentLength"] == len(payload)
        assert g["Body"].read() == payload
        h = s3.head_object(Bucket=bkt, Key="native/put.bin")
        assert h["ContentLength"] == len(payload) and h["ETag"]
        assert "native/put.bin" in [o["Key"] for o in s3.list_objects_v2(Bucket=bkt)["Contents"]]
        # A bucket created natively is an S3 bucket too.
        nb = native.bucket(new_bucket_name())
        nb.create()
        try:
            s3.head_bucket(Bucket=nb.name)
            assert nb.name in [x["Name"] for x in s3.list_buckets()["Buckets"]]
        finally:
            nb.delete(missing_ok=True)
    finally:
        native.close()


def test_s3_on_target_port(auth_cluster, admin_creds, s3, bkt):
    """Targets relay S3 requests to the primary proxy: SigV4 (which signs the Host) still holds."""
    smap = Client(auth_cluster).cluster_map()
    target_url = next(iter(smap["tmap"].values()))["public_net"]["direct_url"]
    t = make_s3(target_url, admin_creds)
    data = os.urandom(3 * MiB + 5)
    t.put_object(Bucket=bkt, Key="via-target", Body=data, Metadata={"via": "target"})
    assert t.get_object(Bucket=bkt, Key="via-target")["Body"].read() == data
    assert t.get_object(Bucket=bkt, Key="via-target", Range="bytes=5-9")["Body"].read() == data[5:10]
    assert s3.head_object(Bucket=bkt, Key="via-target")["Metadata"] == {"via": "target"}
    assert [o["Key"] for o in t.list_objects_v2(Bucket=bkt)["Contents"]] == ["via-target"]
    with pytest.raises(ClientError) as ei:
        make_s3(target_url, None).list_objects_v2(Bucket=bkt)
    assert err(ei) == ("AccessDenied", 403)


@pytest.mark.parametrize("name", ["v1", "metrics"])
def test_reserved_bucket_names_refused(s3, name):
    with pytest.raises(ClientError) as ei:
        s3.create_bucket(Bucket=name)
    # Both collide with native routes: refused with an S3 error.
    assert err(ei) == ("InvalidBucketName", 400), err(ei)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_content_language_round_trip(s3, bkt):
    s3.put_object(Bucket=bkt, Key="lang", Body=b"bonjour", ContentLanguage="fr-CA")
    assert s3.head_object(Bucket=bkt, Key="lang")["ContentLanguage"] == "fr-CA"


def test_unimplemented_operations(s3, bkt):
    # (Bucket tagging is implemented now: test_s3_semantics.py::test_bucket_tagging.)
    for call in (lambda: s3.get_bucket_website(Bucket=bkt),
                 lambda: s3.put_bucket_encryption(Bucket=bkt, ServerSideEncryptionConfiguration={
                     "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}),
                 lambda: s3.get_bucket_lifecycle_configuration(Bucket=bkt)):
        with pytest.raises(ClientError) as ei:
            call()
        assert err(ei) == ("NotImplemented", 501)


def test_delete_objects_limit(s3, bkt):
    with pytest.raises(ClientError) as ei:
        s3.delete_objects(Bucket=bkt, Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]})
    assert err(ei) == ("MalformedXML", 400)


def test_part_number_range(s3, bkt):
    uid = s3.create_multipart_upload(Bucket=bkt, Key="pn")["UploadId"]
    for bad in (0, 10001):
        with pytest.raises(ClientError) as ei:
            s3.upload_part(Bucket=bkt, Key="pn", UploadId=uid, PartNumber=bad, Body=b"x")
        assert err(ei)[1] == 400
    s3.upload_part(Bucket=bkt, Key="pn", UploadId=uid, PartNumber=10000, Body=b"x")
    s3.abort_multipart_upload(Bucket=bkt, Key="pn", UploadId=uid)

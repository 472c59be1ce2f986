"""S3 semantics that applications lean on past the basics (issue 18), checked with boto3 against
Gristmill and, where moto implements the behaviour, against moto as the reference: the same
test runs against both and asserts the same status codes and error codes.

- conditional writes: `If-None-Match: *` and `If-Match` on PutObject, CompleteMultipartUpload
  and CopyObject, and `x-amz-copy-source-if-*`;
- a retried CompleteMultipartUpload (its answer lost) answers as the first one did;
- UploadPartCopy refuses malformed and out-of-object ranges;
- `Delimiter=""` is no delimiter;
- multipart uploads created with a checksum algorithm: part checksums, and the object's
  composite or full-object checksum with its type;
- object tagging: on PUT, copy (directives) and multipart, Put/Get/DeleteObjectTagging, the
  tag count on GET, S3's limits; tags change no data (same ETag and modification time).
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from botocore.exceptions import ClientError

from s3util import MiB, empty_and_delete, err, make_s3, new_bucket_name, outcome

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto_endpoint():
    """A moto S3 server (the reference implementation here) on a free port."""
    exe = ROOT / ".venv" / "bin" / "moto_server"
    if not exe.exists():
        exe = pathlib.Path(sys.executable).parent / "moto_server"
    port = _free_port()
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/", timeout=1)
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            assert time.time() < deadline, "moto_server did not start"
            assert proc.poll() is None, "moto_server exited"
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


class Creds:
    access_key = "testing"
    secret_key = "testing"


@pytest.fixture(params=["gristmill", "moto"])
def s3(request, s3_endpoint, default_creds):
    """A boto3 client for Gristmill (auth off) or for moto: the same test runs on both."""
    if request.param == "gristmill":
        c = make_s3(s3_endpoint, default_creds)
    else:
        c = make_s3(request.getfixturevalue("moto_endpoint"), Creds())
    yield c
    c.close()


@pytest.fixture
def gristmill_s3(s3_endpoint, default_creds):
    c = make_s3(s3_endpoint, default_creds)
    yield c
    c.close()


def _bucket(c) -> str:
    name = new_bucket_name("sem")
    c.create_bucket(Bucket=name)
    return name


@pytest.fixture
def bkt(s3):
    name = _bucket(s3)
    yield name
    empty_and_delete(s3, name)


def _put_code(call) -> tuple[str, int] | None:
    """None when the call succeeded, else (S3 error code, status)."""
    try:
        call()
        return None
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]


# --- conditional writes -----------------------------------------------------------------------


def test_put_if_none_match_creates_only_once(s3, bkt):
    s3.put_object(Bucket=bkt, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bkt, Key="k", Body=b"second", IfNoneMatch="*")
    assert err(ei) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bkt, Key="k")["Body"].read() == b"first"
    # After a delete the key is free again.
    s3.delete_object(Bucket=bkt, Key="k")
    s3.put_object(Bucket=bkt, Key="k", Body=b"third", IfNoneMatch="*")
    assert s3.get_object(Bucket=bkt, Key="k")["Body"].read() == b"third"


def test_put_if_match_replaces_only_that_version(s3, bkt):
    etag = s3.put_object(Bucket=bkt, Key="k", Body=b"v1")["ETag"]
    etag2 = s3.put_object(Bucket=bkt, Key="k", Body=b"v2", IfMatch=etag)["ETag"]
    assert s3.get_object(Bucket=bkt, Key="k")["Body"].read() == b"v2"
    # The stale ETag (a lost race) is refused and changes nothing.
    with pytest.raises(ClientError) as ei:
        s3.put_object(Bucket=bkt, Key="k", Body=b"v3", IfMatch=etag)
    assert err(ei) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bkt, Key="k")["Body"].read() == b"v2"
    s3.put_object(Bucket=bkt, Key="k", Body=b"v3", IfMatch=etag2)
    assert s3.get_object(Bucket=bkt, Key="k")["Body"].read() == b"v3"


def test_put_if_match_on_a_missing_key(s3, bkt):
    # S3's conditional-writes guide: with no current object version the write fails with 404
    # (moto and ceph/s3-tests agree).
    for cond in ('"0123"', "*"):
        with pytest.raises(ClientError) as ei:
            s3.put_object(Bucket=bkt, Key="absent", Body=b"x", IfMatch=cond)
        assert err(ei) == ("NoSuchKey", 404)
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bkt, Key="absent")


def test_racing_if_none_match_puts_have_one_winner(gristmill_s3):
    """Two clients race `If-None-Match: *` on one key, 30 rounds: exactly one wins each round,
    the other gets 412, and the object is the winner's bytes."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for rnd in range(30):
                key = f"race-{rnd}"
                bodies = [f"{rnd}-a".encode() * 1000, f"{rnd}-b".encode() * 1000]
                results = list(pool.map(
                    lambda b: _put_code(lambda: s3.put_object(Bucket=bkt, Key=key, Body=b, IfNoneMatch="*")),
                    bodies))
                winners = [b for b, r in zip(bodies, results) if r is None]
                assert len(winners) == 1, f"round {rnd}: {results}"
                assert [r for r in results if r is not None] == [("PreconditionFailed", 412)]
                assert s3.get_object(Bucket=bkt, Key=key)["Body"].read() == winners[0]
    finally:
        empty_and_delete(s3, bkt)


def test_complete_multipart_if_none_match(s3, bkt):
    s3.put_object(Bucket=bkt, Key="taken", Body=b"here first")
    uid = s3.create_multipart_upload(Bucket=bkt, Key="taken")["UploadId"]
    e1 = s3.upload_part(Bucket=bkt, Key="taken", UploadId=uid, PartNumber=1, Body=b"late")["ETag"]
    parts = {"Parts": [{"PartNumber": 1, "ETag": e1}]}
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="taken", UploadId=uid, MultipartUpload=parts,
                                     IfNoneMatch="*")
    assert err(ei) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bkt, Key="taken")["Body"].read() == b"here first"


def test_copy_object_conditions(gristmill_s3):
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        etag = s3.put_object(Bucket=bkt, Key="src", Body=b"source")["ETag"]
        s3.put_object(Bucket=bkt, Key="dst", Body=b"old")
        src = {"Bucket": bkt, "Key": "src"}
        # The source's conditions.
        with pytest.raises(ClientError) as ei:
            s3.copy_object(Bucket=bkt, Key="new", CopySource=src, CopySourceIfMatch='"nope"')
        assert err(ei) == ("PreconditionFailed", 412)
        with pytest.raises(ClientError) as ei:
            s3.copy_object(Bucket=bkt, Key="new", CopySource=src, CopySourceIfNoneMatch=etag)
        assert err(ei) == ("PreconditionFailed", 412)
        s3.copy_object(Bucket=bkt, Key="new", CopySource=src, CopySourceIfMatch=etag)
        assert s3.get_object(Bucket=bkt, Key="new")["Body"].read() == b"source"
        # The destination's: If-None-Match refuses to overwrite "dst".
        c = s3.copy_object
        params = {"Bucket": bkt, "Key": "dst", "CopySource": src}
        s3.meta.events.register_first("before-sign.s3.CopyObject",
                                      lambda request, **_: request.headers.__setitem__("If-None-Match", "*"))
        with pytest.raises(ClientError) as ei:
            c(**params)
        assert err(ei) == ("PreconditionFailed", 412)
        assert s3.get_object(Bucket=bkt, Key="dst")["Body"].read() == b"old"
    finally:
        empty_and_delete(s3, bkt)


def test_native_put_conditions(cluster, bucket):
    """The native API takes the same preconditions on PUT."""
    import requests

    url = f"{cluster}/v1/objects/{bucket.name}/n"
    assert requests.put(url, data=b"one", headers={"If-None-Match": "*"}).status_code == 200
    r = requests.put(url, data=b"two", headers={"If-None-Match": "*"})
    assert r.status_code == 412, r.text
    assert "If-None-Match" in r.text
    etag = requests.head(url, allow_redirects=True).headers["ETag"]
    assert requests.put(url, data=b"two", headers={"If-Match": etag}).status_code == 200
    assert requests.put(url, data=b"three", headers={"If-Match": etag}).status_code == 412
    assert requests.get(url).content == b"two"
    # If-None-Match with ETags (RFC 9110; ceph/s3-tests expect it): written unless one matches.
    assert requests.put(url, data=b"x", headers={"If-None-Match": '"abc"'}).status_code == 200
    etag = requests.head(url, allow_redirects=True).headers["ETag"]
    r = requests.put(url, data=b"y", headers={"If-None-Match": f'"abc", {etag}'})
    assert r.status_code == 412, r.text
    assert requests.get(url).content == b"x"


# --- retry-safe multipart completion ----------------------------------------------------------


def test_complete_multipart_retry_answers_as_the_first(gristmill_s3):
    """An SDK retries CompleteMultipartUpload when the answer is lost: the retry with the same
    part list succeeds with the same ETag (S3 does; moto answers NoSuchUpload, so this runs on
    Gristmill only). Another part list, abort and list-parts still say NoSuchUpload."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        a, b = os.urandom(5 * MiB), b"tail"
        uid = s3.create_multipart_upload(Bucket=bkt, Key="big")["UploadId"]
        ea = s3.upload_part(Bucket=bkt, Key="big", UploadId=uid, PartNumber=1, Body=a)["ETag"]
        eb = s3.upload_part(Bucket=bkt, Key="big", UploadId=uid, PartNumber=2, Body=b)["ETag"]
        parts = {"Parts": [{"PartNumber": 1, "ETag": ea}, {"PartNumber": 2, "ETag": eb}]}
        first = s3.complete_multipart_upload(Bucket=bkt, Key="big", UploadId=uid, MultipartUpload=parts)
        again = s3.complete_multipart_upload(Bucket=bkt, Key="big", UploadId=uid, MultipartUpload=parts)
        assert again["ETag"] == first["ETag"]
        assert s3.get_object(Bucket=bkt, Key="big")["Body"].read() == a + b
        # Still answered after the object was overwritten (the completion's ETag).
        s3.put_object(Bucket=bkt, Key="big", Body=b"newer")
        third = s3.complete_multipart_upload(Bucket=bkt, Key="big", UploadId=uid, MultipartUpload=parts)
        assert third["ETag"] == first["ETag"]
        assert s3.get_object(Bucket=bkt, Key="big")["Body"].read() == b"newer"
        with pytest.raises(ClientError) as ei:
            s3.complete_multipart_upload(Bucket=bkt, Key="big", UploadId=uid,
                                         MultipartUpload={"Parts": parts["Parts"][:1]})
        assert err(ei) == ("NoSuchUpload", 404)
        with pytest.raises(ClientError) as ei:
            s3.list_parts(Bucket=bkt, Key="big", UploadId=uid)
        assert err(ei) == ("NoSuchUpload", 404)
        with pytest.raises(ClientError) as ei:
            s3.abort_multipart_upload(Bucket=bkt, Key="big", UploadId=uid)
        assert err(ei) == ("NoSuchUpload", 404)
        assert s3.list_multipart_uploads(Bucket=bkt).get("Uploads", []) == []
    finally:
        empty_and_delete(s3, bkt)


# --- UploadPartCopy ranges --------------------------------------------------------------------


@pytest.mark.parametrize("rng,code", [
    ("bytes=5-2", ("InvalidArgument", 400)),
    ("bytes=0-", ("InvalidArgument", 400)),
    ("0-10", ("InvalidArgument", 400)),
    ("bytes=100-200", ("InvalidRange", 416)),
    ("bytes=0-100", ("InvalidRange", 416)),
])
def test_upload_part_copy_refuses_bad_ranges(gristmill_s3, rng, code):
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        s3.put_object(Bucket=bkt, Key="src", Body=b"x" * 50)
        uid = s3.create_multipart_upload(Bucket=bkt, Key="dst")["UploadId"]
        with pytest.raises(ClientError) as ei:
            s3.upload_part_copy(Bucket=bkt, Key="dst", UploadId=uid, PartNumber=1,
                                CopySource={"Bucket": bkt, "Key": "src"}, CopySourceRange=rng)
        assert err(ei) == code
        # A range inside the object is taken.
        r = s3.upload_part_copy(Bucket=bkt, Key="dst", UploadId=uid, PartNumber=1,
                                CopySource={"Bucket": bkt, "Key": "src"}, CopySourceRange="bytes=0-49")
        assert r["CopyPartResult"]["ETag"]
    finally:
        empty_and_delete(s3, bkt)


# --- listing ----------------------------------------------------------------------------------


def test_empty_delimiter_is_none(s3, bkt):
    for k in ["a/1", "a/2", "b"]:
        s3.put_object(Bucket=bkt, Key=k, Body=b"")
    r = s3.list_objects_v2(Bucket=bkt, Delimiter="")
    assert [o["Key"] for o in r["Contents"]] == ["a/1", "a/2", "b"]
    assert "CommonPrefixes" not in r
    assert r.get("Delimiter", "") == ""
    r = s3.list_objects(Bucket=bkt, Delimiter="")
    assert [o["Key"] for o in r["Contents"]] == ["a/1", "a/2", "b"]
    assert r.get("Delimiter", "") == ""


# --- parts and attributes ---------------------------------------------------------------------


def _multipart(s3, bkt, key, parts):
    uid = s3.create_multipart_upload(Bucket=bkt, Key=key)["UploadId"]
    done = []
    for i, data in enumerate(parts, 1):
        done.append({"PartNumber": i, "ETag": s3.upload_part(Bucket=bkt, Key=key, UploadId=uid, PartNumber=i,
                                                             Body=data)["ETag"]})
    return s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=uid, MultipartUpload={"Parts": done})


def test_get_and_head_by_part_number(gristmill_s3):
    """moto answers partNumber reads with the whole object, so this runs on Gristmill only."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        _parts_read_back(s3, bkt)
    finally:
        empty_and_delete(s3, bkt)


def _parts_read_back(s3, bkt):
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB + 7), b"tail of it"]
    _multipart(s3, bkt, "mp", parts)
    for n, data in enumerate(parts, 1):
        r = s3.get_object(Bucket=bkt, Key="mp", PartNumber=n)
        assert r["Body"].read() == data
        assert r["PartsCount"] == 3
        assert r["ContentLength"] == len(data)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
        h = s3.head_object(Bucket=bkt, Key="mp", PartNumber=n)
        assert (h["ContentLength"], h["PartsCount"]) == (len(data), 3)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="mp", PartNumber=4)
    assert err(ei) == ("InvalidPartNumber", 416)
    # An object written whole is one part.
    s3.put_object(Bucket=bkt, Key="whole", Body=b"all of it")
    r = s3.get_object(Bucket=bkt, Key="whole", PartNumber=1)
    assert r["Body"].read() == b"all of it"
    assert "PartsCount" not in r
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="whole", PartNumber=2)
    assert err(ei) == ("InvalidPartNumber", 416)


def test_get_object_attributes(gristmill_s3):
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), b"last"]
        etag = _multipart(s3, bkt, "mp", parts)["ETag"]
        every = ["ETag", "ObjectSize", "StorageClass", "ObjectParts", "Checksum"]
        a = s3.get_object_attributes(Bucket=bkt, Key="mp", ObjectAttributes=every)
        assert a["ETag"] == etag.strip('"')  # bare here (AWS's API reference), quoted elsewhere
        assert a["ObjectSize"] == sum(len(p) for p in parts)
        assert a["StorageClass"] == "STANDARD"
        op = a["ObjectParts"]
        assert op["TotalPartsCount"] == 3
        assert [(p["PartNumber"], p["Size"]) for p in op["Parts"]] == [(1, 5 * MiB), (2, 5 * MiB), (3, 4)]
        # Paginated.
        page = s3.get_object_attributes(Bucket=bkt, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2)
        assert [p["PartNumber"] for p in page["ObjectParts"]["Parts"]] == [1, 2]
        assert page["ObjectParts"]["IsTruncated"] is True
        assert page["ObjectParts"]["NextPartNumberMarker"] == 2
        rest = s3.get_object_attributes(Bucket=bkt, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2,
                                         PartNumberMarker=2)
        assert [p["PartNumber"] for p in rest["ObjectParts"]["Parts"]] == [3]
        assert rest["ObjectParts"]["IsTruncated"] is False
        # Only what was asked; a single-part object's checksum; a missing key.
        s3.put_object(Bucket=bkt, Key="one", Body=b"x" * 10, ChecksumAlgorithm="CRC32")
        one = s3.get_object_attributes(Bucket=bkt, Key="one", ObjectAttributes=["ObjectSize", "Checksum"])
        assert one["ObjectSize"] == 10 and "ETag" not in one and "ObjectParts" not in one
        assert one["Checksum"]["ChecksumCRC32"]
        with pytest.raises(ClientError) as ei:
            s3.get_object_attributes(Bucket=bkt, Key="nope", ObjectAttributes=["ETag"])
        assert err(ei) == ("NoSuchKey", 404)
    finally:
        empty_and_delete(s3, bkt)


def test_chunked_put_without_a_length(gristmill_s3, s3_endpoint):
    """A PutObject sent with `Transfer-Encoding: chunked` and no length (ceph/s3-tests
    test_object_write_with_chunked_transfer_encoding) is stored whole up to 16 MiB; a larger
    one gets S3's 411 MissingContentLength and nothing is stored."""
    import requests

    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        r = requests.put(f"{s3_endpoint}/{bkt}/k", data=iter([b"abc", b"def"]))  # unsigned: auth is off
        assert r.status_code == 200, r.text
        assert s3.get_object(Bucket=bkt, Key="k")["Body"].read() == b"abcdef"
        big = (os.urandom(1 << 20) for _ in range(17))
        r = requests.put(f"{s3_endpoint}/{bkt}/big", data=big)
        assert r.status_code == 411, r.text
        assert "<Code>MissingContentLength</Code>" in r.text
        with pytest.raises(ClientError) as ei:
            s3.head_object(Bucket=bkt, Key="big")
        assert err(ei)[1] == 404
    finally:
        empty_and_delete(s3, bkt)


# --- multipart checksums ----------------------------------------------------------------------


def _digest(algo: str, data: bytes) -> bytes:
    import zlib

    if algo == "SHA256":
        return hashlib.sha256(data).digest()
    if algo == "SHA1":
        return hashlib.sha1(data).digest()
    if algo == "CRC32":
        return zlib.crc32(data).to_bytes(4, "big")
    raise AssertionError(algo)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize("algo,kind", [
    ("SHA256", None), ("SHA1", None), ("CRC32", None), ("CRC32C", None),
    ("CRC64NVME", None), ("CRC32", "FULL_OBJECT"),
])
def test_multipart_checksums_composite_and_full_object(gristmill_s3, algo, kind):
    """An upload created with a checksum algorithm keeps each part's checksum (UploadPart,
    ListParts) and gives the object one: composite (the checksum of the parts' checksums,
    `-N`) by default for CRC32, CRC32C, SHA1 and SHA256; of the whole object for CRC64NVME and
    when FULL_OBJECT is asked for. Complete and HEAD (ChecksumMode) return it with its type.
    Gristmill only: moto 5.2 lists no part checksums."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        _checksummed_upload(s3, bkt, algo, kind)
    finally:
        empty_and_delete(s3, bkt)


def _checksummed_upload(s3, bkt, algo, kind):
    key = f"ck-{algo}-{kind}".lower()
    extra = {"ChecksumType": kind} if kind else {}
    up = s3.create_multipart_upload(Bucket=bkt, Key=key, ChecksumAlgorithm=algo, **extra)
    uid = up["UploadId"]
    parts = [os.urandom(5 * MiB), os.urandom(1000)]
    field = f"Checksum{algo}"
    done = []
    # boto3 computes CRC32C and CRC64NVME only with awscrt, which replaces its signer (and
    # breaks other tests' clock mocking): those parts go without a client checksum, and the
    # server computes the upload's algorithm for every part anyway.
    client_sums = {} if algo in ("CRC32C", "CRC64NVME") else {"ChecksumAlgorithm": algo}
    for n, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bkt, Key=key, UploadId=uid, PartNumber=n, Body=p, **client_sums)
        assert r.get(field), r
        done.append({"PartNumber": n, "ETag": r["ETag"], field: r[field]})
    listed = s3.list_parts(Bucket=bkt, Key=key, UploadId=uid)["Parts"]
    assert [p.get(field) for p in listed] == [d[field] for d in done]
    r = s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=uid, MultipartUpload={"Parts": done})
    composite = kind is None and algo != "CRC64NVME"
    value = r.get(field)
    assert value, r
    if composite:
        raw = b"".join(base64.b64decode(d[field]) for d in done)
        if algo in ("SHA256", "SHA1", "CRC32"):
            assert value == b64(_digest(algo, raw)) + "-2"
        else:
            assert value.endswith("-2")
    else:
        assert "-" not in value
        if algo == "CRC32":
            assert value == b64(_digest("CRC32", b"".join(parts)))
    assert r.get("ChecksumType") == ("COMPOSITE" if composite else "FULL_OBJECT")
    h = s3.head_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")
    assert h.get(field) == value
    assert h.get("ChecksumType") == ("COMPOSITE" if composite else "FULL_OBJECT")
    body = s3.get_object(Bucket=bkt, Key=key)["Body"].read()
    assert body == b"".join(parts)


def test_multipart_checksum_of_a_part_must_match(gristmill_s3):
    """A part checksum listed in CompleteMultipartUpload that is not the uploaded part's is
    InvalidPart, and the upload can still be completed with the right list. Gristmill only:
    moto 5.2 does not check listed part checksums."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        _wrong_part_checksum(s3, bkt)
    finally:
        empty_and_delete(s3, bkt)


def _wrong_part_checksum(s3, bkt):
    uid = s3.create_multipart_upload(Bucket=bkt, Key="ckbad", ChecksumAlgorithm="SHA256")["UploadId"]
    r = s3.upload_part(Bucket=bkt, Key="ckbad", UploadId=uid, PartNumber=1, Body=b"only part",
                       ChecksumAlgorithm="SHA256")
    wrong = b64(hashlib.sha256(b"something else").digest())
    bad = [{"PartNumber": 1, "ETag": r["ETag"], "ChecksumSHA256": wrong}]
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bkt, Key="ckbad", UploadId=uid, MultipartUpload={"Parts": bad})
    assert err(ei) == ("InvalidPart", 400)
    good = [{"PartNumber": 1, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]}]
    s3.complete_multipart_upload(Bucket=bkt, Key="ckbad", UploadId=uid, MultipartUpload={"Parts": good})
    assert s3.get_object(Bucket=bkt, Key="ckbad")["Body"].read() == b"only part"


# --- object tagging ---------------------------------------------------------------------------


def _tags(s3, bkt, key):
    return sorted((t["Key"], t["Value"]) for t in s3.get_object_tagging(Bucket=bkt, Key=key)["TagSet"])


def test_object_tagging_round_trip(s3, bkt):
    """Tags given on PUT are listed and counted on GET; PutObjectTagging replaces them and
    DeleteObjectTagging removes them, leaving the body, ETag and modification time as they
    were (tags change no data)."""
    s3.put_object(Bucket=bkt, Key="t", Body=b"tagged body", Tagging="team=ml&stage=raw%20data")
    assert _tags(s3, bkt, "t") == [("stage", "raw data"), ("team", "ml")]
    got = s3.get_object(Bucket=bkt, Key="t")
    assert got["TagCount"] == 2
    before = s3.head_object(Bucket=bkt, Key="t")
    s3.put_object_tagging(Bucket=bkt, Key="t", Tagging={"TagSet": [{"Key": "team", "Value": "data"}]})
    assert _tags(s3, bkt, "t") == [("team", "data")]
    assert s3.get_object(Bucket=bkt, Key="t")["TagCount"] == 1
    after = s3.head_object(Bucket=bkt, Key="t")
    assert after["ETag"] == before["ETag"]
    assert after["LastModified"] == before["LastModified"]
    s3.delete_object_tagging(Bucket=bkt, Key="t")
    assert _tags(s3, bkt, "t") == []
    got = s3.get_object(Bucket=bkt, Key="t")
    assert "TagCount" not in got
    assert got["Body"].read() == b"tagged body"
    # An object without tags, and a missing key.
    s3.put_object(Bucket=bkt, Key="plain", Body=b"x")
    assert _tags(s3, bkt, "plain") == []
    for call in (lambda: s3.get_object_tagging(Bucket=bkt, Key="nope"),
                 lambda: s3.put_object_tagging(Bucket=bkt, Key="nope", Tagging={"TagSet": []})):
        with pytest.raises(ClientError) as ei:
            call()
        assert err(ei) == ("NoSuchKey", 404)


@pytest.mark.parametrize("tagset,code", [
    ([{"Key": f"k{i}", "Value": "v"} for i in range(11)], ("BadRequest", 400)),
    ([{"Key": "k" * 129, "Value": "v"}], ("InvalidTag", 400)),
    ([{"Key": "k", "Value": "v" * 257}], ("InvalidTag", 400)),
    ([{"Key": "aws:reserved", "Value": "v"}], ("InvalidTag", 400)),
])
def test_object_tagging_limits(s3, bkt, tagset, code):
    s3.put_object(Bucket=bkt, Key="lim", Body=b"x", Tagging="keep=me")
    with pytest.raises(ClientError) as ei:
        s3.put_object_tagging(Bucket=bkt, Key="lim", Tagging={"TagSet": tagset})
    assert err(ei) == code
    assert _tags(s3, bkt, "lim") == [("keep", "me")]


def test_object_tagging_on_copy_and_multipart(s3, bkt):
    """CopyObject keeps the source's tags by default (even when replacing metadata) and takes
    the request's with TaggingDirective=REPLACE; CreateMultipartUpload's Tagging tags the
    completed object."""
    s3.put_object(Bucket=bkt, Key="src", Body=b"source", Tagging="a=1")
    s3.copy_object(Bucket=bkt, Key="kept", CopySource={"Bucket": bkt, "Key": "src"},
                   MetadataDirective="REPLACE", ContentType="text/plain")
    assert _tags(s3, bkt, "kept") == [("a", "1")]
    s3.copy_object(Bucket=bkt, Key="replaced", CopySource={"Bucket": bkt, "Key": "src"},
                   TaggingDirective="REPLACE", Tagging="b=2&c=3")
    assert _tags(s3, bkt, "replaced") == [("b", "2"), ("c", "3")]
    uid = s3.create_multipart_upload(Bucket=bkt, Key="mp", Tagging="mp=yes")["UploadId"]
    r = s3.upload_part(Bucket=bkt, Key="mp", UploadId=uid, PartNumber=1, Body=b"one part")
    s3.complete_multipart_upload(Bucket=bkt, Key="mp", UploadId=uid,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]})
    assert _tags(s3, bkt, "mp") == [("mp", "yes")]


# --- bucket ownership -------------------------------------------------------------------------


def test_creating_an_existing_bucket_says_whose_it_is(auth_s3_endpoint, admin_creds):
    """S3's rule (AWS's CreateBucket reference): in us-east-1 the owner creating its bucket
    again gets 200 and nothing changes (moto answers 409 there; this runs on Gristmill only),
    another user BucketAlreadyExists (409); the bucket and its objects are untouched."""
    from conftest import S3_USERS, S3Creds

    owner = make_s3(auth_s3_endpoint, admin_creds)
    other_user = S3_USERS["writer2"]
    other = make_s3(auth_s3_endpoint, S3Creds(other_user["access_key"], other_user["secret_key"]))
    name = new_bucket_name("own")
    owner.create_bucket(Bucket=name)
    try:
        owner.put_object(Bucket=name, Key="k", Body=b"kept")
        owner.create_bucket(Bucket=name)
        with pytest.raises(ClientError) as ei:
            other.create_bucket(Bucket=name)
        assert err(ei) == ("BucketAlreadyExists", 409)
        assert owner.get_object(Bucket=name, Key="k")["Body"].read() == b"kept"
        # The other user's own bucket is theirs.
        theirs = new_bucket_name("own")
        other.create_bucket(Bucket=theirs)
        with pytest.raises(ClientError) as ei:
            owner.create_bucket(Bucket=theirs)
        assert err(ei) == ("BucketAlreadyExists", 409)
        other.create_bucket(Bucket=theirs)
        other.delete_bucket(Bucket=theirs)
    finally:
        empty_and_delete(owner, name)


def test_owner_creating_again_outside_us_east_1(s3):
    """Outside us-east-1, S3 (and moto) answer the owner's second CreateBucket with
    BucketAlreadyOwnedByYou, 409 — as Gristmill does (in us-east-1 it is a 200 no-op)."""
    name = new_bucket_name("own")
    conf = {"LocationConstraint": "eu-west-1"}
    s3.create_bucket(Bucket=name, CreateBucketConfiguration=conf)
    try:
        with pytest.raises(ClientError) as ei:
            s3.create_bucket(Bucket=name, CreateBucketConfiguration=conf)
        assert err(ei) == ("BucketAlreadyOwnedByYou", 409)
    finally:
        s3.delete_bucket(Bucket=name)


# --- anonymous reads: public-read ACL and bucket policies ------------------------------------


def _public_policy(bucket: str, get: bool = True, list_: bool = False) -> str:
    import json

    statements = []
    if get:
        statements.append({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                           "Resource": f"arn:aws:s3:::{bucket}/*"})
    if list_:
        statements.append({"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": ["s3:ListBucket"],
                           "Resource": f"arn:aws:s3:::{bucket}"})
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def test_anonymous_reads_follow_the_bucket_policy_and_acl(auth_s3_endpoint, admin_creds, reader_creds):
    """With S3 auth on, an unsigned client reads nothing until the bucket's owner grants it:
    a policy allowing everyone s3:GetObject opens GetObject/HeadObject (not listing), a
    public-read ACL opens listing and reads (Gristmill has no object ACLs: the bucket's stands
    for its objects'); writes, other buckets and other operations stay denied; the reader and
    other users may not change the grants; deleting the policy closes it again."""
    from conftest import S3_USERS, S3Creds

    owner = make_s3(auth_s3_endpoint, admin_creds)
    anon = make_s3(auth_s3_endpoint, None)
    w2 = S3_USERS["writer2"]
    other = make_s3(auth_s3_endpoint, S3Creds(w2["access_key"], w2["secret_key"]))
    reader = make_s3(auth_s3_endpoint, reader_creds)
    name, closed = new_bucket_name("pub"), new_bucket_name("pub")
    owner.create_bucket(Bucket=name)
    owner.create_bucket(Bucket=closed)
    try:
        owner.put_object(Bucket=name, Key="k", Body=b"public bytes")
        owner.put_object(Bucket=closed, Key="k", Body=b"private bytes")

        def denied(call):
            with pytest.raises(ClientError) as ei:
                call()
            assert err(ei)[1] == 403, err(ei)

        denied(lambda: anon.get_object(Bucket=name, Key="k"))
        denied(lambda: anon.list_objects_v2(Bucket=name))
        with pytest.raises(ClientError) as ei:
            owner.get_bucket_policy(Bucket=name)
        assert err(ei) == ("NoSuchBucketPolicy", 404)

        # Only the owner (or an admin) sets who can read.
        denied(lambda: reader.put_bucket_policy(Bucket=name, Policy=_public_policy(name)))
        denied(lambda: other.put_bucket_policy(Bucket=name, Policy=_public_policy(name)))
        owner.put_bucket_policy(Bucket=name, Policy=_public_policy(name))
        assert owner.get_bucket_policy(Bucket=name)["Policy"] == _public_policy(name)
        assert anon.get_object(Bucket=name, Key="k")["Body"].read() == b"public bytes"
        assert anon.head_object(Bucket=name, Key="k")["ContentLength"] == len(b"public bytes")
        denied(lambda: anon.list_objects_v2(Bucket=name))
        denied(lambda: anon.put_object(Bucket=name, Key="new", Body=b"x"))
        denied(lambda: anon.delete_object(Bucket=name, Key="k"))
        # s3:GetObject is not s3:GetObjectVersion: one version of an object stays private.
        denied(lambda: anon.get_object(Bucket=name, Key="k", VersionId="null"))
        # ...however the parameter's name is spelled in the query.
        url = f"{auth_s3_endpoint}/{name}/k?version%49d=null"
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(url, timeout=10)
        assert ei.value.code == 403
        denied(lambda: anon.get_object(Bucket=closed, Key="k"))
        denied(lambda: anon.get_bucket_policy(Bucket=name))
        denied(lambda: anon.list_buckets())

        # A public-read ACL lets everyone list and read.
        owner.delete_bucket_policy(Bucket=name)
        denied(lambda: anon.get_object(Bucket=name, Key="k"))
        owner.put_bucket_acl(Bucket=name, ACL="public-read")
        assert [o["Key"] for o in anon.list_objects_v2(Bucket=name)["Contents"]] == ["k"]
        assert anon.get_object(Bucket=name, Key="k")["Body"].read() == b"public bytes"
        denied(lambda: anon.put_object(Bucket=name, Key="new", Body=b"x"))
        acl = owner.get_bucket_acl(Bucket=name)
        assert any(g["Grantee"].get("URI", "").endswith("/AllUsers") and g["Permission"] == "READ"
                   for g in acl["Grants"])
        owner.put_bucket_acl(Bucket=name, ACL="private")
        denied(lambda: anon.list_objects_v2(Bucket=name))
        denied(lambda: anon.get_object(Bucket=name, Key="k"))
        owner.put_bucket_policy(Bucket=name, Policy=_public_policy(name))

        # Policies this front cannot keep are refused, not stored and ignored.
        deny = _public_policy(name).replace('"Allow"', '"Deny"')
        with pytest.raises(ClientError) as ei:
            owner.put_bucket_policy(Bucket=name, Policy=deny)
        assert err(ei) == ("NotImplemented", 501)
        with pytest.raises(ClientError) as ei:
            owner.put_bucket_policy(Bucket=name, Policy="{not json")
        assert err(ei) == ("MalformedPolicy", 400)

        owner.delete_bucket_policy(Bucket=name)
        denied(lambda: anon.get_object(Bucket=name, Key="k"))
    finally:
        empty_and_delete(owner, name)
        empty_and_delete(owner, closed)


def test_policy_grants_by_action_and_resource_and_object_acls(auth_s3_endpoint, admin_creds):
    """Policies open what they name to everyone: s3:PutObject on one prefix lets unsigned
    clients write there and nowhere else, a copy needs its source to be as open, `s3:Get*`
    wildcards match; an object's own `private` ACL closes it in a public-read bucket (and
    `public-read` reopens it), AWS's object-ACL semantics."""
    import json

    owner = make_s3(auth_s3_endpoint, admin_creds)
    anon = make_s3(auth_s3_endpoint, None)
    name, closed = new_bucket_name("pol"), new_bucket_name("pol")
    owner.create_bucket(Bucket=name)
    owner.create_bucket(Bucket=closed)
    try:
        owner.put_object(Bucket=closed, Key="secret", Body=b"s")
        owner.put_object(Bucket=name, Key="pub/a", Body=b"a")
        owner.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:PutObject",
             "Resource": f"arn:aws:s3:::{name}/drop/*"},
            {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "s3:Get*",
             "Resource": f"arn:aws:s3:::{name}/pub/*"},
        ]}))
        anon.put_object(Bucket=name, Key="drop/x", Body=b"dropped")
        assert owner.get_object(Bucket=name, Key="drop/x")["Body"].read() == b"dropped"
        assert outcome(lambda: anon.put_object(Bucket=name, Key="other", Body=b"x"))[1] == 403
        assert outcome(lambda: anon.get_object(Bucket=name, Key="drop/x"))[1] == 403
        assert anon.get_object(Bucket=name, Key="pub/a")["Body"].read() == b"a"
        assert outcome(lambda: anon.delete_object(Bucket=name, Key="pub/a"))[1] == 403
        # A copy reads its source: a private one is not copied into the open prefix.
        assert outcome(lambda: anon.copy_object(
            Bucket=name, Key="drop/stolen", CopySource={"Bucket": closed, "Key": "secret"},
        ))[1] == 403
        assert outcome(lambda: owner.head_object(Bucket=name, Key="drop/stolen"))[1] == 404
        anon.copy_object(Bucket=name, Key="drop/copy", CopySource={"Bucket": name, "Key": "pub/a"})

        # An object closed by its own ACL cannot be copied out by everyone either.
        owner.put_object(Bucket=name, Key="pub/closed", Body=b"c", ACL="private")
        assert outcome(lambda: anon.get_object(Bucket=name, Key="pub/closed"))[1] == 403
        assert outcome(lambda: anon.copy_object(
            Bucket=name, Key="drop/closed", CopySource={"Bucket": name, "Key": "pub/closed"},
        ))[1] == 403
        assert outcome(lambda: owner.head_object(Bucket=name, Key="drop/closed"))[1] == 404
        # s3:DeleteObject does not delete versions (s3:DeleteObjectVersion).
        owner.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        owner.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:DeleteObject",
             "Resource": f"arn:aws:s3:::{name}/drop/*"}]}))
        kept = owner.put_object(Bucket=name, Key="drop/v", Body=b"v")["VersionId"]
        assert outcome(lambda: anon.delete_object(Bucket=name, Key="drop/v", VersionId=kept))[1] \
            == 403
        anon.delete_object(Bucket=name, Key="drop/v")  # a delete marker
        assert owner.get_object(Bucket=name, Key="drop/v", VersionId=kept)["Body"].read() == b"v"

        # Object ACLs in a public-read bucket.
        owner.delete_bucket_policy(Bucket=name)
        owner.put_bucket_acl(Bucket=name, ACL="public-read")
        owner.put_object(Bucket=name, Key="mine", Body=b"m", ACL="private")
        assert outcome(lambda: anon.get_object(Bucket=name, Key="mine")) == ("AccessDenied", 403)
        assert outcome(lambda: anon.head_object(Bucket=name, Key="mine"))[1] == 403
        assert anon.get_object(Bucket=name, Key="pub/a")["Body"].read() == b"a"
        owner.put_object_acl(Bucket=name, Key="pub/a", ACL="private")
        assert outcome(lambda: anon.get_object(Bucket=name, Key="pub/a"))[1] == 403
        grants = owner.get_object_acl(Bucket=name, Key="pub/a")["Grants"]
        assert not any(g["Grantee"].get("URI", "").endswith("/AllUsers") for g in grants)
        owner.put_object_acl(Bucket=name, Key="pub/a", ACL="public-read")
        assert anon.get_object(Bucket=name, Key="pub/a")["Body"].read() == b"a"
        # public-read where the bucket does not open its objects is refused, not ignored.
        assert outcome(lambda: owner.put_object_acl(Bucket=closed, Key="secret",
                                                    ACL="public-read"))[1] == 501
    finally:
        empty_and_delete(owner, name)
        empty_and_delete(owner, closed)


def test_object_writer_ownership_records_the_writer(auth_s3_endpoint, admin_creds):
    """ObjectOwnership ObjectWriter: the account that writes an object (PUT, copy, multipart)
    owns it, as GetObjectAcl and ListParts say; BucketOwnerPreferred gives the bucket owner
    what is written with bucket-owner-full-control."""
    from conftest import S3_USERS, S3Creds

    owner = make_s3(auth_s3_endpoint, admin_creds)
    w2 = S3_USERS["writer2"]
    writer = make_s3(auth_s3_endpoint, S3Creds(w2["access_key"], w2["secret_key"]))
    name = new_bucket_name("own")
    owner.create_bucket(Bucket=name, ObjectOwnership="ObjectWriter")
    try:
        assert owner.get_bucket_ownership_controls(Bucket=name)["OwnershipControls"]["Rules"] \
            == [{"ObjectOwnership": "ObjectWriter"}]
        writer.put_object(Bucket=name, Key="w", Body=b"w")
        owner.put_object(Bucket=name, Key="o", Body=b"o")
        assert owner.get_object_acl(Bucket=name, Key="w")["Owner"]["ID"] == w2["access_key"]
        assert owner.get_object_acl(Bucket=name, Key="o")["Owner"]["ID"] == "admin"
        writer.copy_object(Bucket=name, Key="c", CopySource={"Bucket": name, "Key": "o"})
        assert owner.get_object_acl(Bucket=name, Key="c")["Owner"]["ID"] == w2["access_key"]
        up = writer.create_multipart_upload(Bucket=name, Key="m")
        parts = owner.list_parts(Bucket=name, Key="m", UploadId=up["UploadId"])
        assert parts["Owner"]["ID"] == w2["access_key"]
        assert parts["Initiator"]["ID"] == w2["access_key"]
        writer.abort_multipart_upload(Bucket=name, Key="m", UploadId=up["UploadId"])

        owner.put_bucket_ownership_controls(Bucket=name, OwnershipControls={
            "Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]})
        writer.put_object(Bucket=name, Key="p", Body=b"p", ACL="bucket-owner-full-control")
        assert owner.get_object_acl(Bucket=name, Key="p")["Owner"]["ID"] != w2["access_key"]
        writer.put_object(Bucket=name, Key="q", Body=b"q")
        assert owner.get_object_acl(Bucket=name, Key="q")["Owner"]["ID"] == w2["access_key"]
    finally:
        empty_and_delete(owner, name)


def test_bucket_policy_and_acl_calls_match_moto(s3, bkt):
    """Put/Get/DeleteBucketPolicy, NoSuchBucketPolicy and a public-read ACL's AllUsers READ
    grant, answered alike by Gristmill and moto."""
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_policy(Bucket=bkt)
    assert err(ei) == ("NoSuchBucketPolicy", 404)
    doc = _public_policy(bkt, get=True, list_=True)
    s3.put_bucket_policy(Bucket=bkt, Policy=doc)
    import json

    assert json.loads(s3.get_bucket_policy(Bucket=bkt)["Policy"]) == json.loads(doc)
    s3.delete_bucket_policy(Bucket=bkt)
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_policy(Bucket=bkt)
    assert err(ei) == ("NoSuchBucketPolicy", 404)
    s3.put_bucket_acl(Bucket=bkt, ACL="public-read")
    grants = s3.get_bucket_acl(Bucket=bkt)["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("/AllUsers") and g["Permission"] == "READ" for g in grants)
    assert any(g["Permission"] == "FULL_CONTROL" for g in grants)


# --- versioning -------------------------------------------------------------------------------


def _enable(s3, bucket, status="Enabled"):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})


def _body(s3, bucket, key, **kw) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read()


def _versions(s3, bucket, **kw) -> list[tuple]:
    """Every version and delete marker, in S3's order (by key, newest first): (key, id,
    latest, is a marker). One call: at most 1000."""
    r = s3.list_object_versions(Bucket=bucket, **kw)
    items = [(v["Key"], v["VersionId"], v["IsLatest"], False, v["LastModified"]) for v in r.get("Versions", [])]
    items += [(m["Key"], m["VersionId"], m["IsLatest"], True, m["LastModified"]) for m in r.get("DeleteMarkers", [])]
    return _in_s3_order(items)


def _in_s3_order(items: list[tuple]) -> list[tuple]:
    """S3 interleaves versions and markers by key, newest first; the client gets two lists.
    Back in one: by key, the latest first, then by age (moto's times are in whole seconds)."""
    items.sort(key=lambda i: (i[0], not i[2], -i[4].timestamp()))
    return [i[:4] for i in items]


def test_versioning_status_round_trip(s3, bkt):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bkt)
    _enable(s3, bkt)
    assert s3.get_bucket_versioning(Bucket=bkt)["Status"] == "Enabled"
    _enable(s3, bkt, "Suspended")
    assert s3.get_bucket_versioning(Bucket=bkt)["Status"] == "Suspended"
    _enable(s3, bkt)
    assert s3.get_bucket_versioning(Bucket=bkt)["Status"] == "Enabled"


def test_versions_are_kept_and_read_by_id(s3, bkt):
    _enable(s3, bkt)
    v1 = s3.put_object(Bucket=bkt, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bkt, Key="k", Body=b"second")["VersionId"]
    assert v1 and v2 and v1 != v2 and "null" not in (v1, v2)
    got = s3.get_object(Bucket=bkt, Key="k")
    assert got["Body"].read() == b"second" and got["VersionId"] == v2
    old = s3.get_object(Bucket=bkt, Key="k", VersionId=v1)
    assert old["Body"].read() == b"one" and old["VersionId"] == v1
    head = s3.head_object(Bucket=bkt, Key="k", VersionId=v1)
    assert head["ContentLength"] == 3 and head["VersionId"] == v1
    attrs = s3.get_object_attributes(Bucket=bkt, Key="k", VersionId=v1, ObjectAttributes=["ObjectSize", "ETag"])
    assert attrs["ObjectSize"] == 3 and attrs["VersionId"] == v1
    # The current listing shows one object; the versions listing both, newest first.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bkt).get("Contents", [])] == ["k"]
    assert _versions(s3, bkt) == [("k", v2, True, False), ("k", v1, False, False)]
    # A version id of another key is no version of this one.
    other = s3.put_object(Bucket=bkt, Key="other", Body=b"x")["VersionId"]
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="k", VersionId=other)
    assert err(ei) == ("NoSuchVersion", 404)
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="k", VersionId=other)
    assert err(ei)[1] == 404


def test_delete_leaves_a_marker_and_removing_it_restores(s3, bkt, request):
    _enable(s3, bkt)
    v1 = s3.put_object(Bucket=bkt, Key="k", Body=b"kept")["VersionId"]
    d = s3.delete_object(Bucket=bkt, Key="k")
    marker = d["VersionId"]
    assert d["DeleteMarker"] is True and marker and marker != v1
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="k")
    assert err(ei) == ("NoSuchKey", 404)
    gristmill = request.node.callspec.params["s3"] == "gristmill"
    if gristmill:
        # S3's 404 says why: the latest version is a delete marker (moto sends no such header).
        headers = ei.value.response["ResponseMetadata"]["HTTPHeaders"]
        assert headers.get("x-amz-delete-marker") == "true"
        assert headers.get("x-amz-version-id") == marker
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bkt, Key="k")
    assert err(ei)[1] == 404
    if gristmill:
        assert ei.value.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker") == "true"
    assert _body(s3, bkt, "k", VersionId=v1) == b"kept"
    if gristmill:
        # S3 answers a read of a delete marker's version with 405 and x-amz-delete-marker;
        # moto 5.2 answers it NoSuchVersion when the test runs on its own, 405 after others.
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=bkt, Key="k", VersionId=marker)
        assert err(ei) == ("MethodNotAllowed", 405)
        assert ei.value.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker") == "true"
        with pytest.raises(ClientError) as ei:
            s3.head_object(Bucket=bkt, Key="k", VersionId=marker)
        assert err(ei)[1] == 405
    assert s3.list_objects_v2(Bucket=bkt).get("Contents", []) == []
    assert _versions(s3, bkt) == [("k", marker, True, True), ("k", v1, False, False)]
    # Removing the marker for good makes the version before it current again.
    d = s3.delete_object(Bucket=bkt, Key="k", VersionId=marker)
    assert d["VersionId"] == marker
    if gristmill:
        # S3 says the version removed was a delete marker; moto does not.
        assert d.get("DeleteMarker") is True
    got = s3.get_object(Bucket=bkt, Key="k")
    assert got["Body"].read() == b"kept" and got["VersionId"] == v1
    assert _versions(s3, bkt) == [("k", v1, True, False)]


def test_deleting_the_current_version_promotes_the_one_before(s3, bkt):
    _enable(s3, bkt)
    v1 = s3.put_object(Bucket=bkt, Key="k", Body=b"1")["VersionId"]
    v2 = s3.put_object(Bucket=bkt, Key="k", Body=b"2")["VersionId"]
    v3 = s3.put_object(Bucket=bkt, Key="k", Body=b"3")["VersionId"]
    # A noncurrent version goes for good; the current stays.
    s3.delete_object(Bucket=bkt, Key="k", VersionId=v2)
    assert _body(s3, bkt, "k") == b"3"
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="k", VersionId=v2)
    assert err(ei) == ("NoSuchVersion", 404)
    s3.delete_object(Bucket=bkt, Key="k", VersionId=v3)
    got = s3.get_object(Bucket=bkt, Key="k")
    assert got["Body"].read() == b"1" and got["VersionId"] == v1
    assert _versions(s3, bkt) == [("k", v1, True, False)]
    # Deleting the last version leaves no object and nothing to list.
    s3.delete_object(Bucket=bkt, Key="k", VersionId=v1)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bkt, Key="k")
    assert err(ei) == ("NoSuchKey", 404)
    assert _versions(s3, bkt) == []


def test_list_object_versions_pages_concatenate_to_the_whole(s3, bkt):
    _enable(s3, bkt)
    for i in range(3):
        s3.put_object(Bucket=bkt, Key="a", Body=b"a%d" % i)
    s3.put_object(Bucket=bkt, Key="b", Body=b"b")
    s3.delete_object(Bucket=bkt, Key="b")
    s3.put_object(Bucket=bkt, Key="c", Body=b"c")
    s3.put_object(Bucket=bkt, Key="dir/x", Body=b"x")
    whole = _versions(s3, bkt)
    assert [(k, latest, m) for k, _, latest, m in whole] == [
        ("a", True, False), ("a", False, False), ("a", False, False),
        ("b", True, True), ("b", False, False), ("c", True, False), ("dir/x", True, False)]
    for max_keys in (1, 2, 3):
        got, kw = [], {}
        for _ in range(20):
            r = s3.list_object_versions(Bucket=bkt, MaxKeys=max_keys, **kw)
            page = [(v["Key"], v["VersionId"], v["IsLatest"], False, v["LastModified"]) for v in r.get("Versions", [])]
            page += [(m["Key"], m["VersionId"], m["IsLatest"], True, m["LastModified"]) for m in r.get("DeleteMarkers", [])]
            assert len(page) <= max_keys
            got += _in_s3_order(page)
            if not r["IsTruncated"]:
                break
            kw = {"KeyMarker": r["NextKeyMarker"], "VersionIdMarker": r["NextVersionIdMarker"]}
        assert got == whole, f"MaxKeys={max_keys}"
    # A delimiter groups keys; the versions of the rest are listed.
    r = s3.list_object_versions(Bucket=bkt, Delimiter="/")
    assert [p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["dir/"]
    assert sorted({v["Key"] for v in r.get("Versions", [])}) == ["a", "b", "c"]


def test_objects_from_before_versioning_are_the_null_version(s3, bkt):
    s3.put_object(Bucket=bkt, Key="k", Body=b"old")
    _enable(s3, bkt)
    v = s3.put_object(Bucket=bkt, Key="k", Body=b"new")["VersionId"]
    assert _versions(s3, bkt) == [("k", v, True, False), ("k", "null", False, False)]
    assert _body(s3, bkt, "k", VersionId="null") == b"old"


def test_copy_from_a_version_and_multipart_versions(s3, bkt):
    _enable(s3, bkt)
    v1 = s3.put_object(Bucket=bkt, Key="src", Body=b"first")["VersionId"]
    s3.put_object(Bucket=bkt, Key="src", Body=b"second")
    r = s3.copy_object(Bucket=bkt, Key="dst", CopySource={"Bucket": bkt, "Key": "src", "VersionId": v1})
    assert r["CopySourceVersionId"] == v1 and r["VersionId"]
    assert _body(s3, bkt, "dst") == b"first"
    # Restoring an old version over the current one: a copy onto the same key.
    s3.copy_object(Bucket=bkt, Key="src", CopySource={"Bucket": bkt, "Key": "src", "VersionId": v1})
    assert _body(s3, bkt, "src") == b"first"
    assert len([v for v in _versions(s3, bkt) if v[0] == "src"]) == 3
    up = s3.create_multipart_upload(Bucket=bkt, Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket=bkt, Key="mp", UploadId=up, PartNumber=1, Body=b"p" * 100)["ETag"]
    done = s3.complete_multipart_upload(Bucket=bkt, Key="mp", UploadId=up,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert done["VersionId"]
    assert s3.head_object(Bucket=bkt, Key="mp")["VersionId"] == done["VersionId"]


def test_a_bucket_with_versions_is_not_empty(s3, request):
    name = _bucket(s3)
    try:
        _enable(s3, name)
        v = s3.put_object(Bucket=name, Key="k", Body=b"x")["VersionId"]
        marker = s3.delete_object(Bucket=name, Key="k")["VersionId"]
        with pytest.raises(ClientError) as ei:
            s3.delete_bucket(Bucket=name)
        assert err(ei) == ("BucketNotEmpty", 409)
        r = s3.delete_objects(Bucket=name, Delete={"Objects": [
            {"Key": "k", "VersionId": v}, {"Key": "k", "VersionId": marker}]})
        deleted = {d["VersionId"]: d.get("DeleteMarker", False) for d in r["Deleted"]}
        assert set(deleted) == {v, marker}
        if request.node.callspec.params["s3"] == "gristmill":
            # S3 says which removed version was a marker; moto does not.
            assert deleted == {v: False, marker: True}
        s3.delete_bucket(Bucket=name)
    finally:
        empty_and_delete(s3, name)


def test_suspended_versioning_keeps_one_null_version(gristmill_s3):
    """Gristmill only: moto replaces every version on a PUT to a suspended bucket."""
    s3 = gristmill_s3
    name = _bucket(s3)
    try:
        _enable(s3, name)
        v1 = s3.put_object(Bucket=name, Key="k", Body=b"v1")["VersionId"]
        _enable(s3, name, "Suspended")
        r = s3.put_object(Bucket=name, Key="k", Body=b"n1")
        assert "VersionId" not in r  # the null version
        s3.put_object(Bucket=name, Key="k", Body=b"n2")
        # The null version was replaced; v1 stays.
        assert _versions(s3, name) == [("k", "null", True, False), ("k", v1, False, False)]
        assert _body(s3, name, "k") == b"n2"
        assert _body(s3, name, "k", VersionId=v1) == b"v1"
        # A delete leaves a null marker in place of the null version.
        d = s3.delete_object(Bucket=name, Key="k")
        assert d["DeleteMarker"] is True
        assert _versions(s3, name) == [("k", "null", True, True), ("k", v1, False, False)]
        # Malformed version ids are refused.
        with pytest.raises(ClientError) as ei:
            s3.get_object(Bucket=name, Key="k", VersionId="not-a-version")
        assert err(ei) == ("InvalidArgument", 400)
        # Versioning cannot go back to never having been enabled, and stays on remote buckets' side.
        with pytest.raises(ClientError) as ei:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Off"})
        assert err(ei)[1] == 400
    finally:
        empty_and_delete(s3, name)


def test_tags_belong_to_one_version(s3, bkt, request):
    _enable(s3, bkt)
    v1 = s3.put_object(Bucket=bkt, Key="k", Body=b"1", Tagging="v=1")["VersionId"]
    v2 = s3.put_object(Bucket=bkt, Key="k", Body=b"22", Tagging="v=2")["VersionId"]
    tags = lambda **kw: {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bkt, Key="k", **kw)["TagSet"]}
    assert tags() == {"v": "2"} and tags(VersionId=v1) == {"v": "1"}
    r = s3.put_object_tagging(Bucket=bkt, Key="k", VersionId=v1, Tagging={"TagSet": [{"Key": "old", "Value": "yes"}]})
    if request.node.callspec.params["s3"] == "gristmill":
        assert r["VersionId"] == v1  # S3 names the version tagged; moto does not
    assert tags(VersionId=v1) == {"old": "yes"} and tags() == {"v": "2"}
    s3.delete_object_tagging(Bucket=bkt, Key="k", VersionId=v2)
    assert tags() == {} and tags(VersionId=v1) == {"old": "yes"}
    # Tags change no version: the same two, the same bytes.
    assert [v[1] for v in _versions(s3, bkt)] == [v2, v1]
    assert _body(s3, bkt, "k", VersionId=v1) == b"1"


def test_versioned_buckets_guard_their_version_metadata(gristmill_s3, s3_endpoint):
    """Gristmill only, over the native API: a client cannot set or remove an object's version
    id or delete-marker flag, and cannot append to a shard in place in a versioned bucket."""
    import requests

    s3 = gristmill_s3
    name = _bucket(s3)
    try:
        _enable(s3, name)
        v = s3.put_object(Bucket=name, Key="k", Body=b"x")["VersionId"]
        url = f"{s3_endpoint}/v1/objects/{name}/k"
        for change in ({"set": {"ais-delete-marker": "true"}}, {"set": {"ais-version-id": "mint"}},
                       {"delete": ["ais-version-id"]}):
            r = requests.patch(url, json=change, timeout=10)
            assert r.status_code == 400 and "cannot be changed" in r.text, (change, r.status_code, r.text)
        assert _versions(s3, name) == [("k", v, True, False)]
        assert _body(s3, name, "k") == b"x"
        r = requests.put(f"{s3_endpoint}/v1/objects/{name}/shard.tar?archpath=a.txt", data=b"a", timeout=10)
        assert r.status_code == 400 and "versioned" in r.text, r.text
    finally:
        empty_and_delete(s3, name)


# --- what the front does not do is refused, never ignored -------------------------------------


def test_encryption_and_object_lock_are_refused_not_ignored(gristmill_s3, s3_endpoint):
    """SSE-KMS and SSE-S3 requests get 501 NotImplemented and object-lock headers on a bucket
    without Object Lock 400 InvalidRequest (S3's answer): nothing is stored, so no client
    believes its data encrypted, or locked, when it is not (SSE-C and Object Lock themselves
    are supported: test_s3_sse_c.py, test_s3_object_lock.py). A presigned URL valid for over a
    week is refused with 403 (SigV4's limit)."""
    import datetime

    import requests

    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        for extra in (dict(ServerSideEncryption="aws:kms"), dict(ServerSideEncryption="AES256")):
            with pytest.raises(ClientError) as ei:
                s3.put_object(Bucket=bkt, Key="enc", Body=b"secret", **extra)
            assert err(ei) == ("NotImplemented", 501), extra
            with pytest.raises(ClientError) as ei:
                s3.create_multipart_upload(Bucket=bkt, Key="enc", **extra)
            assert err(ei) == ("NotImplemented", 501), extra
        with pytest.raises(ClientError) as ei:
            s3.head_object(Bucket=bkt, Key="enc")
        assert err(ei)[1] == 404
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        with pytest.raises(ClientError) as ei:
            s3.put_object(Bucket=bkt, Key="locked", Body=b"x", ObjectLockMode="GOVERNANCE",
                          ObjectLockRetainUntilDate=until)
        assert err(ei) == ("InvalidRequest", 400)
        with pytest.raises(ClientError) as ei:
            s3.head_object(Bucket=bkt, Key="locked")
        assert err(ei)[1] == 404
        with pytest.raises(ClientError) as ei:
            s3.get_object_lock_configuration(Bucket=bkt)
        assert err(ei) == ("ObjectLockConfigurationNotFoundError", 404)
        s3.put_object(Bucket=bkt, Key="plain", Body=b"x")
        for days in (8, -1):
            url = s3.generate_presigned_url("get_object", Params={"Bucket": bkt, "Key": "plain"},
                                            ExpiresIn=days * 86400)
            r = requests.get(url)
            assert r.status_code == 403, (days, r.text)
            assert "AuthorizationQueryParametersError" in r.text
    finally:
        empty_and_delete(s3, bkt)


# --- CORS, ownership controls, virtual-hosted style (Gristmill only: moto differs) -----------


def test_cors_rules_answer_preflights_and_requests(gristmill_s3, s3_endpoint):
    """PutBucketCors rules (one `*` per origin or header pattern) answer OPTIONS preflights
    before any signature check — 400 without Origin and Access-Control-Request-Method, 403
    when no rule allows it — and add the Access-Control-* headers to answers of requests
    with an Origin; DeleteBucketCors removes them."""
    import requests

    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        with pytest.raises(ClientError) as ei:
            s3.get_bucket_cors(Bucket=bkt)
        assert err(ei) == ("NoSuchCORSConfiguration", 404)
        rules = [
            {"AllowedMethods": ["GET"], "AllowedOrigins": ["*suffix"]},
            {"AllowedMethods": ["PUT"], "AllowedOrigins": ["*.put"], "AllowedHeaders": ["x-amz-*"],
             "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600},
        ]
        s3.put_bucket_cors(Bucket=bkt, CORSConfiguration={"CORSRules": rules})
        got = s3.get_bucket_cors(Bucket=bkt)["CORSRules"]
        assert [(r["AllowedMethods"], r["AllowedOrigins"]) for r in got] == [
            (["GET"], ["*suffix"]), (["PUT"], ["*.put"])]
        assert got[1]["MaxAgeSeconds"] == 600 and got[1]["ExposeHeaders"] == ["ETag"]
        s3.put_object(Bucket=bkt, Key="k", Body=b"cors")
        url = f"{s3_endpoint}/{bkt}/k"
        assert requests.options(url).status_code == 400
        assert requests.options(url, headers={"Origin": "a.suffix"}).status_code == 400
        r = requests.options(url, headers={"Origin": "a.suffix", "Access-Control-Request-Method": "GET"})
        assert r.status_code == 200, r.text
        assert (r.headers["access-control-allow-origin"], r.headers["access-control-allow-methods"]) == (
            "a.suffix", "GET")
        r = requests.options(url, headers={"Origin": "a.suffix", "Access-Control-Request-Method": "PUT"})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
        r = requests.options(url, headers={"Origin": "b.put", "Access-Control-Request-Method": "PUT",
                                           "Access-Control-Request-Headers": "X-Amz-Date"})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-headers"] == "x-amz-date"
        assert r.headers["access-control-max-age"] == "600"
        assert r.headers["access-control-expose-headers"] == "ETag"
        r = requests.options(url, headers={"Origin": "b.put", "Access-Control-Request-Method": "PUT",
                                           "Access-Control-Request-Headers": "authorization"})
        assert r.status_code == 403
        # Requests with an Origin get the headers of the rule that allows them, whatever
        # their own answer.
        r = requests.get(url, headers={"Origin": "a.suffix"})
        assert r.status_code == 200 and r.content == b"cors"
        assert r.headers["access-control-allow-origin"] == "a.suffix"
        assert "access-control-allow-origin" not in requests.get(url).headers
        r = requests.get(f"{url}-missing", headers={"Origin": "a.suffix"})
        assert r.status_code == 404 and r.headers["access-control-allow-origin"] == "a.suffix"
        assert "access-control-allow-origin" not in requests.get(url, headers={"Origin": "nope"}).headers
        s3.delete_bucket_cors(Bucket=bkt)
        with pytest.raises(ClientError) as ei:
            s3.get_bucket_cors(Bucket=bkt)
        assert err(ei) == ("NoSuchCORSConfiguration", 404)
        r = requests.options(url, headers={"Origin": "a.suffix", "Access-Control-Request-Method": "GET"})
        assert r.status_code == 403
        with pytest.raises(ClientError) as ei:
            s3.put_bucket_cors(Bucket=bkt, CORSConfiguration={"CORSRules": [
                {"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}]})
        assert err(ei) == ("InvalidRequest", 400)
    finally:
        empty_and_delete(s3, bkt)


def test_bucket_ownership_controls(gristmill_s3):
    """BucketOwnerEnforced (objects are the bucket owner's) is kept and turns ACLs off (setting
    one, or writing with one other than bucket-owner-full-control: AccessControlListNotSupported); ObjectWriter and BucketOwnerPreferred are kept
    too (the writer recorded as owner: test_object_writer_ownership_records_the_writer)."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        with pytest.raises(ClientError) as ei:
            s3.get_bucket_ownership_controls(Bucket=bkt)
        assert err(ei) == ("OwnershipControlsNotFoundError", 404)
        enforced = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
        s3.put_bucket_ownership_controls(Bucket=bkt, OwnershipControls=enforced)
        rules = s3.get_bucket_ownership_controls(Bucket=bkt)["OwnershipControls"]["Rules"]
        assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
        with pytest.raises(ClientError) as ei:
            s3.put_bucket_acl(Bucket=bkt, ACL="public-read")
        assert err(ei) == ("AccessControlListNotSupported", 400)
        # AWS: with ACLs off, setting any ACL fails, and an object written with one other
        # than bucket-owner-full-control is refused.
        with pytest.raises(ClientError) as ei:
            s3.put_bucket_acl(Bucket=bkt, ACL="private")
        assert err(ei) == ("AccessControlListNotSupported", 400)
        with pytest.raises(ClientError) as ei:
            s3.put_object(Bucket=bkt, Key="acl", Body=b"x", ACL="private")
        assert err(ei) == ("AccessControlListNotSupported", 400)
        s3.put_object(Bucket=bkt, Key="acl", Body=b"x", ACL="bucket-owner-full-control")
        with pytest.raises(ClientError) as ei:
            s3.put_object_acl(Bucket=bkt, Key="acl", ACL="private")
        assert err(ei) == ("AccessControlListNotSupported", 400)
        for other in ("ObjectWriter", "BucketOwnerPreferred"):
            s3.put_bucket_ownership_controls(
                Bucket=bkt, OwnershipControls={"Rules": [{"ObjectOwnership": other}]})
            rules = s3.get_bucket_ownership_controls(Bucket=bkt)["OwnershipControls"]["Rules"]
            assert rules == [{"ObjectOwnership": other}]
        with pytest.raises(ClientError) as ei:
            s3.put_bucket_ownership_controls(
                Bucket=bkt, OwnershipControls={"Rules": [{"ObjectOwnership": "Nobody"}]})
        assert err(ei)[1] == 400
        s3.delete_bucket_ownership_controls(Bucket=bkt)
        with pytest.raises(ClientError) as ei:
            s3.get_bucket_ownership_controls(Bucket=bkt)
        assert err(ei) == ("OwnershipControlsNotFoundError", 404)
        made = new_bucket_name("own")
        s3.create_bucket(Bucket=made, ObjectOwnership="BucketOwnerEnforced")
        try:
            rules = s3.get_bucket_ownership_controls(Bucket=made)["OwnershipControls"]["Rules"]
            assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
        finally:
            s3.delete_bucket(Bucket=made)
    finally:
        empty_and_delete(s3, bkt)


def test_virtual_hosted_style_addressing(default_creds):
    """With --s3-domain (GRISTD_S3_DOMAIN) a Host of `bucket.DOMAIN` names the bucket, as
    SDKs address it by default; other hosts stay path-style on the same port. boto3 with
    addressing_style=virtual reaches it through a Host-rewriting hook (no DNS here)."""
    import boto3
    import requests
    from botocore.config import Config

    from conftest import _playground

    with _playground({"GRISTD_S3_DOMAIN": "s3.grist.test"}) as endpoint:
        port = endpoint.rsplit(":", 1)[1]
        path = make_s3(endpoint, None)
        path.create_bucket(Bucket="vhost")
        path.put_object(Bucket="vhost", Key="a/b", Body=b"path-style")
        r = requests.get(f"{endpoint}/a/b", headers={"Host": f"vhost.s3.grist.test:{port}"})
        assert r.status_code == 200 and r.content == b"path-style", r.text
        r = requests.put(f"{endpoint}/put-by-host", data=b"virtual",
                         headers={"Host": f"vhost.s3.grist.test:{port}"})
        assert r.status_code == 200, r.text
        assert path.get_object(Bucket="vhost", Key="put-by-host")["Body"].read() == b"virtual"
        r = requests.get(f"{endpoint}/?list-type=2", headers={"Host": f"vhost.s3.grist.test:{port}"})
        assert r.status_code == 200 and "<Key>put-by-host</Key>" in r.text, r.text
        # boto3 in virtual style, signed for the virtual host, connecting to 127.0.0.1.
        virtual = boto3.client(
            "s3", endpoint_url=f"http://s3.grist.test:{port}", region_name="us-east-1",
            aws_access_key_id=default_creds.access_key,
            aws_secret_access_key=default_creds.secret_key,
            config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1}),
        )

        def to_loopback(request, **_):
            # Connect to 127.0.0.1 but keep the Host the request was signed for.
            request.headers["Host"] = f"vhost.s3.grist.test:{port}"
            request.url = request.url.replace(f"vhost.s3.grist.test:{port}", f"127.0.0.1:{port}")

        virtual.meta.events.register("before-send.s3.*", to_loopback)
        assert virtual.get_object(Bucket="vhost", Key="a/b")["Body"].read() == b"path-style"
        virtual.put_object(Bucket="vhost", Key="by-boto3", Body=b"vh")
        assert path.get_object(Bucket="vhost", Key="by-boto3")["Body"].read() == b"vh"
        empty_and_delete(path, "vhost")


def test_an_empty_body_with_a_wrong_checksum_is_refused(gristmill_s3):
    """A zero-length PutObject is checked against its declared checksum like any other: the
    HTTP client never reads an empty body, so the front drives it itself (ceph/s3-tests
    test_object_checksum_sha256 sent one and it was stored)."""
    s3 = gristmill_s3
    bkt = _bucket(s3)
    try:
        with pytest.raises(ClientError) as ei:
            s3.put_object(Bucket=bkt, Key="empty", Body=b"", ChecksumAlgorithm="SHA256", ChecksumSHA256="bad")
        assert err(ei) == ("BadDigest", 400)
        with pytest.raises(ClientError) as ei:
            s3.head_object(Bucket=bkt, Key="empty")
        assert err(ei)[1] == 404
        empty_sha256 = base64.b64encode(hashlib.sha256(b"").digest()).decode()
        r = s3.put_object(Bucket=bkt, Key="empty", Body=b"", ChecksumAlgorithm="SHA256",
                          ChecksumSHA256=empty_sha256)
        assert r["ChecksumSHA256"] == empty_sha256
    finally:
        empty_and_delete(s3, bkt)


def test_list_buckets_in_pages(gristmill_s3):
    """ListBuckets with MaxBuckets answers pages in name order with a ContinuationToken until
    the last one; Prefix narrows it."""
    s3 = gristmill_s3
    prefix = new_bucket_name("pages")
    names = [f"{prefix}-{i}" for i in range(3)]
    for n in names:
        s3.create_bucket(Bucket=n)
    try:
        seen, token = [], None
        while True:
            kw = {"ContinuationToken": token} if token else {}
            page = s3.list_buckets(MaxBuckets=2, Prefix=prefix, **kw)
            seen += [b["Name"] for b in page["Buckets"]]
            token = page.get("ContinuationToken")
            if not token:
                break
            assert len(page["Buckets"]) == 2
        assert seen == names
    finally:
        for n in names:
            s3.delete_bucket(Bucket=n)


def test_anonymous_requests_for_a_missing_bucket_get_no_such_bucket(auth_s3_endpoint):
    """With auth on, an unsigned request naming a bucket that does not exist is told so (404
    NoSuchBucket, as S3 answers anyone), not 403; an existing private bucket stays 403."""
    anonymous = make_s3(auth_s3_endpoint, None)
    for call in (lambda: anonymous.get_object(Bucket="no-such-bucket-here", Key="k"),
                 lambda: anonymous.delete_object(Bucket="no-such-bucket-here", Key="k")):
        with pytest.raises(ClientError) as ei:
            call()
        assert err(ei) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as ei:
        anonymous.create_bucket(Bucket="no-such-bucket-here")
    assert err(ei) == ("AccessDenied", 403)


def test_sigv2_clients(auth_s3_endpoint, admin_creds):
    """SigV2 (botocore's `s3` signer, older tools) header-signed and presigned requests are
    verified and served, bucket-level ones included (signed as `/bucket/`, sent as
    `/bucket`); a wrong secret is refused."""
    import boto3
    import requests
    from botocore.config import Config

    def v2(secret):
        return boto3.client(
            "s3", endpoint_url=auth_s3_endpoint, region_name="us-east-1",
            aws_access_key_id=admin_creds.access_key, aws_secret_access_key=secret,
            config=Config(signature_version="s3", s3={"addressing_style": "path"},
                          retries={"max_attempts": 1}),
        )

    s3 = v2(admin_creds.secret_key)
    name = new_bucket_name("sigv2")
    s3.create_bucket(Bucket=name)
    try:
        s3.put_object(Bucket=name, Key="d/k", Body=b"v2")
        assert s3.get_object(Bucket=name, Key="d/k")["Body"].read() == b"v2"
        assert [o["Key"] for o in s3.list_objects(Bucket=name, Prefix="d/")["Contents"]] == ["d/k"]
        url = s3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "d/k"}, ExpiresIn=300)
        assert "AWSAccessKeyId=" in url
        r = requests.get(url)
        assert r.status_code == 200 and r.content == b"v2", r.text
        with pytest.raises(ClientError) as ei:
            v2("not-the-secret").list_objects(Bucket=name)
        assert err(ei) == ("SignatureDoesNotMatch", 403)
        bad = url.replace("Signature=", "Signature=x")
        assert requests.get(bad).status_code == 403
    finally:
        empty_and_delete(s3, name)


def test_bucket_tagging(s3, bkt):
    """Put/Get/DeleteBucketTagging: NoSuchTagSet until tags are put, the tags as put, 204 on
    delete, InvalidTag for a reserved key."""
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_tagging(Bucket=bkt)
    assert err(ei) == ("NoSuchTagSet", 404)
    tags = [{"Key": "team", "Value": "vision"}, {"Key": "cost-center", "Value": ""}]
    s3.put_bucket_tagging(Bucket=bkt, Tagging={"TagSet": tags})
    got = s3.get_bucket_tagging(Bucket=bkt)["TagSet"]
    # An empty value may come back as no Value element (moto and Gristmill alike).
    assert sorted((t["Key"], t.get("Value", "")) for t in got) == [("cost-center", ""), ("team", "vision")]
    with pytest.raises(ClientError) as ei:
        s3.put_bucket_tagging(Bucket=bkt, Tagging={"TagSet": [{"Key": "aws:x", "Value": "v"}]})
    assert err(ei)[0] == "InvalidTag"
    assert s3.delete_bucket_tagging(Bucket=bkt)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as ei:
        s3.get_bucket_tagging(Bucket=bkt)
    assert err(ei) == ("NoSuchTagSet", 404)

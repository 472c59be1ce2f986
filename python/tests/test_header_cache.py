"""The answer headers of a warm GET are rendered once per cached object record
(`target/src/read/local.rs`, `store/hot.rs`): every change of the object must drop them.

After each change — an overwrite, a tag change (S3 PutObjectTagging / DeleteObjectTagging), a new
version in a versioned bucket, a PATCH of custom metadata — the headers of GETs that were
warm before it must equal a fresh HEAD's (which reads the index, never the cache), and name the
change itself.
"""

from __future__ import annotations

import json

import pytest
import urllib3

from s3util import empty_and_delete, make_s3, new_bucket_name

# Headers that may differ between two answers about the same record.
PER_REQUEST = {"date", "x-request-id", "content-length", "content-type", "ais-atime", "connection"}


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager()


@pytest.fixture(scope="module")
def s3(s3_endpoint):
    return make_s3(s3_endpoint, None)


@pytest.fixture
def bkt(s3):
    name = new_bucket_name("hdr")
    s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete(s3, name)


def object_headers(http, method: str, url: str) -> dict:
    r = http.request(method, url, redirect=True)
    assert r.status == 200, (method, url, r.status, r.data[:200])
    return {k.lower(): v for k, v in r.headers.items() if k.lower() not in PER_REQUEST}


def warm_get_matches_head(http, url: str) -> dict:
    """Three GETs (the first renders the cached headers, the others reuse them): each equal to
    a fresh HEAD's headers. Answers them."""
    head = object_headers(http, "HEAD", url)
    for _ in range(3):
        got = object_headers(http, "GET", url)
        assert got == head, {k: (got.get(k), head.get(k)) for k in set(got) | set(head) if got.get(k) != head.get(k)}
    return head


def patch(http, url: str, change: dict) -> None:
    """A native PATCH of custom metadata, to the owner the proxy redirects to."""
    body = json.dumps(change)
    r = http.request("PATCH", url, body=body, headers={"Content-Type": "application/json"}, redirect=False)
    if r.status == 307:
        r = http.request("PATCH", r.headers["Location"], body=body,
                         headers={"Content-Type": "application/json"}, redirect=False)
    assert r.status == 200, r.data


def test_warm_get_headers_follow_every_change_of_the_object(cluster, http, s3, bkt):
    url = f"{cluster}/v1/objects/{bkt}/obj?provider=ais"
    s3.put_object(Bucket=bkt, Key="obj", Body=b"one")
    first = warm_get_matches_head(http, url)

    # Overwrite: a new checksum, ETag, generation.
    s3.put_object(Bucket=bkt, Key="obj", Body=b"two!")
    after = warm_get_matches_head(http, url)
    assert after["etag"] != first["etag"] and after["ais-checksum-value"] != first["ais-checksum-value"]

    # Tags change the metadata in place (same ETag): the cached headers must still go.
    s3.put_object_tagging(Bucket=bkt, Key="obj", Tagging={"TagSet": [{"Key": "k", "Value": "v1"}]})
    tagged = warm_get_matches_head(http, url)
    assert tagged["etag"] == after["etag"]
    assert tagged.get("ais-custom-md") != after.get("ais-custom-md"), "the tag is not in the metadata"
    s3.put_object_tagging(Bucket=bkt, Key="obj", Tagging={"TagSet": [{"Key": "k", "Value": "v2"}]})
    retagged = warm_get_matches_head(http, url)
    assert retagged.get("ais-custom-md") != tagged.get("ais-custom-md")
    s3.delete_object_tagging(Bucket=bkt, Key="obj")
    warm_get_matches_head(http, url)

    # A native PATCH of custom metadata.
    patch(http, url, {"set": {"color": "blue"}})
    patched = warm_get_matches_head(http, url)
    assert "color=blue" in patched["ais-custom-md"]
    patch(http, url, {"delete": ["color"]})
    unpatched = warm_get_matches_head(http, url)
    assert "color=blue" not in unpatched.get("ais-custom-md", "")

    # Versions: each PUT a new version id; deleting the current one makes the previous current.
    s3.put_bucket_versioning(Bucket=bkt, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bkt, Key="obj", Body=b"version 1")["VersionId"]
    h1 = warm_get_matches_head(http, url)
    v2 = s3.put_object(Bucket=bkt, Key="obj", Body=b"version 2")["VersionId"]
    h2 = warm_get_matches_head(http, url)
    assert v1 != v2 and h1["etag"] != h2["etag"]
    s3.delete_object(Bucket=bkt, Key="obj", VersionId=v2)
    h3 = warm_get_matches_head(http, url)
    assert h3["etag"] == h1["etag"]
    # And the bytes follow too.
    assert http.request("GET", url).data == b"version 1"

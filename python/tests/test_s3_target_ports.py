"""S3 reads on the targets' own S3 ports (`gristd playground --target-s3-port`), with boto3:
every answer carries the same headers and bytes as the proxy's answer to the same request; the
targets serve plain reads themselves (counted by `grist_s3_target_requests_total{answer=
"served"}`) and relay everything else to a proxy."""

from __future__ import annotations

import requests
from conftest import target_s3_endpoints
from s3util import empty_and_delete, err, make_s3, new_bucket_name
from botocore.exceptions import ClientError
import pytest

# Per answer, not per object: when it was sent and which node's request id it carries.
VARYING = {"date", "x-amz-request-id", "x-request-id"}


def _headers(resp) -> dict:
    h = resp["ResponseMetadata"]["HTTPHeaders"]
    return {k: v for k, v in h.items() if k not in VARYING}


def _counted(endpoint: str, answer: str) -> float:
    smap = requests.get(f"{endpoint}/v1/cluster?what=smap", timeout=10).json()
    total = 0.0
    for t in smap["tmap"].values():
        text = requests.get(t["public_net"]["direct_url"] + "/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("grist_s3_target_requests_total{") and f'answer="{answer}"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
def objects(s3_endpoint, default_creds):
    s3 = make_s3(s3_endpoint, default_creds)
    name = new_bucket_name("tports")
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="plain.bin", Body=bytes(range(256)) * 64)
    s3.put_object(
        Bucket=name, Key="dir/with meta+plus.jpg", Body=b"j" * 3000, ContentType="image/jpeg",
        Metadata={"label": "cat", "split": "train"}, CacheControl="max-age=60",
        ContentDisposition='attachment; filename="a.jpg"', ContentLanguage="en", Tagging="k=v&x=y",
        ChecksumAlgorithm="SHA256",
    )
    yield s3, name, ["plain.bin", "dir/with meta+plus.jpg"]
    empty_and_delete(s3, name)


def test_targets_answer_reads_with_the_proxys_headers(s3_endpoint, default_creds, objects):
    proxy, name, keys = objects
    served = _counted(s3_endpoint, "served")
    asked = 0
    for endpoint in target_s3_endpoints(s3_endpoint):
        s3 = make_s3(endpoint, default_creds)
        for key in keys:
            for kw in ({}, {"Range": "bytes=10-2009"}, {"ChecksumMode": "ENABLED"}):
                want = proxy.get_object(Bucket=name, Key=key, **kw)
                got = s3.get_object(Bucket=name, Key=key, **kw)
                assert _headers(got) == _headers(want), (endpoint, key, kw)
                assert got["Body"].read() == want["Body"].read()
                asked += 1
            assert _headers(s3.head_object(Bucket=name, Key=key)) == _headers(
                proxy.head_object(Bucket=name, Key=key))
            asked += 1
        # Unsigned reads: allowed with auth off, as on the proxy.
        anonymous = make_s3(endpoint)
        assert anonymous.get_object(Bucket=name, Key="plain.bin")["Body"].read() == bytes(range(256)) * 64
        asked += 1
    assert _counted(s3_endpoint, "served") - served == asked


def test_the_rest_is_relayed_to_the_proxy(s3_endpoint, default_creds, objects):
    proxy, name, _ = objects
    endpoint = target_s3_endpoints(s3_endpoint)[1]
    s3 = make_s3(endpoint, default_creds)
    relayed = _counted(s3_endpoint, "relayed")
    s3.put_object(Bucket=name, Key="via/target", Body=b"written through a target")
    assert proxy.get_object(Bucket=name, Key="via/target")["Body"].read() == b"written through a target"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=name, Prefix="via/")["Contents"]]
    assert keys == ["via/target"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=name, Key="missing")
    assert err(e) == ("NoSuchKey", 404)
    etag = proxy.head_object(Bucket=name, Key="plain.bin")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=name, Key="plain.bin", IfNoneMatch=etag)
    assert err(e)[1] == 304
    forged = make_s3(endpoint, type("C", (), {"access_key": default_creds.access_key, "secret_key": "wrong"}))
    with pytest.raises(ClientError) as e:
        forged.get_object(Bucket=name, Key="plain.bin")
    assert err(e) == ("SignatureDoesNotMatch", 403)
    assert _counted(s3_endpoint, "relayed") - relayed >= 5
    # `/v1/...` is not the native API on an S3 port: bucket `v1`, a name S3 refuses (it was
    # a 503 with Retry-After, which clients retry for ever).
    bad = requests.get(f"{endpoint}/v1/objects/{name}/plain.bin", timeout=10)
    assert (bad.status_code, "<Code>InvalidBucketName</Code>" in bad.text) == (400, True), bad.text


def _with_headers(s3, headers: dict):
    """`s3` sending `headers` (set before signing, so they are signed) on every request."""
    def add(request, **_):
        for k, v in headers.items():
            request.headers[k] = v
    s3.meta.events.register("before-sign.s3", add)
    return s3


def test_what_the_s3_front_refuses_targets_refuse_too(s3_endpoint, default_creds, objects):
    """Signed reads the proxies' S3 front refuses (400: S3's bucket naming rules, several
    ranges, other range units, dates not in RFC 1123; 412: a list of ETags none of which
    matches) get the same answer on a target's port, never the object; none is served there."""
    proxy, name, _ = objects
    endpoint = target_s3_endpoints(s3_endpoint)[0]
    # A native bucket S3's rules refuse (uppercase, `_`), with an object in it.
    native = "Native_" + new_bucket_name("x")[-8:]
    requests.post(f"{s3_endpoint}/v1/buckets/{native}", json={"action": "create-bck"}, timeout=10).raise_for_status()
    requests.put(f"{s3_endpoint}/v1/objects/{native}/k", data=b"native", timeout=10).raise_for_status()
    served = _counted(s3_endpoint, "served")
    cases = [
        (native, "k", {}, 400),
        (name, "plain.bin", {"Range": "bytes=0-1,5-6"}, 400),
        (name, "plain.bin", {"Range": "items=0-5"}, 400),
        (name, "plain.bin", {"If-Match": '"a", "b"'}, 412),
        (name, "plain.bin", {"If-Modified-Since": "Sunday, 06-Nov-94 08:49:37 GMT"}, 400),
        (name, "plain.bin", {"If-Unmodified-Since": "not a date"}, 400),
    ]
    for bucket, key, headers, refused in cases:
        answers = []
        for ep in (s3_endpoint, endpoint):
            s3 = _with_headers(make_s3(ep, default_creds), headers)
            for call in (s3.get_object, s3.head_object):
                try:
                    resp = call(Bucket=bucket, Key=key)
                    answers.append((call.__name__, resp["ResponseMetadata"]["HTTPStatusCode"]))
                except ClientError as e:
                    answers.append((call.__name__, e.response["ResponseMetadata"]["HTTPStatusCode"]))
        proxy_answers, target_answers = answers[:2], answers[2:]
        assert target_answers == proxy_answers, (bucket, headers)
        assert all(status == refused for _, status in proxy_answers), (bucket, headers, proxy_answers)
    assert _counted(s3_endpoint, "served") == served
    requests.delete(f"{s3_endpoint}/v1/buckets/{native}", json={"action": "destroy-bck"}, timeout=10)


def test_static_users_are_judged_on_the_targets(auth_s3_endpoint, admin_creds, reader_creds):
    admin = make_s3(auth_s3_endpoint, admin_creds)
    name = new_bucket_name("tportsauth")
    admin.create_bucket(Bucket=name)
    try:
        admin.put_object(Bucket=name, Key="k", Body=b"for readers")
        served = _counted(auth_s3_endpoint, "served")
        for endpoint in target_s3_endpoints(auth_s3_endpoint):
            reader = make_s3(endpoint, reader_creds)
            assert reader.get_object(Bucket=name, Key="k")["Body"].read() == b"for readers"
            with pytest.raises(ClientError) as e:
                reader.put_object(Bucket=name, Key="k", Body=b"no")
            assert err(e) == ("AccessDenied", 403)
            with pytest.raises(ClientError) as e:
                make_s3(endpoint).get_object(Bucket=name, Key="k")
            assert err(e) == ("AccessDenied", 403)
        assert _counted(auth_s3_endpoint, "served") - served == 3
        assert admin.get_object(Bucket=name, Key="k")["Body"].read() == b"for readers"
    finally:
        empty_and_delete(admin, name)

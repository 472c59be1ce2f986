"""Bucket create / list / head / delete against a real cluster."""

import uuid

import pytest

from gristmill import BadRequest, BucketExists, BucketNotFound, Conflict, Forbidden, GristError, NotFound


def _name():
    return f"tb-{uuid.uuid4().hex[:10]}"


def test_create_list_head_delete(client):
    b = client.bucket(_name())
    assert not b.exists()
    b.create()
    try:
        assert b.exists()
        props = b.head()
        assert props["provider"] == "ais"
        assert props.get("checksum", {}).get("type") == "xxhash"
        assert b in client.list_buckets()
        assert b in client.list_buckets(provider="ais")
        assert b not in client.list_buckets(provider="aws")
        listed = [x for x in client.list_buckets() if x.name == b.name][0]
        assert (listed.provider, listed.namespace) == ("ais", "")
    finally:
        b.delete()
    assert not b.exists()
    assert b not in client.list_buckets()


def test_create_existing_is_409(client):
    b = client.bucket(_name())
    b.create()
    try:
        with pytest.raises(BucketExists) as ei:
            b.create()
        assert ei.value.status == 409
        assert isinstance(ei.value, Conflict) and isinstance(ei.value, GristError)
        assert f"ais://{b.name}" in ei.value.message
        b.create(exist_ok=True)
    finally:
        b.delete()


def test_missing_bucket_is_404(client):
    b = client.bucket(_name())
    with pytest.raises(BucketNotFound) as ei:
        b.delete()
    assert ei.value.status == 404 and isinstance(ei.value, NotFound)
    assert ei.value.message == f'bucket "ais://{b.name}" does not exist'
    b.delete(missing_ok=True)
    with pytest.raises(BucketNotFound):
        b.head()
    with pytest.raises(BucketNotFound):
        b.list_objects()
    with pytest.raises(BucketNotFound):
        b.object("x").get()
    with pytest.raises(BucketNotFound):
        b.object("x").put(b"data")


@pytest.mark.parametrize("name", ["bad name", "a" * 65, "no/slash!", "caf\u00e9"])
def test_bad_bucket_name(client, name):
    with pytest.raises(BadRequest) as ei:
        client.bucket(name).create()
    assert ei.value.status == 400


def test_remote_bucket_create_checks_the_backend(client):
    # Creating a remote bucket adds it only after its backend confirms it; this playground has
    # no S3 credentials, so the backend check is refused with the reason.
    with pytest.raises(Forbidden, match="credentials"):
        client.bucket(_name(), provider="aws").create()
    with pytest.raises(BadRequest):
        client.bucket("bad name!", provider="ais").create()


def test_cluster_map(client):
    smap = client.cluster_map()
    assert len(smap["tmap"]) == 3 and len(smap["pmap"]) >= 1
    assert smap["proxy_si"]["daemon_type"] == "proxy"
    for tid, node in smap["tmap"].items():
        assert node["daemon_id"] == tid and node["daemon_type"] == "target"
        assert node["public_net"]["direct_url"].startswith("http://")
    assert client.health()


def test_changing_copies_returns_a_make_n_copies_job(bucket):
    for i in range(20):
        bucket.object(f"o{i}").put(b"x" * (100 + i))
    job = bucket.set_props(mirror={"copies": 2})
    assert job is not None
    status = job.wait(timeout=60)
    assert status["kind"] == "make-n-copies"
    assert status["state"] == "finished"
    # Every object got its second copy (20 copies sent in all, one per object).
    assert status["objects"] - status["skipped"] == 20
    assert bucket.set_props(mirror={"copies": 2}) is None  # no change, no job
    assert bucket.set_props(lru={"enabled": False}) is None
    for i in range(20):
        assert bucket.object(f"o{i}").get() == b"x" * (100 + i)

"""The unmodified `aistore` 2.0.0 SDK as an external client of a Gristmill cluster."""

import os

import pytest

import aistore  # noqa: E402  (installed by the test command)
from aistore.sdk import Client as AisClient  # noqa: E402
from aistore.sdk.errors import AISError, ErrBckAlreadyExists, ErrBckNotFound, ErrObjNotFound  # noqa: E402
import xxhash  # noqa: E402

from gristmill import hrw  # noqa: E402


@pytest.fixture
def ais(cluster):
    return AisClient(cluster)


@pytest.fixture
def ais_bucket(ais):
    import uuid

    b = ais.bucket(f"sdk-{uuid.uuid4().hex[:10]}")
    b.create()
    yield b
    b.delete(missing_ok=True)


def test_bucket_lifecycle(ais):
    b = ais.bucket("sdk-lifecycle")
    b.delete(missing_ok=True)
    b.create()
    with pytest.raises(ErrBckAlreadyExists):
        b.create()
    b.create(exist_ok=True)
    assert "sdk-lifecycle" in [m.name for m in ais.cluster().list_buckets()]
    headers = b.head()
    assert "ais-bucket-props" in {k.lower() for k in headers}
    b.delete()
    with pytest.raises(ErrBckNotFound):
        b.delete()
    b.delete(missing_ok=True)
    assert "sdk-lifecycle" not in [m.name for m in ais.cluster().list_buckets()]


def test_put_get_head(ais_bucket, tmp_path):
    data = os.urandom(1_000_003)
    obj = ais_bucket.object("dir/a b.bin")
    obj.get_writer().put_content(data)
    assert obj.get_reader().read_all() == data
    assert b"".join(obj.get_reader(chunk_size=65536)) == data
    assert obj.get_reader(byte_range="bytes=10-19").read_all() == data[10:20]
    attrs = obj.head()
    assert attrs.size == len(data)
    assert attrs.checksum_type == "xxhash"
    assert attrs.checksum_value == xxhash.xxh64(data).hexdigest()
    assert attrs.present
    assert attrs.obj_version
    assert int(attrs.access_time) > 0
    props = obj.props
    assert props.size == len(data) and props.location.startswith("t[")
    assert props.present and props.checksum_value == attrs.checksum_value
    f = tmp_path / "up.bin"
    f.write_bytes(data[:12345])
    ais_bucket.object("file").get_writer().put_file(str(f))
    assert ais_bucket.object("file").get_reader().read_all() == data[:12345]


def test_direct_read(ais, ais_bucket):
    obj = ais_bucket.object("direct/obj")
    obj.get_writer().put_content(b"read me directly")
    assert obj.get_reader(direct=True).read_all() == b"read me directly"
    smap = ais.cluster().get_info()
    assert len(smap.tmap) == 3
    assert smap.get_target_for_object(obj.uname).daemon_id == obj.props.location[2:obj.props.location.index("]")]


def test_listing(ais_bucket):
    names = sorted(f"l/{i:02d}" for i in range(23)) + ["other"]
    for n in names:
        ais_bucket.object(n).get_writer().put_content(n.encode())
    names.sort()
    page = ais_bucket.list_objects(page_size=5)
    assert len(page.entries) == 5 and page.continuation_token and page.uuid
    assert [e.name for e in ais_bucket.list_all_objects(page_size=5)] == names
    assert [e.name for e in ais_bucket.list_objects_iter(page_size=4)] == names
    assert [e.name for e in ais_bucket.list_all_objects(prefix="l/")] == names[:-1]
    entries = ais_bucket.list_all_objects(props="name,size,checksum")
    assert all(e.size == len(e.name) and e.is_ok() and e.is_cached() for e in entries)
    assert [o.name for o in ais_bucket.list_all_objects_iter()] == names
    assert [o.name for o in ais_bucket.list_all_objects_iter(start_after="l/20")] == ["l/21", "l/22", "other"]


def test_errors(ais_bucket):
    obj = ais_bucket.object("nope")
    with pytest.raises(ErrObjNotFound):
        obj.get_reader().read_all()
    with pytest.raises(AISError) as ei:
        obj.head()
    assert ei.value.status_code == 404
    obj.get_writer().put_content(b"x")
    obj.delete()
    with pytest.raises(ErrObjNotFound):
        obj.delete()

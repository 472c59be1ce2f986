"""Object put / get / range / head / delete against a real cluster."""

import io
import os
import time

import pytest
import xxhash

from gristmill import BadRequest, GristError, NotFound, ObjectNotFound, RangeNotSatisfiable

MIB = 1 << 20


def _xxh(data: bytes) -> str:
    return xxhash.xxh64(data, seed=0).hexdigest()


@pytest.mark.parametrize("size", [0, 1, MIB + 3])
def test_put_get_bytes(bucket, size):
    data = os.urandom(size)
    obj = bucket.object(f"bytes/{size}")
    props = obj.put(data)
    assert props.size == size
    assert (props.checksum_type, props.checksum_value) == ("xxhash", _xxh(data))
    assert obj.get() == data


@pytest.mark.parametrize("size", [1, 70000])
def test_get_validate_checksum(bucket, size):
    data = os.urandom(size)
    obj = bucket.object("validated")
    obj.put(data)
    assert obj.get(validate_checksum=True) == data


def test_put_overwrites(bucket):
    obj = bucket.object("over")
    obj.put(b"first version")
    obj.put(b"second")
    assert obj.get() == b"second"
    assert obj.head().size == 6


@pytest.mark.parametrize("name", ["dir/a b.txt", "q?x#y%z&w=1", "\u65e5\u672c\u8a9e/\u00fcn\u00efc\u00f8de", "a//b", "trail/", ".hidden", "a..b", "x" * 1024])
def test_awkward_names(bucket, name):
    obj = bucket.object(name)
    obj.put(name.encode())
    assert obj.get() == name.encode()
    assert [e.name for e in bucket.list_all_objects()] == [name]
    obj.delete()


def test_file_put_get(bucket, tmp_path):
    data = os.urandom(3 * MIB + 17)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    obj = bucket.object("files/src.bin")
    assert obj.put(src).size == len(data)  # path
    dst = tmp_path / "dst.bin"
    assert obj.get_to_file(dst) == len(data)
    assert dst.read_bytes() == data
    # an open file, from its current position
    with open(src, "rb") as f:
        f.seek(100)
        assert obj.put(f).size == len(data) - 100
    assert obj.get() == data[100:]
    # a file-like object without a fileno
    obj.put(io.BytesIO(data))
    assert obj.head().checksum_value == _xxh(data)


def test_put_unsized_stream(bucket):
    class Pipe(io.RawIOBase):  # not seekable, no fileno: the client buffers it
        def __init__(self, data):
            self._b = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            return self._b.readinto(b)

    obj = bucket.object("pipe")
    obj.put(Pipe(b"streamed-content"))
    assert obj.get() == b"streamed-content"


def test_get_stream(bucket):
    data = os.urandom(2 * MIB + 5)
    obj = bucket.object("stream")
    obj.put(data)
    with obj.get_stream(chunk_size=64 * 1024) as r:
        assert r.status == 200 and r.size == len(data)
        assert r.props.checksum_value == _xxh(data)
        chunks = list(r)
    assert max(len(c) for c in chunks) <= 64 * 1024 and len(chunks) > 1
    assert b"".join(chunks) == data
    with obj.get_stream() as r:  # file-like use
        assert r.read(10) == data[:10]
        assert r.read(5) == data[10:15]
        buf = bytearray(100)
        assert r.readinto(buf) == 100 and bytes(buf) == data[15:115]
    # iterating a reader nobody else holds a reference to
    assert b"".join(obj.get_stream(chunk_size=1 << 16)) == data
    assert sum(len(c) for c in obj.get_stream()) == len(data)
    # abandoning a half-read stream must not poison the pool
    r = obj.get_stream()
    r.read(1)
    r.close()
    assert obj.get(byte_range=(0, 3)) == data[:4]


def test_range_gets(bucket):
    data = bytes(range(256)) * 40  # 10240 bytes
    obj = bucket.object("ranged")
    obj.put(data)
    assert obj.get(byte_range=(0, 0)) == data[:1]
    assert obj.get(byte_range=(10, 19)) == data[10:20]
    assert obj.get(byte_range=(10000, None)) == data[10000:]
    assert obj.get(byte_range=(None, 7)) == data[-7:]  # suffix: the last 7 bytes
    assert obj.get(byte_range="bytes=-7") == data[-7:]
    assert obj.get(byte_range=(10200, 99999)) == data[10200:]  # end clamped to the size
    assert obj.get(byte_range=(None, 99999)) == data  # suffix longer than the object
    with obj.get_stream(byte_range=(5, 9)) as r:
        assert r.status == 206 and r.read() == data[5:10]
    with pytest.raises(RangeNotSatisfiable) as ei:
        obj.get(byte_range=(len(data), len(data) + 5))
    assert ei.value.status == 416
    with pytest.raises(RangeNotSatisfiable):
        obj.get(byte_range=(None, 0))
    with pytest.raises(BadRequest):
        obj.get(byte_range="bytes=x-y")


def test_range_on_empty_object(bucket):
    obj = bucket.object("empty")
    obj.put(b"")
    assert obj.get() == b""
    with pytest.raises(RangeNotSatisfiable):
        obj.get(byte_range=(0, 0))


def test_head_fields(bucket):
    data = b"hello gristmill"
    obj = bucket.object("dir/head me")
    t0 = time.time_ns()
    put = obj.put(data)
    p = obj.head()
    assert p.size == len(data)
    assert p.checksum_type == "xxhash"
    assert p.checksum_value == _xxh(data) == put.checksum_value
    assert len(p.checksum_value) == 16
    assert p.version and p.version == put.version
    assert p.present is True
    assert abs(p.atime_ns - t0) < 120 * 10**9
    smap = bucket.client.cluster_map()
    assert p.target_id in smap["tmap"]
    assert p.location.startswith(f"t[{p.target_id}]")
    assert p.custom == {}


def test_version_increments(bucket):
    obj = bucket.object("versioned")
    v1 = obj.put(b"1").version
    v2 = obj.put(b"2").version
    assert v1 != v2


def test_delete_then_404(bucket):
    obj = bucket.object("doomed")
    obj.put(b"x")
    assert obj.exists()
    obj.delete()
    assert not obj.exists()
    with pytest.raises(ObjectNotFound) as ei:
        obj.get()
    assert ei.value.status == 404 and isinstance(ei.value, NotFound)
    assert f"ais://{bucket.name}/doomed" in ei.value.message
    with pytest.raises(ObjectNotFound):
        obj.head()
    with pytest.raises(ObjectNotFound):
        obj.delete()
    with pytest.raises(ObjectNotFound):
        obj.get_stream()


@pytest.mark.parametrize("name", ["a/../b", "..", "./a", "a/.", "nul\x00byte", "tab\tname", "x" * 1025])
def test_bad_object_names(bucket, name):
    with pytest.raises(BadRequest) as ei:
        bucket.object(name).put(b"data")
    assert ei.value.status == 400
    with pytest.raises(BadRequest):
        bucket.object(name).get()


def test_errors_are_grist_errors(bucket):
    with pytest.raises(GristError):
        bucket.object("missing").get()


def test_empty_object_name_rejected_client_side(bucket):
    with pytest.raises(BadRequest):
        bucket.object("").put(b"x")


def test_empty_object_name_is_400_on_the_wire(cluster, bucket):
    import urllib3

    r = urllib3.request("PUT", f"{cluster}/v1/objects/{bucket.name}/?provider=ais", body=b"x", redirect=False)
    assert r.status == 400


def test_put_chunks_and_writer_stream_without_a_length(bucket):
    """Chunked uploads of unknown length: the object appears whole once the last chunk is in;
    a writer given up (an exception in its ``with``) or a chunk source that fails leaves the
    previous content."""
    data = os.urandom(3 * MIB + 5)
    obj = bucket.object("chunked")
    obj.put_chunks(data[i:i + 100_000] for i in range(0, len(data), 100_000))
    assert obj.get() == data and obj.head().size == len(data)
    with obj.open_writer(chunk_size=64 * 1024, queue_depth=2) as w:
        for size in (1, 70_000, 3 * MIB, 0, 12_345):
            w.write(b"\x07" * size)
    assert obj.get() == b"\x07" * (1 + 70_000 + 3 * MIB + 12_345)
    before = obj.get()
    with pytest.raises(ZeroDivisionError):
        with obj.open_writer() as w:
            w.write(b"partial " * 100_000)
            1 / 0
    assert obj.get() == before

    def failing():
        yield b"x" * MIB
        raise RuntimeError("source broke")

    with pytest.raises(Exception):
        obj.put_chunks(failing())
    assert obj.get() == before
    with pytest.raises(Exception):
        bucket.object("never").put_chunks(failing())
    with pytest.raises(ObjectNotFound):
        bucket.object("never").get()


def test_range_reader_seeks_like_a_file(bucket):
    import random
    import zipfile

    data = os.urandom(5 * MIB + 17)
    obj = bucket.object("seekable")
    obj.put(data)
    rng = random.Random(7)
    with obj.open_reader(buffer_size=256 * 1024) as r:
        assert r.seekable() and r.size == len(data)
        for _ in range(50):
            at = rng.randrange(len(data))
            n = rng.choice([1, 100, 4096, 300_000, 2 * MIB])
            r.seek(at)
            assert r.read(n) == data[at:at + n]
        r.seek(-10, io.SEEK_END)
        assert r.read() == data[-10:]
        assert r.read(5) == b""
    # A zip read through it: the central directory at the end, members by offset.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(20):
            z.writestr(f"m{i}", data[i * 1000:(i + 1) * 1000 + i])
    obj.put(buf.getvalue())
    with zipfile.ZipFile(obj.open_reader()) as z:
        assert [z.read(f"m{i}") for i in range(20)] == [data[i * 1000:(i + 1) * 1000 + i] for i in range(20)]
    # A rewrite while a reader is open makes its next fetch fail, not mix versions.
    obj.put(data)
    r = obj.open_reader(buffer_size=1024)
    r.read(10)
    obj.put(data[::-1])
    with pytest.raises(OSError):
        r.seek(4 * MIB)
        r.read(10)


def test_range_reader_reads_large_parts_straight_into_the_callers_buffer(bucket, monkeypatch):
    """A large read goes from the socket into the caller's buffer (urllib3's own read makes a
    new bytes and copies it: checkpoint loads were bound by that), and the connection goes
    back to the pool after each range."""
    import urllib3

    data = os.urandom(8 * MIB + 5)
    obj = bucket.object("big-reads")
    obj.put(data)
    pools = bucket.client._http.pools

    def connections_made():
        return sum(pools[k].num_connections for k in pools.keys())

    copied = []
    plain_read = urllib3.HTTPResponse.read
    monkeypatch.setattr(urllib3.HTTPResponse, "read",
                        lambda self, amt=None, *a, **kw: copied.append(amt) or plain_read(self, amt, *a, **kw))
    buf = bytearray(len(data))
    view = memoryview(buf)
    with obj.open_reader(buffer_size=64 * 1024) as r:
        r.readinto(view[:10])  # opens the pooled connection
        before = connections_made()
        for at in range(10, len(data), MIB):
            r.readinto(view[at:at + MIB])
    assert buf == data
    assert not [amt for amt in copied if amt and amt >= MIB], copied
    assert connections_made() - before <= 1


def test_delete_objects_by_names_template_and_prefix(bucket):
    for i in range(40):
        bucket.object(f"del/{i:02d}").put(b"x")
    bucket.object("keep/0").put(b"y")
    assert bucket.delete_objects(names=["del/00", "del/01", "missing"]) == ["del/00", "del/01"]
    assert sorted(bucket.delete_objects(template="del/{10..19}")) == [f"del/{i}" for i in range(10, 20)]
    left = sorted(bucket.delete_objects(prefix="del/", workers=4))
    assert left == [f"del/{i:02d}" for i in list(range(2, 10)) + list(range(20, 40))]
    assert [e.name for e in bucket.list_all_objects()] == ["keep/0"]
    with pytest.raises(ValueError):
        bucket.delete_objects()
    with pytest.raises(ValueError):
        bucket.delete_objects(names=["a"], prefix="b")


def test_conditional_puts(bucket):
    from gristmill import PreconditionFailed

    obj = bucket.object("cond")
    obj.put(b"one", if_none_match="*")
    with pytest.raises(PreconditionFailed):
        obj.put(b"two", if_none_match="*")
    with pytest.raises(PreconditionFailed):
        obj.put(b"two", if_match='"not-the-etag"')
    assert obj.get() == b"one"
    etag = obj.head().checksum_value  # a native object's ETag
    obj.put(b"three", if_match=f'"{etag}"')
    assert obj.get() == b"three"
    with pytest.raises(PreconditionFailed):
        obj.put(b"x", if_match=f'"{etag}"')  # the ETag moved on
    with pytest.raises(ObjectNotFound):  # S3's answer to If-Match on a missing object
        bucket.object("cond-absent").put(b"x", if_match="*")
    obj.put(b"four", if_match="*")
    assert obj.get() == b"four"

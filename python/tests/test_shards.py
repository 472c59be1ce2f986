"""Shards across languages: shards built by Python (tarfile, zipfile, the lz4 tool) read back
through `archpath`/`archregx`/listing; shards built by `grist archive` read by Python's
tarfile/zipfile and by `webdataset`; get-batch from plain HTTP and from the `aistore` SDK;
the archive job through the SDK."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid
import zipfile
from pathlib import Path
from urllib.parse import urlencode

import pytest
import urllib3

from gristmill import Client

GRIST = Path(os.environ.get("GRISTD_BIN", Path(__file__).resolve().parents[2] / "build/debug/gristd")).with_name(
    "grist"
)
LZ4 = shutil.which("lz4")
LS_ARCH_DIR = 1 << 3
ENTRY_IN_ARCH = 1 << 7

HTTP = urllib3.PoolManager(retries=urllib3.Retry(total=3, redirect=5))

MEMBERS = {
    "a/0001.jpg": os.urandom(3000),
    "a/0001.cls": b"3\n",
    "a/0002.jpg": os.urandom(200_000),
    "a/0002.cls": b"4\n",
    "empty.txt": b"",
    "d" * 120 + "/long.bin": os.urandom(777),
    "ünïcode/ß.txt": "grüße".encode(),
}


@pytest.fixture
def bucket(cluster):
    c = Client(cluster)
    b = c.bucket(f"sh-{uuid.uuid4().hex[:10]}")
    b.create()
    yield b
    b.delete(missing_ok=True)
    c.close()


def _tar(fmt: int, mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as t:
        d = tarfile.TarInfo("a")
        d.type = tarfile.DIRTYPE
        t.addfile(d)
        for name, data in MEMBERS.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1_700_000_000
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _zip(method: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        z.writestr("a/", b"")
        for name, data in MEMBERS.items():
            z.writestr(name, data)
    return buf.getvalue()


def _lz4(data: bytes) -> bytes:
    return subprocess.run([LZ4, "-c", "-q"], input=data, stdout=subprocess.PIPE, check=True).stdout


def python_shards():
    yield "pax.tar", _tar(tarfile.PAX_FORMAT)
    yield "gnu.tar", _tar(tarfile.GNU_FORMAT)
    yield "x.tgz", _tar(tarfile.PAX_FORMAT, "w:gz")
    yield "x.tar.gz", _tar(tarfile.GNU_FORMAT, "w:gz")
    yield "deflated.zip", _zip(zipfile.ZIP_DEFLATED)
    yield "stored.zip", _zip(zipfile.ZIP_STORED)
    # scripts/test.sh installs the lz4 tool.
    assert LZ4, "the lz4 tool is missing"
    yield "x.tar.lz4", _lz4(_tar(tarfile.PAX_FORMAT))


def _url(bucket, name: str, **query) -> str:
    """The object's URL (at the proxy, with ``?provider=``) plus extra query parameters."""
    url = bucket.object(name).get_url()
    return url + ("&" + urlencode(query) if query else "")


def _get(bucket, name: str, **query) -> urllib3.BaseHTTPResponse:
    return HTTP.request("GET", _url(bucket, name, **query))


def _list(bucket, prefix: str = "", page: int = 0) -> list:
    out, token = [], ""
    while True:
        body = {"action": "list", "value": {"prefix": prefix, "pagesize": page, "flags": str(LS_ARCH_DIR),
                                            "continuation_token": token}}
        r = HTTP.request("GET", f"{bucket.client.endpoint}/v1/buckets/{bucket.name}", body=json.dumps(body),
                         headers={"content-type": "application/json"})
        assert r.status == 200, r.data
        page_ = json.loads(r.data)
        out += page_["entries"]
        token = page_["continuation_token"]
        if not token:
            return out


def test_python_built_shards_read_back(bucket):
    for name, data in python_shards():
        bucket.object(name).put(data)
        for member, want in MEMBERS.items():
            r = _get(bucket, name, archpath=member)
            assert r.status == 200, (name, member, r.data)
            assert r.data == want, (name, member)
            assert int(r.headers["content-length"]) == len(want)
        assert _get(bucket, name, archpath="a/0003.jpg").status == 404
        r = _get(bucket, name, archregx="a/0002", archmode="wdskey")
        assert r.status == 200, r.data
        with tarfile.open(fileobj=io.BytesIO(r.data)) as t:
            assert sorted(t.getnames()) == ["a/0002.cls", "a/0002.jpg"]
            assert t.extractfile("a/0002.jpg").read() == MEMBERS["a/0002.jpg"]
        # Listing expands the shard into exactly its files.
        listed = [e for e in _list(bucket, prefix=f"{name}/") if e["flags"] & ENTRY_IN_ARCH]
        assert sorted(e["name"][len(name) + 1:] for e in listed) == sorted(MEMBERS)
        assert {e["name"][len(name) + 1:]: e["size"] for e in listed} == {k: len(v) for k, v in MEMBERS.items()}


def test_sdk_reads_and_lists_inside_shards(bucket):
    """The SDK's shard surface: ``get``/``get_stream`` with ``archpath`` and ``archregx``, and
    ``archive=True`` listings, over every shard format Python builds."""
    from gristmill import ObjectNotFound

    for name, data in python_shards():
        obj = bucket.object(name)
        obj.put(data)
        for member, want in MEMBERS.items():
            assert obj.get(archpath=member) == want, (name, member)
        with obj.get_stream(archpath="a/0002.jpg", chunk_size=4096) as r:
            assert b"".join(r) == MEMBERS["a/0002.jpg"]
        with pytest.raises(ObjectNotFound):
            obj.get(archpath="a/0003.jpg")
        sample = obj.get(archregx="a/0002", archmode="wdskey")
        with tarfile.open(fileobj=io.BytesIO(sample)) as t:
            assert sorted(t.getnames()) == ["a/0002.cls", "a/0002.jpg"]
        jpgs = obj.get(archregx=r"\.jpg$")
        with tarfile.open(fileobj=io.BytesIO(jpgs)) as t:
            assert sorted(t.getnames()) == ["a/0001.jpg", "a/0002.jpg"]
            assert t.extractfile("a/0001.jpg").read() == MEMBERS["a/0001.jpg"]
        listed = bucket.list_all_objects(prefix=f"{name}/", archive=True)
        members = {e.name[len(name) + 1:]: e.size for e in listed if e.in_archive}
        assert members == {k: len(v) for k, v in MEMBERS.items()}, name
    # A whole listing: each shard flagged, its members right after it; without `archive` none.
    entries = bucket.list_all_objects(archive=True, page_size=5)
    shards = [e.name for e in entries if e.is_archive]
    assert sorted(shards) == sorted(n for n, _ in python_shards())
    for i, e in enumerate(entries):
        if e.in_archive:
            shard = next(s for s in shards if e.name.startswith(s + "/"))
            assert entries[i - 1].name == shard or entries[i - 1].name.startswith(shard + "/")
    assert all(not e.in_archive for e in bucket.list_all_objects())
    with pytest.raises(ValueError):
        bucket.object("pax.tar").get(archpath="x", archregx="y")
    with pytest.raises(ValueError):
        bucket.object("pax.tar").get(archregx="y", archmode="glob")


def _grist(cluster: str, *args: str) -> str:
    out = subprocess.run([str(GRIST), *args], env={**os.environ, "GRIST_ENDPOINT": cluster},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_grist_archive_put_read_by_python(cluster, bucket, tmp_path):
    src = tmp_path / "src"
    for name, data in MEMBERS.items():
        p = src / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    exts = [".tar", ".tgz", ".zip"] + ([".tar.lz4"] if LZ4 else [])
    for ext in exts:
        name = f"packed{ext}"
        _grist(cluster, "archive", "put", str(src), f"ais://{bucket.name}/{name}")
        data = bucket.object(name).get()
        if ext == ".zip":
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                got = {n: z.read(n) for n in z.namelist()}
        else:
            if ext == ".tar.lz4":
                data = subprocess.run([LZ4, "-d", "-c", "-q"], input=data, stdout=subprocess.PIPE,
                                      check=True).stdout
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                got = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
        assert got == MEMBERS, ext
        out = _grist(cluster, "archive", "ls", f"ais://{bucket.name}/{name}", "--json")
        assert sorted(e["name"] for e in json.loads(out)) == sorted(MEMBERS)
        dest = tmp_path / f"out{ext}.bin"
        _grist(cluster, "archive", "get", f"ais://{bucket.name}/{name}", "a/0002.jpg", str(dest))
        assert dest.read_bytes() == MEMBERS["a/0002.jpg"]


def test_gen_shards_read_by_tarfile_and_webdataset(cluster, bucket, tmp_path):
    _grist(cluster, "archive", "gen-shards", f"ais://{bucket.name}/wds-{{000..}}.tar", "--count", "3",
           "--samples", "20", "--sample-size", "1KiB", "--exts", "jpg,cls,json")
    names = sorted(o.name for o in bucket.list_all_objects())
    assert names == ["wds-000.tar", "wds-001.tar", "wds-002.tar"]
    paths = []
    for n in names:
        p = tmp_path / n
        p.write_bytes(bucket.object(n).get())
        paths.append(p)
        with tarfile.open(p) as t:
            files = t.getnames()
        assert len(files) == 60
        assert files[:3] == [f"sample-{int(n[4:7]):06d}-000000.{e}" for e in ("jpg", "cls", "json")]
    import webdataset as wds  # installed by the test command (python[torch])
    # From local copies, and straight from the cluster over HTTP (webdataset pipes curl).
    urls = [str(p) for p in paths] + [f"pipe:curl -s -L '{bucket.object(n).get_url()}'" for n in names]
    samples = list(wds.WebDataset(urls, shardshuffle=False))
    assert len(samples) == 120
    first = samples[0]
    assert first["__key__"] == "sample-000000-000000"
    assert len(first["jpg"]) == 1024
    assert json.loads(first["json"])["key"] == first["__key__"]
    assert [s["__key__"] for s in samples[:60]] == [s["__key__"] for s in samples[60:]]


def _moss(cluster: str, bucket: str, req: dict) -> urllib3.BaseHTTPResponse:
    return HTTP.request("GET", f"{cluster}/v1/ml/moss/{bucket}", body=json.dumps(req),
                        headers={"content-type": "application/json"})


def test_get_batch_order_and_missing(cluster, bucket):
    shards = {}
    for s in range(6):
        members = {f"{s}/{i:03d}.bin": os.urandom(4096 + i) for i in range(40)}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for n, d in members.items():
                ti = tarfile.TarInfo(n)
                ti.size = len(d)
                t.addfile(ti, io.BytesIO(d))
        bucket.object(f"s{s}.tar").put(buf.getvalue())
        shards[f"s{s}.tar"] = members
    bucket.object("plain.bin").put(b"plain")
    items = [(shard, m) for shard, ms in shards.items() for m in ms]
    import random

    random.Random(1).shuffle(items)
    req = {"in": [{"objname": s, "archpath": m} for s, m in items] + [{"objname": "plain.bin"}], "strm": True}
    r = _moss(cluster, bucket.name, req)
    assert r.status == 200, r.data
    with tarfile.open(fileobj=io.BytesIO(r.data), mode="r|") as t:
        got = [(m.name, t.extractfile(m).read()) for m in t]
    assert [n for n, _ in got[:-1]] == [f"{bucket.name}/{s}/{m}" for s, m in items]
    assert all(d == shards[s][m] for (_, d), (s, m) in zip(got, items))
    assert got[-1] == (f"{bucket.name}/plain.bin", b"plain")
    # Missing items: 404 up front without coer; in-band __404__ entries with it.
    req["in"].insert(3, {"objname": "nope.bin"})
    assert _moss(cluster, bucket.name, req).status == 404
    req["coer"] = True
    req["onob"] = True
    r = _moss(cluster, bucket.name, req)
    with tarfile.open(fileobj=io.BytesIO(r.data)) as t:
        names = t.getnames()
    assert names[3] == "__404__/nope.bin"
    assert [n for n in names if n.startswith("__404__")] == ["__404__/nope.bin"]


def test_aistore_sdk_batch_archive_and_listing(cluster, bucket):
    from aistore.sdk import Client as AisClient
    from aistore.sdk.list_object_flag import ListObjectFlag

    ais = AisClient(cluster)
    b = ais.bucket(bucket.name)
    for i in range(12):
        b.object(f"obj-{i:02d}").get_writer().put_content(f"object {i}".encode() * (i + 1))
    # The archive job through the SDK: objects packed into one shard.
    job_ids = b.objects(obj_names=[f"obj-{i:02d}" for i in range(12)]).archive(archive_name="packed.tar")
    for job_id in job_ids:
        ais.job(job_id).wait(timeout=60)
    with tarfile.open(fileobj=io.BytesIO(b.object("packed.tar").get_reader().read_all())) as t:
        assert t.getnames() == [f"obj-{i:02d}" for i in range(12)]
        assert t.extractfile("obj-05").read() == b"object 5" * 6
    # Listing with the SDK's archive flag.
    entries = b.list_all_objects(flags=[ListObjectFlag.ARCH_DIR], prefix="packed.tar/")
    assert [e.name for e in entries] == [f"packed.tar/obj-{i:02d}" for i in range(12)]
    # get-batch through the SDK: streaming and multipart (with per-item metadata).
    for streaming in (True, False):
        batch = ais.batch(bucket=b, streaming_get=streaming)
        batch.add("packed.tar", archpath="obj-03")
        batch.add("obj-07")
        batch.add("missing-object")
        got = list(batch.get())
        assert [o.obj_name for o, _ in got] == ["packed.tar", "obj-07", "missing-object"]
        assert got[0][1] == b"object 3" * 4
        assert got[1][1] == b"object 7" * 8
        assert got[2][1] == b""
        if not streaming:
            assert got[0][0].size == len(b"object 3" * 4)
            assert "missing-object" in (got[2][0].err_msg or "")


def test_append_and_hostile(cluster, bucket):
    for i in range(5):
        r = HTTP.request("PUT", _url(bucket, "grow.tar", archpath=f"m{i}.txt"), body=f"member {i}".encode())
        assert r.status == 200, r.data
    assert HTTP.request("PUT", _url(bucket, "grow.tar", archpath="m0.txt"), body=b"again").status == 409
    data = bucket.object("grow.tar").get()
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        assert t.getnames() == [f"m{i}.txt" for i in range(5)]
    # Hostile: a tar with a path that escapes, and random bytes named .zip.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo("../../escape")
        ti.size = 1
        t.addfile(ti, io.BytesIO(b"x"))
    bucket.object("evil.tar").put(buf.getvalue())
    bucket.object("junk.zip").put(os.urandom(3000))
    for name in ("evil.tar", "junk.zip"):
        r = _get(bucket, name, archpath="x")
        assert r.status == 400, (name, r.status, r.data)
        assert json.loads(r.data)["message"]
    assert bucket.object("grow.tar").get() == data


def test_sdk_archive_reshard_and_append(cluster, bucket):
    """The SDK's shard jobs: ``Bucket.archive`` packs objects into a shard (and a series by
    size), ``Bucket.reshard`` re-packs shards' samples into new shards of a size (every
    sample once, whole), ``Object.append_member`` grows a shard in place."""
    from gristmill import Conflict

    objs = {f"src/{i:03d}.bin": os.urandom(500 + i) for i in range(30)}
    for name, data in objs.items():
        bucket.object(name).put(data)
    bucket.archive("packed.tar", prefix="src/").wait()
    with tarfile.open(fileobj=io.BytesIO(bucket.object("packed.tar").get())) as t:
        assert {m.name: t.extractfile(m).read() for m in t.getmembers()} == objs
    bucket.archive("series-{00..}.tar", prefix="src/", shard_size=5000).wait()
    series = [e.name for e in bucket.list_all_objects(prefix="series-")]
    assert len(series) >= 3
    members = []
    for name in series:
        with tarfile.open(fileobj=io.BytesIO(bucket.object(name).get())) as t:
            members += t.getnames()
    assert sorted(members) == sorted(objs)

    # Reshard 3 shards of 10 samples (.bin + .cls) into shards of ~6 KB.
    for s in range(3):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for i in range(10):
                for ext, data in (("bin", os.urandom(700)), ("cls", str(i).encode())):
                    ti = tarfile.TarInfo(f"s{s}-{i:02d}.{ext}")
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))
        bucket.object(f"in/shard-{s}.tar").put(buf.getvalue())
    out = bucket.client.bucket(f"{bucket.name}-out")
    bucket.reshard(out, input_template="in/shard-{0..2}.tar", output_template="out-{000..}.tar",
                   shard_size=6000).wait()
    keys = []
    for e in out.list_all_objects():
        with tarfile.open(fileobj=io.BytesIO(out.object(e.name).get())) as t:
            names = t.getnames()
        keys += sorted({n.rsplit(".", 1)[0] for n in names})
        assert len(names) == 2 * len({n.rsplit(".", 1)[0] for n in names})  # samples whole
    assert sorted(keys) == sorted(f"s{s}-{i:02d}" for s in range(3) for i in range(10))
    assert len(out.list_all_objects()) >= 3
    out.delete()

    shard = bucket.object("grown.tar")
    shard.append_member("a.txt", b"first")
    shard.append_member("b.txt", b"second")
    assert shard.get(archpath="b.txt") == b"second"
    with pytest.raises(Conflict):
        shard.append_member("a.txt", b"again")

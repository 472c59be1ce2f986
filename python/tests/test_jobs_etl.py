"""The SDK's jobs and ETL against a real playground: prefetch/evict of an `ht://` remote bucket
(a local `python -m http.server` as the origin) with cached flags, copy with a prefix rewrite,
`Job.wait()` with progress and failures, the `aistore` SDK waiting on our job ids, and Python ETLs
inline and offline."""

import os
import uuid

import pytest

from conftest import _playground, http_origin
from gristmill import Client, GristError, JobFailed
from gristmill.jobs import EtlError
from wheelutil import make_wheel


@pytest.fixture(scope="module")
def origin():
    """An HTTP origin serving 40 files; yields (ht bucket name, {name: bytes})."""
    files = {f"d/f-{i:02d}.bin": os.urandom(1000 + i) for i in range(40)}
    with http_origin(files) as host:
        yield host, files


@pytest.fixture(scope="module")
def remote_cluster():
    with _playground({"GRISTD_HT_ALLOW_PRIVATE": "true"}) as endpoint:
        yield endpoint


def test_prefetch_evict_and_cached_flags(remote_cluster, origin):
    host, files = origin
    c = Client(remote_cluster)
    b = c.bucket(host, provider="ht")
    names = sorted(files)
    seen = []
    status = b.prefetch(names=names[:30]).wait(progress=lambda s: seen.append(s["objects"]))
    assert (status["objects"], status["errors"], status["total_objects"]) == (30, 0, 30)
    assert seen and seen[-1] == 30
    cached = {e.name for e in b.list_cached()}
    assert cached == set(names[:30])
    assert all(e.is_cached for e in b.list_cached())
    assert b.object(names[3]).get() == files[names[3]]
    b.evict(names=names[:10]).wait()
    assert {e.name for e in b.list_cached()} == set(names[10:30])
    # By brace template, both ways.
    b.evict(template="d/f-{10..19}.bin").wait()
    assert {e.name for e in b.list_cached()} == set(names[20:30])
    b.prefetch(template="d/f-{30..34}.bin").wait()
    assert {e.name for e in b.list_cached()} == set(names[20:35])
    # A failing object is reported by name, and wait() raises.
    with pytest.raises(JobFailed) as e:
        b.prefetch(names=["d/no-such-file.bin"]).wait()
    assert e.value.status["errors"] == 1
    assert c.job(e.value.status["id"]).errors()[0]["name"] == "d/no-such-file.bin"


def test_copy_with_prefix_rewrite_and_aistore_job_wait(remote_cluster, origin):
    host, files = origin
    c = Client(remote_cluster)
    src = c.bucket(host, provider="ht")
    src.prefetch(names=sorted(files)).wait()
    dst = c.bucket(f"copy-{uuid.uuid4().hex[:8]}")
    job = src.copy(dst, names=["d/f-01.bin", "d/f-02.bin"], prepend="copied/")
    # The aistore SDK waits on our job ids through AIStore's status query.
    from aistore.sdk import Client as AisClient

    result = AisClient(remote_cluster).job(job_id=job.id).wait(timeout=60, verbose=False)
    assert result.success
    assert dst.object("copied/d/f-01.bin").get() == files["d/f-01.bin"]
    # A native bucket's selection by prefix.
    again = c.bucket(f"copy2-{uuid.uuid4().hex[:8]}")
    dst.copy(again, prefix="copied/d/f-02").wait(timeout=60)
    assert [e.name for e in again.list_all_objects()] == ["copied/d/f-02.bin"]
    assert {j["id"] for j in c.jobs(kind="copy")} >= {job.id}


def test_direct_batch_of_a_remote_bucket_the_cluster_forgot(remote_cluster, origin):
    """A direct get-batch (no proxy on the way) naming a remote bucket the cluster does not
    know: the designated target has the primary add it, as a proxy would on first access."""
    host, files = origin
    c = Client(remote_cluster)
    b = c.bucket(host, provider="ht")
    b.object("d/f-00.bin").get()
    b.evict_all()  # forgets the bucket too
    assert host not in {x.name for x in c.list_buckets(provider="ht")}
    direct = Client(remote_cluster, direct=True)
    names = sorted(files)[5:13]
    batch = direct.batch(direct.bucket(host, provider="ht"))
    for n in names:
        batch.add(n)

    def batches_at_proxy() -> int:  # get-batch requests count as op "batch"
        text = c._request("GET", "/metrics").data.decode()
        return sum(int(float(line.split()[-1])) for line in text.splitlines()
                   if line.startswith('grist_requests_total{op="batch"}'))

    before = batches_at_proxy()
    assert [(i.name, d) for i, d in batch.get()] == [(n, files[n]) for n in names]
    assert batches_at_proxy() == before  # not redirected: sent to the target directly
    assert host in {x.name for x in c.list_buckets(provider="ht")}


UPPER = '''
def transform(data, path, args):
    if data.startswith(b"FAIL"):
        raise ValueError("refusing " + path)
    return data.upper() + args.encode()
'''


def reverse(data, path, args):
    return data[::-1]


def test_python_etl_inline_and_offline(cluster):
    c = Client(cluster)
    b = c.bucket(f"etl-{uuid.uuid4().hex[:8]}")
    b.create()
    for i in range(20):
        b.object(f"t/{i:02d}.txt").put(f"text number {i}".encode())
    b.object("t/bad.txt").put(b"FAIL me")
    etl = c.etl(f"up-{uuid.uuid4().hex[:6]}").init_code(UPPER)
    rev = c.etl(f"rev-{uuid.uuid4().hex[:6]}").init_code(reverse)
    assert b.object("t/03.txt").get(etl=etl.name, etl_args="!") == b"TEXT NUMBER 3!"
    assert b.object("t/03.txt").get(etl=[etl.name, rev.name]) == b"3 REBMUN TXET"
    out = c.bucket(f"etl-out-{uuid.uuid4().hex[:8]}")
    with pytest.raises(JobFailed) as e:
        b.transform(etl.name, out, prefix="t/", ext={"txt": "up"}).wait()
    s = e.value.status
    assert (s["objects"], s["errors"]) == (21, 1)
    assert [x["name"] for x in c.job(s["id"]).errors()] == ["t/bad.txt"]
    assert out.object("t/07.up").get() == b"TEXT NUMBER 7"
    assert etl.show()["objects"] >= 21
    etl.delete()
    rev.delete()


def _wheel(directory: str) -> str:
    """A wheel of ``gmsdk_twice`` (``twice(b) = b + b``)."""
    return make_wheel(directory, "gmsdk_twice", "def twice(b):\n    return b + b\n")


def twice_etl(data, path, args):
    import gmsdk_twice
    return gmsdk_twice.twice(data)


def test_etl_dependencies_installed_before_init_returns(cluster, tmp_path):
    """``init_code(dependencies=...)`` returns once every target has installed them (in the
    default environment directory); a requirement pip cannot install raises EtlError."""
    c = Client(cluster)
    b = c.bucket(f"deps-{uuid.uuid4().hex[:8]}")
    b.create()
    b.object("a").put(b"xy")
    os.chmod(tmp_path, 0o755)
    etl = c.etl(f"twice-{uuid.uuid4().hex[:6]}").init_code(twice_etl, dependencies=[_wheel(str(tmp_path))])
    states = {n: t["dependencies"] for n, t in etl.show()["targets"].items()}
    assert set(states.values()) == {"ready"} and len(states) >= 2, states
    assert b.object("a").get(etl=etl.name) == b"xyxy"
    with pytest.raises(EtlError) as e:
        c.etl(f"nodep-{uuid.uuid4().hex[:6]}").init_code(
            twice_etl, dependencies=[str(tmp_path / "gm_absent-1.0-py3-none-any.whl")], wait_timeout=120)
    assert "gm_absent" in str(e.value) or "dependencies" in str(e.value)
    etl.delete()


def test_bucket_scrub_checks_every_copy(bucket):
    """``Bucket.scrub()`` starts a scrub job; on healthy data it reads every object and finds
    nothing corrupt (corruption and repair are tested with real flipped files in the Rust
    cluster tests, tests/tests/cluster/scrub.rs)."""
    for i in range(5):
        bucket.object(f"s-{i}").put(os.urandom(1000 + i))
    job = bucket.scrub()
    s = job.wait(timeout=120)
    assert s["kind"] == "scrub" and s["state"] == "finished"
    assert s["objects"] == 5 and s["errors"] == 0
    assert s.get("counters", {}).get("corrupt", 0) == 0
    assert bucket.scrub(prefix="s-1", no_repair=True).wait(timeout=120)["objects"] == 1


def rot_stream(reader, writer, path, args):
    while True:
        piece = reader.read(65536)
        if not piece:
            break
        writer.write(bytes((b + 1) % 256 for b in piece))


def test_streaming_etl_from_a_function(cluster):
    """A four-parameter function is the streaming form: a 3 MiB object (streamed through the
    worker) and a small one (whole) give the same bytes as the function run locally."""
    c = Client(cluster)
    b = c.bucket(f"stream-{uuid.uuid4().hex[:8]}")
    b.create()
    big = os.urandom(3 << 20)
    b.object("big").put(big)
    b.object("small").put(b"abc")
    etl = c.etl(f"rot-{uuid.uuid4().hex[:6]}").init_code(rot_stream)
    assert b.object("big").get(etl=etl.name) == bytes((x + 1) % 256 for x in big)
    assert b.object("small").get(etl=etl.name) == b"bcd"
    etl.delete()


def test_etl_from_a_lambda_in_python_c_a_closure_and_a_version_mismatch(cluster):
    """Functions without standalone source travel pickled: a lambda defined by ``python -c``
    (no source to read), and a closure over a local; a pickle recorded under another Python
    version is refused by the worker with a message that says so."""
    import subprocess
    import sys

    from gristmill.jobs import pickled_etl_source

    c = Client(cluster)
    b = c.bucket(f"pick-{uuid.uuid4().hex[:8]}")
    b.create()
    b.object("o").put(b"hello etl")
    name = f"lam-{uuid.uuid4().hex[:6]}"
    script = (
        "import sys\n"
        "from gristmill import Client\n"
        "Client(sys.argv[1]).etl(sys.argv[2]).init_code(lambda data, path, args: data[::-1].upper() + args.encode())\n"
    )
    out = subprocess.run([sys.executable, "-c", script, cluster, name], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert b.object("o").get(etl=name, etl_args="!") == b"LTE OLLEH!"

    times = 3
    closure = c.etl(f"clo-{uuid.uuid4().hex[:6]}").init_code(lambda data, path, args: data * times)
    assert b.object("o").get(etl=closure.name) == b"hello etl" * 3

    old = c.etl(f"old-{uuid.uuid4().hex[:6]}").init_code(
        pickled_etl_source(lambda data, path, args: data, python=(3, 2)))
    with pytest.raises(GristError) as e:
        b.object("o").get(etl=old.name)
    assert "pickled under Python 3.2" in str(e.value), e.value
    for etl in (c.etl(name), closure, old):
        etl.delete()

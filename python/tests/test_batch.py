"""get-batch through the SDK (`Client.batch`) and the torch datasets built on it
(`BatchDataset`, `ObjectDataset(get_batch=True)`), against a real 3-target cluster. Requests
are counted on the targets' /metrics (`grist_batch_requests_total` on the designated target,
`grist_requests_total{op="get"}` for plain object GETs) and, for direct mode, on the proxy's
(where a get-batch request counts as `grist_requests_total{op="batch"}`)."""

from __future__ import annotations

import copy
import hashlib
import io
import os
import random
import tarfile
import tracemalloc
import uuid
import zipfile

import pytest
from torch.utils.data import DataLoader, DistributedSampler

from gristmill import (
    BadRequest,
    BatchItem,
    BucketNotFound,
    Client,
    ObjectNotFound,
    RangeNotSatisfiable,
    hrw,
)
from gristmill.torch import BatchDataset, ObjectDataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _target_metric(client, prefix: str) -> int:
    """Sum over all targets of the metric lines starting with `prefix`."""
    total = 0
    for t in client.cluster_map()["tmap"].values():
        text = client._request("GET", t["public_net"]["direct_url"] + "/metrics").data.decode()
        total += sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(prefix))
    return total


def batch_requests(client) -> int:
    return _target_metric(client, "grist_batch_requests_total")


def batch_requests_by_target(client) -> dict:
    """{target id: grist_batch_requests_total of that target} (the cached map: no proxy request)."""
    out = {}
    for tid, t in client.cluster_map(refresh=False)["tmap"].items():
        text = client._request("GET", t["public_net"]["direct_url"] + "/metrics").data.decode()
        out[tid] = sum(int(float(line.split()[-1])) for line in text.splitlines()
                       if line.startswith("grist_batch_requests_total"))
    return out


def proxy_requests(client) -> dict:
    """{op: grist_requests_total{op} at the proxy} (get-batch requests count as op "batch",
    object GETs as "get"), leaving out its own /metrics scrapes and "control" (the targets'
    keepalives, every 2 s, and cluster-map fetches)."""
    text = client._request("GET", "/metrics").data.decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("grist_requests_total{") and not any(
                f'op="{op}"' in line for op in ("metrics", "control")):
            out[line[line.index('op="') + 4:].split('"')[0]] = int(float(line.split()[-1]))
    return out


def object_gets(client) -> int:
    return _target_metric(client, 'grist_requests_total{op="get"}')


def _tar(members: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _zip(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def other(client):
    b = client.bucket(f"t2-{uuid.uuid4().hex[:12]}")
    b.create()
    yield b
    b.delete(missing_ok=True)


@pytest.fixture
def content(client, bucket, other):
    """Objects in two buckets (spread over the targets), a tar shard and a zip shard:
    {(bucket, name, archpath): bytes}."""
    rng = random.Random(5)
    out = {}
    for b, n in ((bucket, 30), (other, 10)):
        for i in range(n):
            name = f"dir/ü-{i:02d}.bin" if i % 7 == 3 else f"obj-{i:03d}"
            data = rng.randbytes(rng.choice([0, 1, 100, 5000, 70_000]))
            b.object(name).put(data)
            out[(b, name, "")] = data
    tar_members = {f"m/{i:02d}.jpg": rng.randbytes(1000 + i) for i in range(15)}
    bucket.object("shard.tar").put(_tar(tar_members))
    out.update({(bucket, "shard.tar", m): d for m, d in tar_members.items()})
    zip_members = {f"z{i}.txt": f"zip member {i}".encode() * (i + 1) for i in range(5)}
    other.object("pack.zip").put(_zip(zip_members))
    out.update({(other, "pack.zip", m): d for m, d in zip_members.items()})
    owners = {client.owner(b.uname(name))["public_net"]["direct_url"] for b, name, _ in out}
    assert len(owners) == 3, "the test objects should live on every target"
    return out


def test_batch_returns_items_in_request_order(client, bucket, other, content):
    keys = list(content)
    random.Random(9).shuffle(keys)
    keys += keys[:3]  # items may repeat
    batch = client.batch(bucket)
    added = []
    for b, name, member in keys:
        added.append(batch.add(name if b == bucket else b.object(name), archpath=member))
    big = max((k for k in content if not k[2]), key=lambda k: len(content[k]))
    added.append(batch.add(big[1] if big[0] == bucket else big[0].object(big[1]), start=10, length=300))
    added.append(batch.add(other.object("pack.zip"), archpath="z3.txt", start=4, length=-1))
    expected = [content[k] for k in keys] + [content[big][10:310], content[(other, "pack.zip", "z3.txt")][4:]]

    before = batch_requests(client)
    got = list(batch.get())
    assert batch_requests(client) == before + 1  # one request for all of them

    assert len(got) == len(added) == len(batch)
    for (item, data), want, mine in zip(got, expected, added):
        assert item is mine  # the very items added, in the order added
        assert isinstance(item, BatchItem) and not item.missing
        assert data == want, item
        assert item.size == len(want)
    # Read again (a batch is reusable): the same answer.
    assert [d for _, d in batch.get()] == expected


def test_missing_items_raise_or_are_marked(client, bucket, content):
    def batch(*extra, coer=False):
        b = client.batch(bucket, continue_on_error=coer)
        b.add("obj-001")
        for name, kw in extra:
            b.add(name, **kw)
        b.add("obj-002")
        return b

    with pytest.raises(ObjectNotFound, match="nope"):
        list(batch(("nope", {})).get())
    with pytest.raises(ObjectNotFound, match="no-such-member"):
        list(batch(("shard.tar", {"archpath": "no-such-member"})).get())
    with pytest.raises(RangeNotSatisfiable):
        list(batch(("obj-001", {"start": 1 << 30})).get())
    ghost = client.batch(client.bucket(f"ghost-{uuid.uuid4().hex[:8]}"))
    ghost.add("x")
    with pytest.raises(BucketNotFound):
        list(ghost.get())

    b = batch(("nope", {}), ("shard.tar", {"archpath": "no-such-member"}), coer=True)
    got = list(b.get())
    assert [(i.name, i.archpath, i.missing) for i, _ in got] == [
        ("obj-001", "", False), ("nope", "", True), ("shard.tar", "no-such-member", True), ("obj-002", "", False)]
    assert "nope" in got[1][0].error and "no-such-member" in got[2][0].error
    assert got[1][1] == got[2][1] == b""
    assert got[0][1] == content[(bucket, "obj-001", "")] and got[3][1] == content[(bucket, "obj-002", "")]


@pytest.mark.parametrize("fmt", [".tgz", ".zip", "tar"])
def test_output_formats_give_the_same_items(client, bucket, other, content, fmt):
    keys = sorted(content, key=lambda k: (k[0].name, k[1], k[2]))[::2]

    def read(output_format):
        b = client.batch(bucket, output_format=output_format, continue_on_error=True)
        for bk, name, member in keys:
            b.add(bk.object(name), archpath=member)
        b.add("missing-one")
        return [(i.bucket.name, i.name, i.archpath, i.missing, d) for i, d in b.get()]

    tar = read(".tar")
    assert [x[-1] for x in tar] == [content[k] for k in keys] + [b""]
    assert read(fmt) == tar
    with pytest.raises(ValueError, match="tar.lz4"):
        client.batch(bucket, output_format=".tar.lz4")
    dup = client.batch(bucket, output_format=".zip")
    dup.add("obj-001")
    dup.add("obj-001")
    with pytest.raises(BadRequest):  # zip cannot hold a name twice (tar can)
        list(dup.get())


def test_stream_reads_large_items_in_little_memory(client, bucket):
    size = 8 << 20
    digests = {}
    for i in range(3):
        data = os.urandom(size)
        bucket.object(f"big-{i}").put(data)
        digests[f"big-{i}"] = hashlib.sha256(data).hexdigest()
        bucket.object(f"small-{i}").put(b"small %d" % i)
    del data
    names = [n for i in range(3) for n in (f"big-{i}", f"small-{i}")]
    batch = client.batch(bucket)
    for n in names:
        batch.add(n)

    tracemalloc.start()
    try:
        seen = []
        for item, reader in batch.stream():
            seen.append(item.name)
            if item.name.startswith("big"):
                h = hashlib.sha256()
                while chunk := reader.read(64 * 1024):
                    h.update(chunk)
                assert h.hexdigest() == digests[item.name]
            else:
                assert reader.read() == b"small %s" % item.name[-1].encode()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == names
    assert peak < 4 << 20, f"streaming 3 x 8 MiB peaked at {peak} bytes of Python memory"

    # Unread rest of an item is skipped; stopping early closes the answer; the client goes on.
    got = []
    for item, reader in batch.stream():
        got.append((item.name, reader.read(5)))
        if len(got) == 4:
            break
    assert got[1] == ("small-0", b"small") and got[3] == ("small-1", b"small")
    assert [i.name for i, _ in batch.get()] == names


# ---- direct mode -------------------------------------------------------------------------------

def _by_owner(client, content):
    """{target id: [whole-object keys of `content` it owns]}."""
    smap = client.cluster_map()
    out = {}
    for k in sorted((k for k in content if not k[2]), key=lambda k: (k[0].name, k[1])):
        out.setdefault(hrw.owner(smap, k[0].uname(k[1]))["daemon_id"], []).append(k)
    return out


def test_direct_batch_goes_to_the_designated_target_without_the_proxy(cluster, client, bucket, other, content):
    """``Client(direct=True)``: the batch is sent straight to the target owning most of its
    items (picked here from the cached map, as the proxy would); the proxy sees nothing."""
    direct = Client(cluster, direct=True)
    direct.cluster_map()  # cache the map (direct mode needs nothing else from the proxy)
    owned = _by_owner(client, content)
    smap = client.cluster_map()
    ids = sorted(owned)
    assert len(ids) == 3 and all(len(v) >= 5 for v in owned.values())
    rng = random.Random(11)
    for majority in (ids[0], ids[2]):  # two batches, each with a different clear majority
        rest = [i for i in ids if i != majority]
        keys = owned[majority][:5] + owned[rest[0]][:3] + owned[rest[1]][:2]
        keys.append((bucket, "shard.tar", "m/07.jpg"))  # a shard member: one more on its owner
        rng.shuffle(keys)
        counts = {tid: sum(hrw.owner(smap, k[0].uname(k[1]))["daemon_id"] == tid
                           for k in keys) for tid in ids}
        want_target = max(ids, key=lambda tid: counts[tid])
        assert sorted(counts.values())[-1] > sorted(counts.values())[-2]  # no tie
        batch = direct.batch(direct.bucket(bucket.name))
        for b, name, member in keys:
            batch.add(direct.bucket(b.name).object(name), archpath=member)

        proxy0, per_target0 = proxy_requests(client), batch_requests_by_target(client)
        got = list(batch.get())
        per_target = batch_requests_by_target(client)
        assert proxy_requests(client) == proxy0  # not one request through the proxy
        assert {tid: per_target[tid] - per_target0[tid] for tid in ids} == \
            {tid: int(tid == want_target) for tid in ids}  # one request, at the designated target
        assert [(i.bucket.name, i.name, i.archpath) for i, _ in got] == [(b.name, n, m) for b, n, m in keys]
        assert [d for _, d in got] == [content[k] for k in keys]

    # The same batch through the proxy is counted there (the counter does count).
    batch = client.batch(bucket)
    batch.add("obj-001")
    proxy0 = proxy_requests(client)
    assert [d for _, d in batch.get()] == [content[(bucket, "obj-001", "")]]
    assert proxy_requests(client).get("batch", 0) == proxy0.get("batch", 0) + 1


def test_direct_batch_needs_no_proxy_and_falls_back_to_it(cluster, client, bucket, content):
    """With a cached map a direct batch works while the proxy is down; a designated target
    that cannot be reached drops the cached map and the batch goes through the proxy."""
    names = ["obj-000", "obj-001", "dir/ü-03.bin", "obj-004"]
    want = [content[(bucket, n, "")] for n in names]
    smap = client.cluster_map()

    offline = Client("http://127.0.0.1:9", direct=True, retries=0)
    offline._smap = copy.deepcopy(smap)
    batch = offline.batch(bucket.name)
    for n in names:
        batch.add(n)
    assert [d for _, d in batch.get()] == want

    c = Client(cluster, direct=True)
    c._smap = copy.deepcopy(smap)
    target = hrw.designated(smap, [bucket.uname(n) for n in names])["daemon_id"]
    c._smap["tmap"][target]["public_net"]["direct_url"] = "http://127.0.0.1:9"  # unreachable
    batch = c.batch(bucket)
    for n in names:
        batch.add(n)
    before = proxy_requests(client).get("batch", 0)
    assert [d for _, d in batch.get()] == want
    assert c._smap is None  # the map was dropped...
    assert proxy_requests(client).get("batch", 0) == before + 1  # ...and the proxy routed the batch
    assert [d for _, d in batch.get()] == want  # the next one: a fresh map, direct again
    assert c._smap is not None and proxy_requests(client).get("batch", 0) == before + 1


def test_designated_target_rule():
    """``hrw.designated``: most items wins; a tie goes to the same target every time; inactive
    targets are skipped."""
    smap = {"tmap": {t: {"daemon_id": t, "id_digest": hrw.digest(t), "flags": 0} for t in ("ta", "tb", "tc")}}
    unames = [hrw.uname("b", f"o{i}") for i in range(50)]
    owner = {u: hrw.owner(smap, u)["daemon_id"] for u in unames}
    by = {t: [u for u in unames if owner[u] == t] for t in ("ta", "tb", "tc")}
    assert all(len(v) >= 3 for v in by.values())
    assert hrw.designated(smap, by["ta"][:1] + by["tb"][:3] + by["tc"][:2])["daemon_id"] == "tb"
    tie = by["ta"][:2] + by["tc"][:2] + by["tb"][:1]
    first = hrw.designated(smap, tie)["daemon_id"]
    assert first in ("ta", "tc") and all(hrw.designated(smap, tie)["daemon_id"] == first for _ in range(5))
    assert hrw.designated(smap, [])["daemon_id"] in ("ta", "tb", "tc")
    smap["tmap"]["tb"]["flags"] = 1 << 2  # maintenance
    assert hrw.designated(smap, by["tb"][:3])["daemon_id"] != "tb"
    assert hrw.designated({"tmap": {}}, unames) is None


# ---- torch -------------------------------------------------------------------------------------

def _value(i: int) -> bytes:
    return b"value of %d" % i


def _epoch(loaders, epoch):
    """Per rank: the (name, data) items the rank's loader yields in `epoch`, and its batch count."""
    out = []
    for ds, loader in loaders:
        ds.set_epoch(epoch)
        batches = list(loader)
        assert all(0 < len(b) <= ds.batch_size for b in batches)
        out.append(([x for b in batches for x in b], len(batches)))
    return out


def test_batch_dataset_splits_exactly_once_per_epoch(client, bucket):
    n = 101
    for i in range(n):
        bucket.object(f"bd/{i:04d}").put(_value(i))
    all_names = [f"bd/{i:04d}" for i in range(n)]
    loaders = []
    for rank in range(2):
        ds = BatchDataset(bucket, prefix="bd/", batch_size=8, seed=7, rank=rank, world_size=2, with_name=True)
        loaders.append((ds, DataLoader(ds, batch_size=None, num_workers=3, persistent_workers=True)))

    gets, batches = object_gets(client), batch_requests(client)
    e0 = _epoch(loaders, 0)
    expected_batches = sum(len(ds.assigned_batches(w, 3)) for ds, _ in loaders for w in range(3))
    # 101 names: rank 0 has 51 (17 per worker: 8+8+1), rank 1 has 50 (17, 17, 16: 8+8).
    assert sum(count for _, count in e0) == expected_batches == 9 + 8
    assert batch_requests(client) - batches == expected_batches  # one request per batch...
    assert object_gets(client) == gets  # ...and no GET per sample

    names0 = [[name for name, _ in items] for items, _ in e0]
    assert sorted(names0[0] + names0[1]) == all_names  # every name exactly once, over both ranks
    assert abs(len(names0[0]) - len(names0[1])) <= 1
    assert all(data == _value(int(name[3:])) for items, _ in e0 for name, data in items)

    e1 = _epoch(loaders, 1)
    names1 = [[name for name, _ in items] for items, _ in e1]
    assert sorted(names1[0] + names1[1]) == all_names
    assert names1 != names0  # another epoch, another order...
    e0_again = _epoch(loaders, 0)
    assert [[name for name, _ in items] for items, _ in e0_again] == names0  # ...the same epoch, the same


def test_batch_dataset_with_a_direct_client_skips_the_proxy(cluster, client, bucket):
    for i in range(30):
        bucket.object(f"dd/{i:02d}").put(_value(i))
    direct = Client(cluster, direct=True)
    ds = BatchDataset(direct.bucket(bucket.name), prefix="dd/", batch_size=7, seed=1, with_name=True)
    direct.cluster_map()  # cached: the workers get it with the dataset
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    proxy0, batches0 = proxy_requests(client), batch_requests(client)
    got = list(loader)
    assert proxy_requests(client) == proxy0  # no batch (nor object GET) through the proxy
    assert batch_requests(client) - batches0 == len(got) == 6  # 15 per worker: 7, 7, 1
    assert sorted(name for b in got for name, _ in b) == [f"dd/{i:02d}" for i in range(30)]
    assert all(v == _value(int(name[3:])) for b in got for name, v in b)


def _decode(data: bytes) -> str:
    return data.decode()


def test_batch_dataset_members_samples_and_missing(client, bucket):
    members = {f"k/{i:03d}.txt": f"member {i}".encode() for i in range(23)}
    bucket.object("s.tar").put(_tar(members))
    keys = [("s.tar", m) for m in members]
    ds = BatchDataset(bucket, names=keys, batch_size=5, batched=False, decode=_decode, with_name=True)
    loader = DataLoader(ds, batch_size=5, num_workers=2)
    got = [(tuple(k), v) for b in loader for k, v in zip(zip(*b[0]), b[1])]
    assert sorted(got) == sorted((k, members[k[1]].decode()) for k in keys)

    lossy = BatchDataset(bucket, names=keys[:6] + [("s.tar", "k/gone.txt"), "gone.bin"], batch_size=4,
                         shuffle=False, decode=_decode)
    with pytest.raises(ObjectNotFound):
        list(lossy)
    lossy.continue_on_error = True
    with pytest.warns(UserWarning, match="2 of 4 items could not be read"):
        batches = list(lossy)
    assert batches == [[members[m].decode() for _, m in keys[:4]], [members[m].decode() for _, m in keys[4:6]]]


def test_object_dataset_get_batch_fetches_a_loader_batch_per_request(client, bucket):
    for i in range(40):
        bucket.object(f"od/{i:02d}").put(_value(i))
    ds = ObjectDataset(bucket, prefix="od/", get_batch=True, with_name=True)
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=6, sampler=sampler, num_workers=2, persistent_workers=True)
    gets, batches = object_gets(client), batch_requests(client)
    got = list(loader)
    assert batch_requests(client) - batches == len(got) == 4  # 20 indices: 6, 6, 6, 2
    assert object_gets(client) == gets
    assert [name for b in got for name in b[0]] == [ds.names[i] for i in sampler]
    assert all(v == _value(int(name[3:])) for b in got for name, v in zip(*b))
    # Without get_batch, __getitems__ reads one by one (the same values).
    plain = ObjectDataset(bucket, prefix="od/")
    assert plain.__getitems__([3, 1]) == [_value(3), _value(1)]
    assert ds.__getitems__([3, 1]) == [("od/03", _value(3)), ("od/01", _value(1))]


def _reverse_upper(data, path, args):
    if data.startswith(b"BAD"):
        raise ValueError("refusing " + path)
    return data[::-1].upper() + args.encode()


def _gzip(data, path, args):
    import gzip
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize("fmt", [".tar", ".zip"])
def test_batch_through_an_etl_and_a_pipeline(client, bucket, other, content, fmt):
    """``client.batch(..., etl=...)``: every item (objects and shard members, in two buckets)
    comes back transformed, in request order; an item the ETL refuses is marked missing with
    continue_on_error; a pipeline composes."""
    import gzip

    etl = client.etl(f"ru-{uuid.uuid4().hex[:6]}").init_code(_reverse_upper)
    gz = client.etl(f"gz-{uuid.uuid4().hex[:6]}").init_code(_gzip)
    try:
        bucket.object("bad").put(b"BAD input")
        keys = list(content)
        random.Random(3).shuffle(keys)
        batch = client.batch(bucket, etl=etl.name, etl_args="~", continue_on_error=True, output_format=fmt)
        for b, name, member in keys[:20]:
            batch.add(name if b == bucket else b.object(name), archpath=member)
        bad = batch.add("bad")
        for b, name, member in keys[20:30]:
            batch.add(name if b == bucket else b.object(name), archpath=member)
        before = batch_requests(client)
        got = list(batch.get())
        assert batch_requests(client) == before + 1
        want = [content[k][::-1].upper() + b"~" for k in keys[:20]] + [b""] + \
               [content[k][::-1].upper() + b"~" for k in keys[20:30]]
        assert [d for _, d in got] == want
        assert [i for i, _ in got] == batch.items
        assert bad.missing and etl.name in bad.error
        assert all(not i.missing and i.size == len(d) for i, d in got if i is not bad)

        piped = client.batch(bucket, etl=[etl.name, gz.name])
        for b, name, member in keys[:10]:
            piped.add(name if b == bucket else b.object(name), archpath=member)
        assert [gzip.decompress(d) for _, d in piped.get()] == [content[k][::-1].upper() for k in keys[:10]]
    finally:
        etl.delete()
        gz.delete()


def _run_steps(ranks, steps=None):
    """Reads ``steps`` global steps (or to the end) with one DataLoader per rank, in lockstep,
    and returns the items in global order: step by step, rank 0's batch first."""
    iters = [iter(DataLoader(ds, batch_size=None, num_workers=workers)) for ds, workers in ranks]
    out, step = [], 0
    while steps is None or step < steps:
        batches = []
        for it in iters:
            try:
                batches.append([name for name, _ in next(it)])
            except StopIteration:
                batches.append(None)
        if all(b is None for b in batches):
            break
        for b in batches:
            out += b or []
        step += 1
    return out


def test_batch_dataset_global_order_resumes_on_another_topology(client, bucket):
    """2 ranks x 3 workers stopped mid-epoch, resumed as 3 ranks x 2 workers: exactly the
    remaining items, in the same global order as one process reading the whole epoch."""
    n = 257
    for i in range(n):
        bucket.object(f"go/{i:04d}").put(_value(i))

    def make(rank, world):
        ds = BatchDataset(bucket, prefix="go/", batch_size=5, seed=11, rank=rank, world_size=world,
                          with_name=True, global_order=True)
        ds.set_epoch(3)
        return ds

    whole = _run_steps([(make(0, 1), 2)])
    order = make(0, 1).epoch_order()
    assert whole == order  # one process: the epoch's order itself
    first = [make(r, 2) for r in range(2)]
    before = _run_steps([(ds, 3) for ds in first], steps=7)
    state = first[0].state_dict(steps=7)
    assert state["position"] == 7 * 2 * 5 == len(before)
    assert before == order[:70]
    resumed = [make(r, 3) for r in range(3)]
    for ds in resumed:
        ds.load_state_dict(state)
    after = _run_steps([(ds, 2) for ds in resumed])
    assert after == order[70:]
    # drop_last: every rank stops at the last full step.
    dl = [BatchDataset(bucket, prefix="go/", batch_size=5, seed=11, rank=r, world_size=3, with_name=True,
                       global_order=True, drop_last=True) for r in range(3)]
    for ds in dl:
        ds.set_epoch(3)
    assert _run_steps([(ds, 2) for ds in dl]) == order[:255]
    assert len({len(ds.global_steps()) for ds in dl}) == 1

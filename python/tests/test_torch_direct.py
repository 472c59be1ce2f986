"""Direct mode under the datasets: object reads never pass through the proxy (counted on the
proxy's /metrics), and a target that joins mid-epoch is picked up from the redirects of the
old owners (map refresh) without a failed sample."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid

import pytest

import torch  # installed by the test command (python[torch])
from torch.utils.data import DataLoader  # noqa: E402

from conftest import GRISTD, _playground  # noqa: E402
from gristmill import Client, ObjectNotFound, hrw  # noqa: E402
from gristmill.torch import ObjectDataset, ShardDataset  # noqa: E402
from shardutil import all_keys, make_shard, put_shards  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

PER_SHARD = 250


def _get_count(url: str) -> int:
    """grist_requests_total{op="get"} of the node at `url`."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('grist_requests_total{op="get"}'):
                return int(float(line.split()[-1]))
    return 0


def _target_urls(endpoint: str) -> dict:
    smap = Client(endpoint).cluster_map()
    return {tid: t["public_net"]["direct_url"] for tid, t in smap["tmap"].items()}


def test_direct_mode_sends_no_object_read_through_the_proxy(cluster, client):
    b = client.bucket(f"direct-{uuid.uuid4().hex[:8]}")
    b.create()
    try:
        names = put_shards(b, 12, PER_SHARD)
        for i in range(20):
            b.object(f"obj/{i:02d}").put(b"o%d" % i)
        direct = Client(cluster, direct=True)
        targets = _target_urls(cluster)
        proxy0 = _get_count(cluster)
        targets0 = sum(_get_count(u) for u in targets.values())

        ds = ShardDataset(direct.bucket(b.name), prefix="train/")
        keys = [k for batch in DataLoader(ds, batch_size=50, num_workers=3, persistent_workers=True)
                for k in batch["__key__"]]
        assert sorted(keys) == sorted(all_keys(12, PER_SHARD))
        objs = ObjectDataset(direct.bucket(b.name), prefix="obj/")
        assert sorted(x for batch in DataLoader(objs, batch_size=4, num_workers=2) for x in batch) == \
            sorted(b"o%d" % i for i in range(20))

        assert _get_count(cluster) == proxy0  # not one object GET at the proxy...
        assert sum(_get_count(u) for u in targets.values()) - targets0 == len(names) + 20  # ...all at targets

        # The same reads through the proxy are counted there (the counter does count).
        ds = ShardDataset(b, names=names[:3])
        assert len(list(ds)) == 3 * PER_SHARD
        assert _get_count(cluster) == proxy0 + 3
    finally:
        b.delete(missing_ok=True)


# ---- a target joins mid-epoch ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def elastic_cluster():
    """A private playground (tests here add targets to it) and a way to add targets."""
    procs = []
    tmp = tempfile.mkdtemp(prefix="gristmill-join-")

    def add_target(endpoint: str) -> str:
        before = set(_target_urls(endpoint))
        state = os.path.join(tmp, f"t{len(procs)}")
        with open(os.path.join(tmp, f"t{len(procs)}.log"), "wb") as log:
            procs.append(subprocess.Popen(
                [str(GRISTD), "target", "--listen", "127.0.0.1:0", "--state-dir", state,
                 "--join", endpoint, "--mountpath", os.path.join(state, "mp0")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            ))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert procs[-1].poll() is None, "the new target exited"
            smap = Client(endpoint).cluster_map()
            new = set(smap["tmap"]) - before
            if new:
                # Every target must have the new map before the old owners can redirect.
                try:
                    versions = [json.loads(urllib.request.urlopen(
                        f"{t['public_net']['direct_url']}/v1/daemon?what=smap", timeout=2).read())["version"]
                        for t in smap["tmap"].values()]
                except OSError:
                    versions = []
                if versions and min(versions) >= smap["version"]:
                    return new.pop()
            time.sleep(0.1)
        raise AssertionError("the new target did not join")

    with _playground() as endpoint:
        try:
            yield endpoint, add_target
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
            shutil.rmtree(tmp, ignore_errors=True)


def _moved(bucket, names, old_map, new_map):
    return [n for n in names
            if hrw.owner(old_map, bucket.uname(n))["daemon_id"] != hrw.owner(new_map, bucket.uname(n))["daemon_id"]]


def test_target_added_mid_epoch(elastic_cluster):
    """Workers read directly from targets; mid-epoch a target joins. Each worker's stale map
    sends it to the old owner, whose redirect makes the client drop its map; the epoch ends
    with every sample exactly once and nothing read through the proxy.

    The server has no rebalance yet (DESIGN §9), so the test moves the objects the new target
    now owns itself (re-PUTs them) while the loop is paused — what rebalance will do."""
    endpoint, add_target = elastic_cluster
    admin = Client(endpoint)
    b = admin.bucket(f"join-{uuid.uuid4().hex[:8]}")
    b.create()
    names = put_shards(b, 24, PER_SHARD)
    old_map = admin.cluster_map()
    ds = ShardDataset(Client(endpoint, direct=True).bucket(b.name), prefix="train/", seed=1)
    loader = DataLoader(ds, batch_size=10, num_workers=2, prefetch_factor=2)
    proxy0 = _get_count(endpoint)
    it = iter(loader)
    keys = []
    for _ in range(20):  # 100 samples into each worker's first shard; workers wait mid-shard
        keys += next(it)["__key__"]

    new_id = add_target(endpoint)
    new_map = admin.cluster_map()
    new_url = new_map["tmap"][new_id]["public_net"]["direct_url"]
    moved = _moved(b, names, old_map, new_map)
    assert moved, "no shard moved to the new target (HRW should move ~1/4)"
    for n in moved:  # stand-in for rebalance
        b.object(n).put(make_shard(int(n[-8:-4]), PER_SHARD))

    for batch in it:
        keys += batch["__key__"]
    assert len(keys) == len(set(keys)) and set(keys) == all_keys(24, PER_SHARD)
    assert _get_count(new_url) >= len(moved) - 2  # (the 2 shards open at the pause stay where they were)
    assert _get_count(endpoint) == proxy0


def test_target_added_mid_epoch_without_moving_objects(elastic_cluster):
    """The same without the test's stand-in: the server's rebalance moves the objects and a
    miss on the new owner is served from the previous one, so no sample fails."""
    endpoint, add_target = elastic_cluster
    admin = Client(endpoint)
    b = admin.bucket(f"join-{uuid.uuid4().hex[:8]}")
    b.create()
    names = put_shards(b, 24, PER_SHARD)
    old_map = admin.cluster_map()
    ds = ShardDataset(Client(endpoint, direct=True).bucket(b.name), prefix="train/", seed=2)
    it = iter(DataLoader(ds, batch_size=10, num_workers=2, prefetch_factor=2))
    keys = []
    for _ in range(20):
        keys += next(it)["__key__"]
    add_target(endpoint)
    assert _moved(b, names, old_map, admin.cluster_map())
    for batch in it:
        keys += batch["__key__"]
    assert len(keys) == len(set(keys)) and set(keys) == all_keys(24, PER_SHARD)


def test_shard_streams_survive_connection_cuts(cluster, client):
    """Every target's first shard response is cut mid-body: the readers resume with range
    requests and the epoch still yields each sample exactly once."""
    from relay import Relay

    b = client.bucket(f"cuts-{uuid.uuid4().hex[:8]}")
    b.create()
    relays = []
    try:
        put_shards(b, 6, PER_SHARD)
        smap = json.loads(json.dumps(client.cluster_map()))
        for t in smap["tmap"].values():
            r = Relay(t["public_net"]["direct_url"])
            r.inject(cuts=[100_000], methods={"GET"})
            t["public_net"]["direct_url"] = r.url
            relays.append(r)
        direct = Client(cluster, direct=True)
        direct._smap = smap  # object reads go to the targets through the relays
        ds = ShardDataset(direct.bucket(b.name), prefix="train/")
        keys = [k for batch in DataLoader(ds, batch_size=25, num_workers=2) for k in batch["__key__"]]
        assert len(keys) == len(set(keys)) and set(keys) == all_keys(6, PER_SHARD)
        ranged = [s for r in relays for s in r.requests("GET") if "Range" in s.headers]
        cut = sum(1 for r in relays if r.requests("GET"))
        assert cut and len(ranged) == cut  # one resume per target that served a shard
    finally:
        for r in relays:
            r.close()
        b.delete(missing_ok=True)


def _pid_listening_on(port: int) -> int:
    """The gristd process started with `--listen 127.0.0.1:<port>`."""
    want = f"127.0.0.1:{port}"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"target" in args and want.encode() in args:
            return int(pid)
    raise AssertionError(f"no target process listening on {want}")


def test_epoch_survives_a_target_killed_and_restarted(tmp_path):
    """copies = 2; mid-epoch a target is killed with SIGKILL (the playground restarts it): the
    epoch completes with every sample exactly once (client retries, resumed shard streams,
    replicas)."""
    import signal

    with _playground() as endpoint:
        admin = Client(endpoint)
        b = admin.bucket(f"kill-{uuid.uuid4().hex[:8]}")
        b.create()
        b.set_props(mirror={"copies": 2})
        put_shards(b, 12, PER_SHARD)
        ds = ShardDataset(Client(endpoint).bucket(b.name), prefix="train/", seed=3)
        it = iter(DataLoader(ds, batch_size=10, num_workers=2, prefetch_factor=2))
        keys = []
        for _ in range(10):
            keys += next(it)["__key__"]
        victim = next(iter(admin.cluster_map()["tmap"].values()))
        port = int(victim["public_net"]["daemon_port"])
        os.kill(_pid_listening_on(port), signal.SIGKILL)
        for batch in it:
            keys += batch["__key__"]
        assert len(keys) == len(set(keys)), "a sample was read twice"
        assert set(keys) == all_keys(12, PER_SHARD), "a sample was lost"

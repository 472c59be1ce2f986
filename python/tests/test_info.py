"""The SDK tells users how to reach the cluster over S3, what the cluster is made of and what a bucket holds."""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gristmill import Client


def test_s3_settings_for_playground(cluster):
    s = Client(cluster).s3_settings()
    assert s["anonymous"] is True
    assert (s["access_key"], s["secret_key"]) == ("gristmill", "gristmill-secret")
    assert s["endpoint"] == cluster


def test_module_prints_s3_endpoint_and_credentials(cluster):
    out = subprocess.run(
        [sys.executable, "-m", "gristmill", cluster],
        check=True, capture_output=True, text=True, cwd=Path(__file__).parent.parent,
    ).stdout
    assert f"S3 endpoint: {cluster}" in out
    assert "gristmill-secret" in out
    assert "3 targets" in out


def test_cluster_nodes_and_capacity_and_bucket_summary(cluster):
    """``Client.cluster()`` lists every node of the map with its state and the targets'
    mountpaths, and sums capacity once per file system; ``Bucket.summary()`` counts what the
    targets store (replicas included) and reports the copies setting."""
    from gristmill import BucketNotFound

    c = Client(cluster)
    info = c.cluster()
    smap = c.cluster_map()
    assert info.version == smap["version"] and info.primary == smap["proxy_si"]["daemon_id"]
    assert {n.id for n in info.targets} == set(smap["tmap"])
    assert {n.id for n in info.proxies} == set(smap["pmap"])
    assert all(n.up and n.error is None for n in info.nodes)
    for t in info.targets:
        assert t.mountpaths and all(mp["total"] > 0 and mp["used"] <= mp["total"] for mp in t.mountpaths)
    # The playground's mountpaths share this machine's file system: counted once.
    mp = info.targets[0].mountpaths[0]["path"]
    disk = shutil.disk_usage(mp)
    assert info.total == disk.total
    assert abs(info.available - disk.free) < 1 << 30  # other tests write meanwhile
    assert info.used == info.total - info.available

    b = c.bucket(f"summ-{uuid.uuid4().hex[:8]}")
    b.create()
    assert (b.summary().objects, b.summary().bytes) == (0, 0)
    for i in range(5):
        b.object(f"o{i}").put(os.urandom(1000 + i))
    s = b.summary()
    assert (s.bucket, s.objects, s.bytes, s.copies) == (f"ais://{b.name}", 5, 5010, 1)
    b.set_props(mirror={"enabled": True, "copies": 2}).wait()
    s = b.summary()
    assert (s.objects, s.bytes, s.copies) == (10, 10020, 2)
    b.delete()
    with pytest.raises(BucketNotFound):
        b.summary()

"""Direct mode: the client computes the owner by HRW and talks to targets itself."""

import copy
import os

import pytest

from gristmill import Client, ObjectNotFound, hrw


def test_server_placement_matches_hrw(client, bucket):
    smap = client.cluster_map()
    owners = set()
    for i in range(30):
        obj = bucket.object(f"placed/{i}")
        obj.put(b"x")  # through whatever route the client picks...
        want = hrw.owner(smap, bucket.uname(obj.name))["daemon_id"]
        assert obj.head().target_id == want  # ...the proxy's redirect lands on the HRW owner
        owners.add(want)
    assert len(owners) == 3


def test_direct_get_put_head_delete(cluster, client, bucket):
    direct = Client(cluster, direct=True)
    data = os.urandom(300_000)
    bucket.object("via-proxy").put(data)
    dobj = direct.bucket(bucket.name).object("via-proxy")
    assert dobj.get() == data
    assert dobj.get(byte_range=(5, 9)) == data[5:10]
    with dobj.get_stream(chunk_size=4096) as r:
        assert b"".join(r) == data
    owner = direct.owner(dobj.uname)["daemon_id"]
    p = dobj.head()
    assert p.target_id == owner and owner in p.location and p.size == len(data)
    direct.bucket(bucket.name).object("via-direct").put(b"direct!")
    assert bucket.object("via-direct").get() == b"direct!"
    dobj.delete()
    with pytest.raises(ObjectNotFound):
        dobj.get()


def test_direct_bypasses_proxy(client, bucket):
    """A direct client with a cached map works even when its proxy endpoint is unreachable."""
    bucket.object("d").put(b"direct data")
    smap = client.cluster_map()
    c = Client("http://127.0.0.1:9", direct=True, retries=0)
    c._smap = copy.deepcopy(smap)
    obj = c.bucket(bucket.name).object("d")
    assert obj.get() == b"direct data"
    assert obj.head().target_id == hrw.owner(smap, obj.uname)["daemon_id"]
    obj.put(b"new data")
    assert bucket.object("d").get() == b"new data"


def _wrong_map(smap, uname):
    """A copy of the map whose HRW owner for `uname` is not the real owner."""
    real = hrw.owner(smap, uname)["daemon_id"]
    for _ in range(10):
        bad = copy.deepcopy(smap)
        ids = sorted(bad["tmap"])
        digests = [bad["tmap"][i]["id_digest"] for i in ids]
        digests = digests[1:] + digests[:1]  # rotate digests between targets
        for i, d in zip(ids, digests):
            bad["tmap"][i]["id_digest"] = d
        if hrw.owner(bad, uname)["daemon_id"] != real:
            return bad, real
        smap = bad
    raise AssertionError("could not build a misleading map")


@pytest.mark.parametrize("kind", ["bytes", "file"])
def test_stale_map_put_follows_redirect(cluster, client, bucket, tmp_path, kind):
    """A PUT sent to the wrong target is redirected to the owner; the body is re-sent."""
    c = Client(cluster)
    obj = c.bucket(bucket.name).object(f"stale-{kind}")
    c._smap, real = _wrong_map(client.cluster_map(), obj.uname)
    data = os.urandom(200_000)
    if kind == "file":
        path = tmp_path / "f.bin"
        path.write_bytes(data)
        obj.put(path)
    else:
        obj.put(data)
    assert c._smap is None  # the redirect told the client its map was stale
    assert bucket.object(obj.name).get() == data
    assert bucket.object(obj.name).head().target_id == real

"""SDK robustness against a real cluster: endpoints and tokens from the environment, retries
with backoff (bounded), proxy failover, direct mode routing around an unreachable target,
streams that resume after a broken connection, fork/pickle safety. Faults come from a real
HTTP relay (tests/relay.py) in front of a real node."""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import pickle
import time

import pytest

from gristmill import (
    BucketExists,
    Client,
    ConnectionFailed,
    GristError,
    ObjectNotFound,
    RetryPolicy,
    ServiceUnavailable,
    TooManyRequests,
    hrw,
)
from relay import Relay, dead_url

FAST = RetryPolicy(attempts=4, backoff=0.01, max_backoff=0.05, deadline=10)


def _proxy_gets(endpoint: str, client: Client) -> int:
    """grist_requests_total{op="get"} on the proxy."""
    text = client._request("GET", f"{endpoint}/metrics").data.decode()
    for line in text.splitlines():
        if line.startswith('grist_requests_total{op="get"}'):
            return int(float(line.split()[-1]))
    return 0


def test_endpoint_and_token_from_environment(cluster, bucket, monkeypatch):
    bucket.object("env").put(b"from env")
    with Relay(cluster) as relay:
        monkeypatch.setenv("GRIST_ENDPOINT", relay.url)
        monkeypatch.setenv("GRIST_TOKEN", "tok-123")
        c = Client()
        assert c.endpoint == relay.url and c.token == "tok-123"
        assert c.bucket(bucket.name).object("env").get() == b"from env"
        seen = relay.requests("GET", "/v1/objects/")
        assert seen and all(s.headers.get("Authorization") == "Bearer tok-123" for s in seen)
        # An explicit token wins; AIS_ENDPOINT is honoured when GRIST_ENDPOINT is absent.
        monkeypatch.delenv("GRIST_ENDPOINT")
        monkeypatch.setenv("AIS_ENDPOINT", relay.url)
        c2 = Client(token="explicit")
        assert c2.endpoint == relay.url
        c2.cluster_map()
        assert relay.requests("GET", "/v1/cluster")[-1].headers.get("Authorization") == "Bearer explicit"


def test_no_token_no_authorization_header(cluster, monkeypatch):
    monkeypatch.delenv("GRIST_TOKEN", raising=False)
    monkeypatch.delenv("AIS_AUTHN_TOKEN", raising=False)
    with Relay(cluster) as relay:
        Client(relay.url).cluster_map()
        assert "Authorization" not in relay.requests()[-1].headers


def test_retries_503_then_succeeds(cluster, bucket, caplog):
    bucket.object("r").put(b"retried")
    with Relay(cluster) as relay:
        c = Client(relay.url, retry=FAST)
        relay.inject(statuses=[503, 502])
        with caplog.at_level(logging.INFO, logger="gristmill"):
            assert c.bucket(bucket.name).object("r").get() == b"retried"
        assert len(relay.requests("GET", "/v1/objects/")) == 3
    # Each retry is logged, with the answer that caused it.
    retries = [r.getMessage() for r in caplog.records if r.name == "gristmill" and "retry" in r.getMessage()]
    assert len(retries) == 2, retries
    assert "503; retry 1 of" in retries[0] and "502; retry 2 of" in retries[1]


def test_retries_are_bounded_by_attempts(cluster, bucket):
    with Relay(cluster) as relay:
        c = Client(relay.url, retry=RetryPolicy(attempts=3, backoff=0.01))
        relay.inject(statuses=[503] * 10)
        with pytest.raises(ServiceUnavailable) as ei:
            c.bucket(bucket.name).object("x").get()
        assert ei.value.status == 503 and ei.value.retryable
        assert len(relay.requests("GET")) == 3


def test_retries_are_bounded_by_time(cluster, bucket):
    with Relay(cluster) as relay:
        c = Client(relay.url, retry=RetryPolicy(attempts=1000, backoff=0.05, max_backoff=0.2, deadline=1.0))
        relay.inject(statuses=[504] * 1000)
        t = time.monotonic()
        with pytest.raises(ServiceUnavailable):
            c.bucket(bucket.name).object("x").get()
        assert time.monotonic() - t < 2.5
        assert 3 <= len(relay.requests("GET")) < 100


def test_429_honours_retry_after(cluster, bucket):
    bucket.object("slow").put(b"ok")
    with Relay(cluster) as relay:
        c = Client(relay.url, retry=RetryPolicy(attempts=3, backoff=0.01, max_backoff=2))
        relay.inject(statuses=[429], retry_after="0.5")
        t = time.monotonic()
        assert c.bucket(bucket.name).object("slow").get() == b"ok"
        assert time.monotonic() - t >= 0.5
        relay.inject(statuses=[429] * 5, retry_after="0")
        with pytest.raises(TooManyRequests):
            c.bucket(bucket.name).object("slow").get()


def test_post_is_not_retried(cluster):
    """Non-idempotent requests (bucket creation, job starts) are sent once."""
    with Relay(cluster) as relay:
        c = Client(relay.url, retry=FAST)
        relay.inject(statuses=[503, 503])
        with pytest.raises(ServiceUnavailable):
            c.bucket("never-created").create()
        assert len(relay.requests("POST")) == 1
        assert not c.bucket("never-created").exists()


def test_conditional_put_retried_after_503_not_after_502(cluster, bucket):
    """A conditional write goes again after 429/503 (not carried out) but not after a 502 (it
    may have been: a replay would fail on its own success)."""
    c = Client(cluster, retry=FAST)
    b = c.bucket(bucket.name)
    # PUTs go straight to the owner: put a relay in front of it.
    owner = c.owner(b.object("cond-retry").uname)["public_net"]["direct_url"]
    with Relay(owner) as relay:
        c.owner = lambda uname: {"public_net": {"direct_url": relay.url}}
        relay.inject(statuses=[503, 429])
        b.object("cond-retry").put(b"x", if_none_match="*")
        assert len(relay.requests("PUT")) == 3
        assert bucket.object("cond-retry").get() == b"x"
        relay.inject(statuses=[502])
        with pytest.raises(ServiceUnavailable):
            b.object("cond-retry").put(b"y", if_none_match="*")
        assert len(relay.requests("PUT")) == 4
        assert bucket.object("cond-retry").get() == b"x"


def test_unreplayable_body_is_not_retried(cluster, bucket):
    r, w = os.pipe()
    os.write(w, b"pipe data")
    os.close(w)
    relay, smap = _relay_owner(bucket, "pipe-obj", cluster)
    with relay, os.fdopen(r, "rb") as pipe:
        c = Client(cluster, retry=FAST, direct=True)
        c._smap = smap  # the PUT goes to the owner through the relay
        relay.inject(statuses=[503, 503])
        with pytest.raises(ServiceUnavailable):
            c.bucket(bucket.name).object("pipe-obj").put(pipe, size=9)
        assert len(relay.requests("PUT")) == 1
    relay, smap = _relay_owner(bucket, "bytes-obj", cluster)
    with relay:  # the same PUT from bytes is retried
        c = Client(cluster, retry=FAST, direct=True)
        c._smap = smap
        relay.inject(statuses=[503, 503])
        c.bucket(bucket.name).object("bytes-obj").put(b"bytes data")
        assert len(relay.requests("PUT")) == 3
    assert bucket.object("bytes-obj").get() == b"bytes data"


def _relay_owner(bucket, obj: str, cluster: str):
    """A relay in front of the target owning `obj`, and a copy of the cluster map in which that
    target advertises the relay: a direct client given the map reaches the owner through it."""
    smap = copy.deepcopy(Client(cluster).cluster_map())
    owner = hrw.owner(smap, bucket.uname(obj))
    relay = Relay(owner["public_net"]["direct_url"])
    owner["public_net"]["direct_url"] = relay.url
    return relay, smap


def test_failover_to_next_proxy(cluster, bucket, monkeypatch, caplog):
    bucket.object("fo").put(b"failover")
    dead = dead_url()
    c = Client([dead, cluster], retry=FAST)
    with caplog.at_level(logging.INFO, logger="gristmill"):
        assert c.bucket(bucket.name).object("fo").get() == b"failover"
    assert c.endpoint == cluster
    # The failover is logged as a warning naming both proxies.
    failovers = [r for r in caplog.records if r.name == "gristmill" and "failing over" in r.getMessage()]
    assert len(failovers) == 1 and failovers[0].levelno == logging.WARNING
    assert dead in failovers[0].getMessage() and cluster in failovers[0].getMessage()
    monkeypatch.setenv("GRIST_ENDPOINT", f"{dead_url()},{cluster}")
    c2 = Client(retry=FAST)
    assert len(c2.endpoints) == 2
    assert [b.name for b in c2.list_buckets()]  # works through the second proxy
    assert c2.endpoint == cluster


def test_all_proxies_down_raises_connection_failed():
    c = Client([dead_url(), dead_url()], retry=RetryPolicy(attempts=3, backoff=0.01))
    t = time.monotonic()
    with pytest.raises(ConnectionFailed) as ei:
        c.cluster_map()
    assert ei.value.retryable and ei.value.status == 0
    assert time.monotonic() - t < 5


def test_direct_mode_routes_around_unreachable_target(cluster, client, bucket, caplog):
    """A connection failure to the owner target refreshes the map and sends the request
    through the proxy."""
    bucket.object("around").put(b"still readable")
    c = Client(cluster, direct=True, retry=FAST)
    smap = copy.deepcopy(client.cluster_map())
    hrw.owner(smap, bucket.uname("around"))["public_net"]["direct_url"] = dead_url()
    c._smap = smap
    before = _proxy_gets(cluster, client)
    caplog.set_level(logging.DEBUG, logger="gristmill")
    assert c.bucket(bucket.name).object("around").get() == b"still readable"
    logged = [r.getMessage() for r in caplog.records if r.name == "gristmill"]
    assert any("unreachable" in m and "cluster map dropped" in m for m in logged), logged
    assert any("307 to " in m for m in logged), logged  # the proxy's redirect
    assert _proxy_gets(cluster, client) == before + 1  # the fallback went through the proxy
    fresh = c.cluster_map(refresh=False)
    assert fresh == client.cluster_map()  # refreshed: the real map again
    assert any(r.getMessage().startswith("cluster map v") for r in caplog.records)  # logged
    assert c.bucket(bucket.name).object("around").get() == b"still readable"
    assert _proxy_gets(cluster, client) == before + 1  # and direct again


def test_stream_resumes_after_connection_cut(cluster, client, bucket):
    data = os.urandom(3 * 1024 * 1024 + 17)
    bucket.object("cut").put(data)
    relay, smap = _relay_owner(bucket, "cut", cluster)
    with relay:
        c = Client(cluster, direct=True, retry=FAST)
        c._smap = smap
        relay.inject(cuts=[1_000_000, 1_000_000], methods={"GET"})  # at 1 MB and at 2 MB
        obj = c.bucket(bucket.name).object("cut")
        with obj.get_stream(chunk_size=256 * 1024) as r:
            got = b"".join(r)
            assert r.resumed == 2
        assert got == data
        gets = relay.requests("GET")
        assert len(gets) == 3
        assert "Range" not in gets[0].headers
        assert gets[1].headers["Range"].startswith("bytes=") and gets[1].headers["Range"].endswith("-")
        # A range read resumes within its range.
        relay.inject(cuts=[100_000], methods={"GET"})
        with obj.get_stream(byte_range=(1000, 1_500_000)) as r:
            assert r.read() == data[1000:1_500_001]
            assert r.resumed == 1
        # Without resume the cut surfaces as ConnectionFailed.
        relay.inject(cuts=[100_000], methods={"GET"})
        with pytest.raises(ConnectionFailed):
            with obj.get_stream(resume=False) as r:
                r.read()


def test_whole_get_retried_after_connection_cut(cluster, bucket):
    data = os.urandom(2_000_000)
    bucket.object("cut2").put(data)
    relay, smap = _relay_owner(bucket, "cut2", cluster)
    with relay:
        c = Client(cluster, direct=True, retry=FAST)
        c._smap = smap
        relay.inject(cuts=[500_000], methods={"GET"})
        assert c.bucket(bucket.name).object("cut2").get() == data
        # The retry went through the proxy, with the map refreshed: the relay saw one GET.
        assert len(relay.requests("GET")) == 1
        assert c.cluster_map(refresh=False) == Client(cluster).cluster_map()


def _child_get(c: Client, bucket_name: str, q) -> None:
    q.put((id(c._http), c.bucket(bucket_name).object("fork").get()))


def test_client_is_fork_and_pickle_safe(cluster, bucket):
    bucket.object("fork").put(b"forked")
    c = Client(cluster)
    assert c.bucket(bucket.name).object("fork").get() == b"forked"  # parent pool in use
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_get, args=(c, bucket.name, q))
    p.start()
    _, data = q.get(timeout=30)
    p.join(30)
    assert p.exitcode == 0 and data == b"forked"
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.bucket(bucket.name).object("fork").get() == b"forked"
    assert c2._http is not c._http and c2._smap == c._smap


def test_errors_pickle_and_survive_dataloader_reraise(bucket):
    with pytest.raises(ObjectNotFound) as ei:
        bucket.object("missing").get()
    e = pickle.loads(pickle.dumps(ei.value))
    assert type(e) is ObjectNotFound and e.status == 404 and e.message == ei.value.message
    # torch's ExceptionWrapper re-raises worker errors as `type(msg)`: the type must survive.
    again = ObjectNotFound("Caught ObjectNotFound in DataLoader worker process 0")
    assert isinstance(again, GristError) and again.status == 0
    with pytest.raises(BucketExists):
        bucket.create()

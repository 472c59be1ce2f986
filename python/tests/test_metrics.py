"""Metrics an operator can use (issue 19): after a mixed load — native and S3 requests, a cold
GET of an `ht://` origin, a copy job and an ETL — every node's `/metrics` passes
`promtool check metrics` (Debian's `prometheus` package) and carries the series issue 19 names;
then a real Prometheus server scrapes the playground and a PromQL query for the S3 GetObject
rate returns data. Byte counters count what moved: a chunked upload counts, a HEAD sends none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import uuid

import pytest
import requests

from conftest import _playground, http_origin
from gristmill import Client
from s3util import make_s3

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

UPPER = '''
def transform(data, path, args):
    return data.upper()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def origin():
    """An HTTP origin with 5 files (an `ht://` bucket's backend)."""
    with http_origin({f"f{i}": os.urandom(3000 + i) for i in range(5)}) as host:
        yield host


@pytest.fixture(scope="module")
def loaded(origin):
    """A playground after a mixed load; yields (proxy endpoint, [target urls])."""
    with _playground({"GRISTD_HT_ALLOW_PRIVATE": "true"}) as endpoint:
        c = Client(endpoint)
        b = c.bucket(f"met-{uuid.uuid4().hex[:8]}")
        b.create()
        for i in range(20):
            b.object(f"o{i}").put(os.urandom(1000 + i))
        for i in range(20):
            b.object(f"o{i}").get()
        s3 = make_s3(endpoint, type("C", (), {"access_key": "gristmill", "secret_key": "gristmill-secret"}))
        for i in range(10):
            s3.put_object(Bucket=b.name, Key=f"s3-{i}", Body=b"x" * 100)
            s3.get_object(Bucket=b.name, Key=f"s3-{i}")["Body"].read()
        s3.list_objects_v2(Bucket=b.name)
        remote = c.bucket(origin, provider="ht")
        for i in range(5):
            remote.object(f"f{i}").get()  # cold
            remote.object(f"f{i}").get()  # warm
        dst = c.bucket(f"met-copy-{uuid.uuid4().hex[:8]}")
        b.copy(dst).wait(timeout=60)
        etl = c.etl(f"up-{uuid.uuid4().hex[:6]}").init_code(UPPER)
        assert b.object("o1").get(etl=etl.name) == b.object("o1").get().upper()
        targets = [t["public_net"]["direct_url"] for t in c.cluster_map()["tmap"].values()]
        yield endpoint, targets, b.name
        etl.delete()


def _scrape(url: str) -> str:
    r = requests.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200
    return r.text


def _value(text: str, series: str) -> float:
    """The sum of every sample of `series` (a name, or a name with some labels `{a="b"}`)."""
    name, _, labels = series.partition("{")
    want = [kv for kv in labels.rstrip("}").split(",") if kv]
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(kv in line for kv in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_promtool_passes_on_every_node(loaded):
    endpoint, targets, _ = loaded
    for url in [endpoint, *targets]:
        text = _scrape(url)
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", \
            f"{url}: {r.stdout}{r.stderr}"
        # Every family is described.
        families = {m.group(1) for m in re.finditer(r"^# TYPE (\S+) ", text, re.M)}
        helped = {m.group(1) for m in re.finditer(r"^# HELP (\S+) ", text, re.M)}
        assert families and families <= helped


def test_the_series_issue_19_asks_for(loaded):
    endpoint, targets, _ = loaded
    proxy = _scrape(endpoint)
    assert _value(proxy, 'grist_requests_total{op="GetObject"}') >= 10
    assert _value(proxy, 'grist_requests_total{op="PutObject"}') >= 10
    assert _value(proxy, 'grist_requests_total{op="ListObjectsV2"}') >= 1
    assert _value(proxy, 'grist_node_info{role="proxy"') == 1
    assert _value(proxy, "process_resident_memory_bytes") > 0
    assert _value(proxy, "process_open_fds") > 0
    assert _value(proxy, "process_start_time_seconds") > 1.7e9
    t = "\n".join(_scrape(u) for u in targets)
    assert _value(t, 'grist_node_info{role="target"') == len(targets)
    assert _value(t, 'grist_cache_misses_total{provider="ht",reason="absent"}') == 5
    assert _value(t, 'grist_cache_hits_total{provider="ht"}') == 5
    assert _value(t, 'grist_cold_fills_total{provider="ht",result="ok"}') == 5
    assert _value(t, 'grist_cold_fill_bytes_total{provider="ht"}') == sum(3000 + i for i in range(5))
    assert _value(t, 'grist_backend_requests_total{provider="ht",op="get"}') >= 5
    assert _value(t, 'grist_backend_received_bytes_total{provider="ht"}') >= sum(3000 + i for i in range(5))
    assert _value(t, 'grist_backend_request_duration_seconds_count{provider="ht"') >= 5
    assert _value(t, 'grist_jobs_started_total{kind="copy-bck"}') >= 1
    assert _value(t, 'grist_jobs_ended_total{kind="copy-bck",state="finished"}') >= 1
    assert _value(t, 'grist_job_objects_total{kind="copy-bck",outcome="done"}') >= 30
    assert _value(t, 'grist_job_bytes_total{kind="copy-bck"}') > 0
    assert "grist_job_progress_objects{" in t and "grist_job_expected_objects{" in t
    assert _value(t, "grist_etl_calls_total") >= 1
    assert _value(t, "grist_etl_duration_seconds_count") >= 1
    assert _value(t, "grist_mountpath_capacity_bytes") > 0
    assert _value(t, "grist_mountpath_available_bytes") > 0
    assert _value(t, 'grist_requests_total{op="get"}') >= 20
    assert _value(t, 'grist_request_duration_seconds_count{op="get"}') >= 20


def test_bytes_count_what_moved(loaded):
    endpoint, targets, bucket = loaded
    text = lambda: "\n".join(_scrape(u) for u in targets)  # noqa: E731
    before = text()
    # A chunked upload has no Content-Length: its bytes still count (sent to the owner the
    # proxy redirects to: a generator cannot be sent twice).
    owner = requests.put(f"{endpoint}/v1/objects/{bucket}/chunked", allow_redirects=False).headers["Location"]
    r = requests.put(owner, data=iter([b"a" * 3000, b"b" * 2000]))
    assert r.status_code == 200, r.text
    assert requests.get(f"{endpoint}/v1/objects/{bucket}/chunked").content == b"a" * 3000 + b"b" * 2000
    # A HEAD sends no body.
    assert requests.head(f"{endpoint}/v1/objects/{bucket}/chunked", allow_redirects=True).status_code == 200
    after = text()
    put_in = _value(after, 'grist_request_body_bytes_total{op="put"}') - _value(before, 'grist_request_body_bytes_total{op="put"}')
    assert put_in >= 5000
    head_out = _value(after, 'grist_response_body_bytes_total{op="head"}') - _value(before, 'grist_response_body_bytes_total{op="head"}')
    assert head_out == 0


def test_prometheus_scrapes_the_playground(loaded, tmp_path):
    endpoint, targets, bucket = loaded
    port = _free_port()
    nodes = [urllib.parse.urlparse(u).netloc for u in [endpoint, *targets]]
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: gristmill\n    static_configs:\n"
        f"      - targets: {json.dumps(nodes)}\n")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s3 = make_s3(endpoint, type("C", (), {"access_key": "gristmill", "secret_key": "gristmill-secret"}))
        query = 'sum(rate(grist_requests_total{op="GetObject"}[10s]))'
        deadline = time.monotonic() + 90
        result = []
        while time.monotonic() < deadline:
            s3.get_object(Bucket=bucket, Key="s3-1")["Body"].read()
            try:
                r = requests.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": query}, timeout=5)
                result = r.json()["data"]["result"] if r.status_code == 200 else []
            except requests.ConnectionError:
                result = []
            if result and float(result[0]["value"][1]) > 0:
                break
            time.sleep(0.5)
        assert result and float(result[0]["value"][1]) > 0, f"no GetObject rate from Prometheus: {result}"
        up = requests.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": "up"}, timeout=5).json()
        assert sorted(float(x["value"][1]) for x in up["data"]["result"]) == [1.0] * len(nodes)
    finally:
        prom.terminate()
        prom.wait(timeout=20)


def test_grist_show_performance_under_load(loaded):
    """`grist show performance --count 2 --json` while clients GET from every target: two
    reports, every node in each, non-zero GET ops on every target."""
    import threading

    from conftest import GRISTD

    endpoint, targets, bucket = loaded
    c = Client(endpoint)
    names = [f"o{i}" for i in range(20)]
    stop = threading.Event()

    def load():
        b = c.bucket(bucket)
        while not stop.is_set():
            for n in names:
                b.object(n).get()

    workers = [threading.Thread(target=load) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        r = subprocess.run([str(GRISTD.parent / "grist"), "--json", "show", "performance", "--count", "2",
                            "--interval", "1"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "GRIST_ENDPOINT": endpoint})
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert r.returncode == 0, r.stderr
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(reports) == 2
    smap = c.cluster_map()
    for rep in reports:
        by_node = {n["node"]: n for n in rep["nodes"]}
        assert set(by_node) == set(smap["tmap"]) | set(smap["pmap"])
        for tid in smap["tmap"]:
            assert by_node[tid]["get_ops"] > 0, rep
            assert by_node[tid]["get_p50_s"] is not None
        assert by_node[next(iter(smap["pmap"]))]["role"] == "proxy"

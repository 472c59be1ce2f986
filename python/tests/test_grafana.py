"""The Grafana dashboard (`deploy/grafana/gristmill.json`, issue 19) is built on the series the
nodes export: the JSON is an importable dashboard (rows, panels with targets, unique ids, a
Prometheus data source variable), every panel query is valid PromQL (`promtool check rules`,
Debian's `prometheus` package, with Grafana's variables substituted), counters and histogram
buckets are only used inside rate(), and every metric a query names is a family some node of a
playground exports after a load that touches every area the dashboard shows (native and S3
requests and an error, cold and warm GETs of an `ht://` bucket, a failing backend, an LRU
eviction, a copy job, an ETL call and an ETL error).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests

from conftest import _playground, http_origin
from gristmill import Client
from s3util import make_s3

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "gristmill.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

ROWS = ["Overview", "Cache & backends", "Jobs", "Disks", "ETL", "Process"]

# PromQL words that are not metric names (functions are recognised by their "(").
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}
HIST_SUFFIXES = ("_bucket", "_sum", "_count")

FAILING_UPPER = '''
def transform(data, path, args):
    if data.startswith(b"BAD"):
        raise ValueError("refused")
    return data.upper()
'''


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _graph_panels(d: dict) -> list:
    """Every panel that is not a row (rows may also nest panels when collapsed)."""
    out = []
    for p in d["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def _exprs(d: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target, and of every query variable."""
    out = [(p["title"], t["expr"]) for p in _graph_panels(d) for t in p["targets"]]
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            assert m, f"variable {v['name']}: {q!r} is not label_values(<selector>, <label>)"
            out.append((f"variable {v['name']}", m.group(1)))
    return out


def _substitute(expr: str) -> str:
    """Grafana's variables as Prometheus would receive them: intervals as durations, every
    template variable as the All value `.*`."""
    expr = re.sub(r"\$\{?__rate_interval\}?|\$\{?__interval\}?|\$\{?__range\}?", "5m", expr)
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", ".*", expr)


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left after removing strings,
    label matchers, ranges, grouping lists and function names."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()", e):
        if m.group(1) not in KEYWORDS:
            names.add(m.group(1))
    return names


def _rated(expr: str) -> set[str]:
    """Metric names directly inside rate(), irate() or increase()."""
    return set(re.findall(r"\b(?:rate|irate|increase)\(\s*([A-Za-z_:][\w:]*)", expr))


def _promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    rules = {"groups": [{"name": "grafana", "rules": [
        {"record": f"gristmill:panel_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    f = tmp_path / "rules.yml"
    f.write_text(json.dumps(rules))  # JSON is YAML
    return subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True)


def _types(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def _resolve(name: str, types: dict[str, str]) -> str | None:
    """The family type a referenced name belongs to (a histogram's `_bucket`, `_sum` and
    `_count` belong to it), or None when no node exports it."""
    if name in types:
        return types[name]
    for s in HIST_SUFFIXES:
        base = name[: -len(s)]
        if name.endswith(s) and types.get(base) in ("histogram", "summary"):
            return types[base] + s
    return None


# ---------------------------------------------------------------- structure (no cluster needed)


def test_dashboard_structure():
    d = _dashboard()
    assert d["title"] and d["uid"] and 36 <= d["schemaVersion"] <= 41
    assert "id" not in d or d["id"] is None, "an exported dashboard id makes the import clash"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    inst = variables["instance"]
    assert inst["type"] == "query" and "label_values(grist_node_info" in json.dumps(inst["query"])
    assert inst["datasource"]["uid"] == "${datasource}"

    ids = [p["id"] for p in d["panels"]] + [q["id"] for p in d["panels"] for q in p.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids are not unique"
    assert [p["title"] for p in d["panels"] if p["type"] == "row"] == ROWS

    # Each row has panels under it; panels fit the 24-column grid and do not overlap.
    seen_rows, cells = [], set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))
        if p["type"] == "row":
            assert not p.get("collapsed") and not p.get("panels") and "targets" not in p
            seen_rows.append([])
        else:
            assert seen_rows, f"{p['title']} is above the first row"
            seen_rows[-1].append(p)
    assert all(seen_rows), "a row without panels"

    for p in _graph_panels(d):
        assert p["type"] in ("timeseries", "stat", "gauge", "bargauge", "table"), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], f"{p['title']} has no queries"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"]["uid"] == "${datasource}", p["title"]
            # Every query follows the dashboard's node selection.
            assert 'instance=~"$instance"' in t["expr"], f"{p['title']}: {t['expr']}"
            if "histogram_quantile" in t["expr"]:
                assert "_bucket{" in t["expr"] and re.search(r"by \([^)]*\ble\b", t["expr"]), t["expr"]


def test_every_query_is_valid_promql(tmp_path):
    exprs = [_substitute(e) for _, e in _exprs(_dashboard())]
    assert all("$" not in e for e in exprs), [e for e in exprs if "$" in e]
    r = _promtool_check(exprs, tmp_path)
    assert r.returncode == 0, f"promtool check rules:\n{r.stdout}{r.stderr}"
    assert f"SUCCESS: {len(exprs)} rules found" in r.stdout, r.stdout


def test_the_checks_can_fail(tmp_path):
    """The helpers reject what they should: promtool refuses broken PromQL, and the name
    extraction finds every selected metric (and nothing else)."""
    r = _promtool_check(['sum by (op) (rate(grist_requests_total{op="get"}[5m])'], tmp_path)
    assert r.returncode != 0
    e = _substitute('histogram_quantile(0.99, sum by (op, le) (rate(grist_request_duration_seconds_bucket'
                    '{job=~"$job", op="GetObject"}[$__rate_interval]) * on (job, instance) group_left () '
                    'grist_node_info{role="target"})) / ignoring (x) grist_nope_total offset 5m')
    assert _metric_names(e) == {"grist_request_duration_seconds_bucket", "grist_node_info", "grist_nope_total"}
    assert _rated(e) == {"grist_request_duration_seconds_bucket"}
    types = {"grist_request_duration_seconds": "histogram", "grist_node_info": "gauge"}
    assert _resolve("grist_request_duration_seconds_bucket", types) == "histogram_bucket"
    assert _resolve("grist_node_info_count", types) is None
    assert _resolve("grist_nope_total", types) is None


# ---------------------------------------------------------------- against a live playground


@pytest.fixture(scope="module")
def exported():
    """{family: type} over every node's /metrics after a load touching every dashboard area."""
    files = {f"f{i}": os.urandom(2000 + i) for i in range(3)}
    # grist_cache_bytes is published by each target's LRU loop (every check interval, not at
    # start): a 1 s interval publishes it within the test.
    env = {"GRISTD_HT_ALLOW_PRIVATE": "true", "GRISTD_SPACE_CHECK_INTERVAL": "1s"}
    with http_origin(files) as origin, _playground(env) as endpoint:
        c = Client(endpoint)
        b = c.bucket(f"graf-{uuid.uuid4().hex[:8]}")
        b.create()
        for i in range(6):
            b.object(f"o{i}").put(os.urandom(500 + i))
            b.object(f"o{i}").get()
        b.object("bad").put(b"BAD object")
        assert requests.get(f"{endpoint}/v1/objects/{b.name}/missing").status_code == 404
        s3 = make_s3(endpoint, type("C", (), {"access_key": "gristmill", "secret_key": "gristmill-secret"}))
        s3.put_object(Bucket=b.name, Key="s3", Body=b"x" * 100)
        s3.get_object(Bucket=b.name, Key="s3")["Body"].read()

        # Cold and warm GETs, then an LRU pass that must evict (quota 1 byte, nothing kept).
        remote = c.bucket(origin, provider="ht")
        for name in files:
            remote.object(name).get()
            remote.object(name).get()
        remote.set_props(lru={"quota": 1, "dont_evict_time": "0s"})
        r = requests.put(f"{endpoint}/v1/cluster", json={"action": "start", "value": {"kind": "lru", "force": True}})
        assert r.status_code == 200, r.text
        c.job(r.text.strip()).wait(timeout=30)

        # A backend that fails: an origin that has gone away (connection refused).
        with http_origin({"gone": b"x"}) as dead:
            dead_bucket = c.bucket(dead, provider="ht")
            dead_bucket.object("gone").head()
        with pytest.raises(Exception):
            dead_bucket.object("gone").get()

        b.copy(c.bucket(f"graf-copy-{uuid.uuid4().hex[:8]}")).wait(timeout=30)
        etl = c.etl(f"up-{uuid.uuid4().hex[:6]}").init_code(FAILING_UPPER)
        assert b.object("o1").get(etl=etl.name) == b.object("o1").get().upper()
        with pytest.raises(Exception):
            b.object("bad").get(etl=etl.name)

        smap = c.cluster_map()
        urls = [endpoint] + [t["public_net"]["direct_url"] for t in smap["tmap"].values()]
        deadline = time.monotonic() + 10
        while True:
            types: dict[str, str] = {}
            for url in urls:
                resp = requests.get(f"{url}/metrics", timeout=10)
                assert resp.status_code == 200
                types.update(_types(resp.text))
            if "grist_cache_bytes" in types or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        etl.delete()
    yield types


def test_every_query_uses_exported_series(exported):
    d = _dashboard()
    optional = set()
    # Disk busy time is read from the block device's sysfs stat: a data dir on tmpfs or
    # overlay has none, and the target leaves the series out.
    if os.major(os.stat(tempfile.gettempdir()).st_dev) == 0:
        optional.add("grist_mountpath_io_time_seconds_total")
    missing, misused, used = [], [], set()
    for title, expr in _exprs(d):
        names = _metric_names(_substitute(expr))
        assert names, f"{title}: no metric in {expr!r}"
        used |= names
        for n in sorted(names):
            if n not in optional and _resolve(n, exported) is None:
                missing.append(f"{title}: {n}")
        for n in _rated(expr):
            kind = _resolve(n, exported)
            if kind not in ("counter", "histogram_bucket", None):
                misused.append(f"{title}: rate() of {n} ({kind})")
    assert not missing, "series no node exports:\n" + "\n".join(missing)
    assert not misused, "\n".join(misused)
    # The dashboard covers every area the issue names.
    for family in ["grist_requests_total", "grist_errors_total", "grist_request_body_bytes_total",
                   "grist_response_body_bytes_total", "grist_request_duration_seconds_bucket",
                   "grist_cache_hits_total", "grist_cache_misses_total", "grist_cold_fill_bytes_total",
                   "grist_backend_requests_total", "grist_backend_errors_total",
                   "grist_backend_request_duration_seconds_bucket", "grist_jobs_running",
                   "grist_job_progress_objects", "grist_job_expected_objects",
                   "grist_mountpath_capacity_bytes", "grist_mountpath_available_bytes",
                   "grist_mountpath_io_time_seconds_total", "grist_etl_calls_total", "grist_etl_errors_total",
                   "grist_etl_duration_seconds_bucket", "process_cpu_seconds_total",
                   "process_resident_memory_bytes", "process_open_fds"]:
        assert family in used, f"the dashboard does not show {family}"

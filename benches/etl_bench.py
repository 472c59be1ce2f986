#!/usr/bin/env python3
"""ETL benchmark: the cost of the ETL path, measured side by side in one run.

1. Offline: objects/s of ``grist etl bucket`` with an identity transform (python runtime, and
   the per-object ``cat`` command runtime) vs ``copy-bck`` of the same bucket (no transform).
2. Inline: GET latency of 16 KiB objects with ``?etl_name=identity`` vs a plain GET, from one
   client, sequential (median and p99).

Starts its own ``gristd playground`` (1 proxy + 3 targets) on a free port and stops it.

    .venv/bin/python benches/etl_bench.py [--objects 2000] [--size 16384] [--bin-dir build/release]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import urllib3

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port_base(n=4):
    import random

    for _ in range(100):
        base = random.randint(20000, 40000)
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--latency-samples", type=int, default=500)
    ap.add_argument("--bin-dir", default="")
    args = ap.parse_args()
    bindir = args.bin_dir or next(
        d for d in (f"{REPO}/build/release", f"{REPO}/build/debug") if os.path.exists(f"{d}/gristd")
    )
    work = tempfile.mkdtemp(prefix="grist-etl-bench-")
    port = free_port_base()
    ep = f"http://127.0.0.1:{port}"
    log = open(f"{work}/playground.out", "wb")
    pg = subprocess.Popen(
        [f"{bindir}/gristd", "playground", "--data-dir", f"{work}/data", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    http = urllib3.PoolManager(maxsize=32)
    try:
        deadline = time.time() + 60
        while True:
            try:
                smap = json.loads(http.request("GET", f"{ep}/v1/cluster?what=smap").data)
                if len(smap.get("tmap", {})) >= 3:
                    break
            except Exception:
                pass
            if time.time() > deadline:
                raise RuntimeError("playground did not start")
            time.sleep(0.2)

        def req(method, path, body=None, **kw):
            r = http.request(method, f"{ep}{path}", body=body, redirect=True, **kw)
            if r.status >= 300:
                raise RuntimeError(f"{method} {path}: {r.status} {r.data[:300]!r}")
            return r

        req("POST", "/v1/buckets/src", json.dumps({"action": "create-bck"}))
        payload = os.urandom(args.size)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda i: req("PUT", f"/v1/objects/src/o-{i:06d}", payload), range(args.objects)))
        identity = "def transform(data, path, args):\n    return data\n"
        req("PUT", "/v1/etl", json.dumps({"name": "identity", "runtime": "python", "code": identity, "workers": 4}))
        req("PUT", "/v1/etl", json.dumps({"name": "cat", "runtime": "command", "command": ["cat"], "workers": 4}))

        def run_job(action, dst, extra):
            value = {"num-workers": 16, **extra}
            t0 = time.perf_counter()
            job = req("POST", f"/v1/buckets/src?bck_to=ais/@%23/{dst}/", json.dumps({"action": action, "value": value})).data.decode()
            while True:
                s = json.loads(req("GET", f"/v1/jobs/{job}").data)
                if s["state"] != "running":
                    break
                time.sleep(0.05)
            dt = time.perf_counter() - t0
            assert s["objects"] == args.objects and s["errors"] == 0, s
            return args.objects / dt

        rows = []
        copy = run_job("copy-bck", "dst-copy", {})
        py = run_job("etl-bck", "dst-py", {"id": "identity"})
        cmd = run_job("etl-bck", "dst-cmd", {"id": "cat"})
        rows.append(("offline copy-bck (no transform)", f"{copy:.0f} obj/s", "1.00"))
        rows.append(("offline etl-bck, python identity", f"{py:.0f} obj/s", f"{py / copy:.2f}"))
        rows.append(("offline etl-bck, command `cat` per object", f"{cmd:.0f} obj/s", f"{cmd / copy:.2f}"))

        def latency(query):
            out = []
            for i in range(args.latency_samples):
                t0 = time.perf_counter()
                r = http.request("GET", f"{ep}/v1/objects/src/o-{i % args.objects:06d}{query}", redirect=True)
                assert r.status == 200 and len(r.data) == args.size
                out.append((time.perf_counter() - t0) * 1000)
            out.sort()
            return statistics.median(out), out[int(len(out) * 0.99) - 1]

        latency("")  # warm connections and page cache
        plain = latency("")
        inline = latency("?etl_name=identity")
        rows.append((f"inline GET {args.size // 1024} KiB, plain", f"p50 {plain[0]:.2f} ms, p99 {plain[1]:.2f} ms", "1.00"))
        rows.append(
            (f"inline GET {args.size // 1024} KiB, ?etl_name=identity", f"p50 {inline[0]:.2f} ms, p99 {inline[1]:.2f} ms",
             f"+{inline[0] - plain[0]:.2f} ms p50"),
        )
        print(f"\nETL benchmark: {args.objects} objects of {args.size} B, binaries {bindir}\n")
        print("| row | result | vs baseline |\n|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} |")
    finally:
        os.killpg(pg.pid, signal.SIGTERM)
        try:
            pg.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(pg.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Shard benchmarks from ONE Python process (the way a training data loader reads):

1. get-batch vs one GET per sample: 16 KiB samples, read (a) one HTTP GET per sample through
   the proxy (307 to the owner), (b) one GET per sample straight to the owner (HRW computed by
   the client, as the SDK's direct mode does), (c) get-batch requests of --batch samples
   (`GET /v1/ml/moss`, one ordered tar stream, parsed with tarfile as it arrives), for plain
   objects and for members of shards (`archpath` items).
2. archpath ops/s: `GET ...?archpath=member` of 16 KiB members of indexed tars, one at a time
   and from --threads threads.
3. reshard MB/s: `grist archive gen-shards` input shards, then `grist reshard --wait` into
   shards of --reshard-size; input bytes / wall time of the job.

Starts its own `gristd playground` (1 proxy + 3 targets) from --bin-dir (default
build/release) on free ports unless --endpoint is given; stops it by pid and removes its data
directory (unless --keep). Prints a markdown
table; --json FILE also writes the raw numbers.

Usage: .venv/bin/python benches/shards_bench.py [--samples 10000] [--batch 1000] [--seconds 10]
       [--reshard-shards 50] [--bin-dir build/release] [--endpoint URL] [--json FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path

import urllib3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from gristmill import Client  # noqa: E402

SAMPLE = 16 * 1024


def free_base(n: int) -> int:
    for _ in range(200):
        base = random.randint(20000, 40000)
        ok = True
        for i in range(n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + i))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports")


def start_playground(bin_dir: Path) -> tuple[subprocess.Popen, str, str]:
    data = tempfile.mkdtemp(prefix="shards-bench-")
    base = free_base(4)
    endpoint = f"http://127.0.0.1:{base}"
    log = open(os.path.join(data, "playground.log"), "wb")
    proc = subprocess.Popen([str(bin_dir / "gristd"), "playground", "--data-dir", data, "--port", str(base),
                             "--targets", "3"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    http = urllib3.PoolManager()
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            smap = json.loads(http.request("GET", f"{endpoint}/v1/cluster?what=smap", timeout=2).data)
            if len(smap.get("tmap") or {}) == 3:
                return proc, endpoint, data
        except Exception:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"playground did not start; see {data}/playground.log")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)


def timed(seconds: float, step) -> tuple[int, float]:
    """Runs step() (returns samples done) until `seconds` pass; (samples, elapsed)."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += step()
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--reshard-shards", type=int, default=50)
    ap.add_argument("--reshard-samples", type=int, default=500)
    ap.add_argument("--reshard-sample-size", default="16KiB")
    ap.add_argument("--reshard-size", default="64MiB")
    ap.add_argument("--bin-dir", default=str(ROOT / "build" / "release"))
    ap.add_argument("--endpoint")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep the playground's data directory")
    args = ap.parse_args()

    proc, data_dir = None, None
    if args.endpoint:
        endpoint = args.endpoint
    else:
        proc, endpoint, data_dir = start_playground(Path(args.bin_dir))
        print(f"playground at {endpoint} (data in {data_dir})", file=sys.stderr)
    grist = Path(args.bin_dir) / "grist"
    results: dict = {"endpoint": endpoint, "samples": args.samples, "batch": args.batch}
    try:
        run(endpoint, grist, args, results)
    finally:
        if proc is not None:
            stop(proc)
        if data_dir and not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    rows = [
        ("GET per sample, via proxy (307)", results["get_proxy"], "samples/s"),
        ("GET per sample, direct to owner", results["get_direct"], "samples/s"),
        (f"get-batch of {args.batch} objects", results["batch_objects"], "samples/s"),
        (f"get-batch of {args.batch} shard members (archpath items)", results["batch_members"], "samples/s"),
        ("archpath GET, 1 thread", results["archpath_1"], "ops/s"),
        (f"archpath GET, {args.threads} threads", results["archpath_n"], "ops/s"),
        ("archpath GET, wrk 16 connections (server-side rate)", results.get("archpath_wrk", 0.0), "ops/s"),
        (f"reshard {results['reshard_input_mib']:.0f} MiB ({args.reshard_shards} shards) into {args.reshard_size}",
         results["reshard_mib_s"], "MiB/s"),
    ]
    print("\n| measurement | result | unit |\n|---|---:|---|")
    for name, value, unit in rows:
        print(f"| {name} | {value:,.0f} | {unit} |")
    best_single = max(results["get_proxy"], results["get_direct"])
    print(f"\nget-batch / best single-GET path: {results['batch_objects'] / best_single:.1f}× (objects), "
          f"{results['batch_members'] / best_single:.1f}× (shard members)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def run(endpoint: str, grist: Path, args, results: dict) -> None:
    http = urllib3.PoolManager(maxsize=64, retries=urllib3.Retry(total=2, redirect=5))
    client = Client(endpoint)
    bname = f"bench-{uuid.uuid4().hex[:8]}"
    bucket = client.bucket(bname)
    bucket.create()
    names = [f"samples/{i:06d}.bin" for i in range(args.samples)]
    payload = os.urandom(SAMPLE)
    print(f"PUT {args.samples} objects of 16 KiB and {args.samples // 200} shards...", file=sys.stderr)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: bucket.object(n).put(payload), names))
    shards = []
    for s in range(max(1, args.samples // 200)):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
            for m in range(200):
                ti = tarfile.TarInfo(f"{m:03d}.bin")
                ti.size = SAMPLE
                t.addfile(ti, io.BytesIO(payload))
        name = f"shards/s-{s:04d}.tar"
        bucket.object(name).put(buf.getvalue())
        shards.append(name)
    members = [(s, f"{m:03d}.bin") for s in shards for m in range(200)]
    rng = random.Random(7)

    # 1a/1b. One GET per sample.
    proxy_urls = [bucket.object(n).get_url() for n in names]
    direct_urls = [bucket.object(n).get_url(direct=True) for n in names]
    for key, urls in (("get_proxy", proxy_urls), ("get_direct", direct_urls)):
        order = list(range(len(urls)))
        rng.shuffle(order)
        pos = [0]

        def one(urls=urls, order=order, pos=pos) -> int:
            r = http.request("GET", urls[order[pos[0] % len(order)]], preload_content=True)
            assert r.status == 200 and len(r.data) == SAMPLE
            pos[0] += 1
            return 1

        n, el = timed(args.seconds, one)
        results[key] = n / el
        print(f"{key}: {n / el:,.0f} samples/s", file=sys.stderr)

    # 1c. get-batch.
    def batch_step(items) -> int:
        pick = rng.sample(range(len(items)), args.batch)
        req = {"in": [items[i] for i in pick], "strm": True}
        r = http.request("GET", f"{endpoint}/v1/ml/moss/{bname}", body=json.dumps(req),
                         headers={"content-type": "application/json"}, preload_content=False)
        assert r.status == 200, r.data
        got = 0
        with tarfile.open(fileobj=r, mode="r|") as t:
            for m in t:
                data = t.extractfile(m).read()
                assert len(data) == SAMPLE
                got += 1
        r.release_conn()
        assert got == args.batch
        return got

    obj_items = [{"objname": n} for n in names]
    n, el = timed(args.seconds, lambda: batch_step(obj_items))
    results["batch_objects"] = n / el
    print(f"batch_objects: {n / el:,.0f} samples/s", file=sys.stderr)
    mem_items = [{"objname": s, "archpath": m} for s, m in members]
    n, el = timed(args.seconds, lambda: batch_step(mem_items))
    results["batch_members"] = n / el
    print(f"batch_members: {n / el:,.0f} samples/s", file=sys.stderr)

    # 2. archpath ops/s.
    urls = [bucket.object(s).get_url() + f"&archpath={m}" for s, m in members]
    direct = [bucket.object(s).get_url(direct=True) + f"&archpath={m}" for s, m in members]

    def ap_step(urls=direct) -> int:
        r = http.request("GET", urls[rng.randrange(len(urls))])
        assert r.status == 200 and len(r.data) == SAMPLE
        return 1

    n, el = timed(args.seconds, ap_step)
    results["archpath_1"] = n / el
    counts = [0] * args.threads
    stop_at = time.perf_counter() + args.seconds

    def worker(k: int) -> None:
        local = random.Random(k)
        while time.perf_counter() < stop_at:
            r = http.request("GET", direct[local.randrange(len(direct))])
            assert r.status == 200
            counts[k] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    results["archpath_n"] = sum(counts) / (time.perf_counter() - t0)
    results["archpath_via_proxy_urls_example"] = urls[0]
    # Server-side rate, when wrk is installed: one member, 16 connections, straight to its owner.
    wrk = shutil.which("wrk")
    if wrk:
        out = subprocess.run([wrk, "-t2", "-c16", f"-d{max(3, int(args.seconds))}s", direct[0]],
                             capture_output=True, text=True)
        for line in out.stdout.splitlines():
            if line.startswith("Requests/sec:"):
                results["archpath_wrk"] = float(line.split()[1])
                results["archpath_wrk_cmd"] = f"wrk -t2 -c16 -d{max(3, int(args.seconds))}s <owner>/v1/objects/..?archpath="
    print(f"archpath: {results['archpath_1']:,.0f} ops/s (1 thread), {results['archpath_n']:,.0f} ops/s "
          f"({args.threads} threads)", file=sys.stderr)

    # 3. reshard MB/s.
    env = {**os.environ, "GRIST_ENDPOINT": endpoint}
    rb = f"rs-{uuid.uuid4().hex[:8]}"
    subprocess.run([str(grist), "bucket", "create", f"ais://{rb}"], env=env, check=True, capture_output=True)
    subprocess.run([str(grist), "archive", "gen-shards", f"ais://{rb}/in-{{0000..}}.tar", "--count",
                    str(args.reshard_shards), "--samples", str(args.reshard_samples), "--sample-size",
                    args.reshard_sample_size, "--exts", "jpg,cls,json"], env=env, check=True, capture_output=True)
    listing = client.bucket(rb).list_all_objects(props="name,size")
    input_bytes = sum(e.size for e in listing)
    t0 = time.perf_counter()
    out = subprocess.run([str(grist), "reshard", f"ais://{rb}", "--template",
                          f"in-{{0000..{args.reshard_shards - 1:04d}}}.tar", "--output", "out-{0000..}",
                          "--shard-size", args.reshard_size, "--algorithm", "shuffle", "--seed", "1",
                          "--wait", "--json"], env=env, capture_output=True, text=True)
    el = time.perf_counter() - t0
    assert out.returncode == 0, out.stdout + out.stderr
    results["reshard_input_mib"] = input_bytes / 2**20
    results["reshard_seconds"] = el
    results["reshard_mib_s"] = input_bytes / 2**20 / el
    print(f"reshard: {input_bytes / 2**20:.0f} MiB in {el:.1f}s", file=sys.stderr)
    client.close()


if __name__ == "__main__":
    main()

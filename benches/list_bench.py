#!/usr/bin/env python3
"""Listing at scale (issue 31): a `gristd playground` of N targets (one tiny mountpath each, one
proxy) holding M small objects, listed whole through the proxy in pages of P names.

Reports per page size: milliseconds per page, names listed per second, names the targets sent
the proxy per name listed (`grist_list_target_entries_total`; absent from binaries before it),
CPU of the proxy and of all targets per page, and the proxy's peak RSS (VmHWM).

With --before DIR the same data is listed by the binaries in DIR too, alternating with
--bin-dir's (the playground is stopped and started again on the same data directory between
them), --rounds times: an A/B of the listing code on one machine in one run.

With --prefill the bucket is filled with empty objects written straight into each stopped
target's mountpath by `build/release/examples/prefill_index` (the store's write path without
fsyncs, only the names each target owns): millions of objects in minutes rather than hours of
durable PUTs through the cluster. Build it first:
`cargo build --release -p gristmill-target --example prefill_index`.

Usage: benches/list_bench.py [--targets 30] [--objects 100000] [--pages 1000,10000]
                             [--bin-dir build/release] [--before DIR] [--rounds 2] [--out F]
                             [--prefill [--parallel 2]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import TICK, cpu_ticks, free_base, pids_of, request  # noqa: E402


def hwm_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return 0.0


def metric(ep: str, name: str) -> float | None:
    text = urllib.request.urlopen(f"{ep}/metrics", timeout=10).read().decode()
    values = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
              if not l.startswith("#") and l.split("{")[0].split(" ")[0] == name]
    return sum(values) if values else None


class Playground:
    def __init__(self, bin_dir: str, data: str, targets: int, port: int):
        self.ep = f"http://127.0.0.1:{port}"
        self.data = data
        self.log = open(os.path.join(os.path.dirname(data), "playground.out"), "a")
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "gristd"), "playground", "--targets", str(targets), "--proxies", "1",
             "--mountpaths-per-target", "1", "--data-dir", data, "--port", str(port)],
            stdout=self.log, stderr=subprocess.STDOUT,
            # Not a benchmark of space: refuse writes only on a really full disk.
            env={**os.environ, "GRISTD_OUT_OF_SPACE_WM": "100"})
        deadline = time.monotonic() + 600
        while True:
            try:
                m = json.loads(request("GET", f"{self.ep}/v1/daemon?what=smap", timeout=5))
                if len(m["tmap"]) == targets and self._answers(f"{self.ep}/v1/buckets"):
                    break
            except Exception:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the playground did not start (see {self.log.name})")
            time.sleep(0.5)
        self.proxy = pids_of(f"gristd proxy .*{data}/proxy-0")
        self.targets = pids_of(f"gristd target .*{data}/")

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            request("GET", url, timeout=5)
            return True
        except Exception:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def list_whole(pg: Playground, page: int, objects: int) -> dict:
    fetched0 = metric(pg.ep, "grist_list_target_entries_total")
    p0, t0 = cpu_ticks(pg.proxy), cpu_ticks(pg.targets)
    start = time.monotonic()
    pages, token, listed = 0, "", 0
    while True:
        body = {"action": "list", "value": {"pagesize": page, "continuation_token": token, "props": "name,size"}}
        got = json.loads(request("GET", f"{pg.ep}/v1/buckets/lst", body))
        pages += 1
        listed += len(got.get("entries") or [])
        token = got.get("continuation_token") or ""
        if not token:
            break
    took = time.monotonic() - start
    p1, t1 = cpu_ticks(pg.proxy), cpu_ticks(pg.targets)
    fetched1 = metric(pg.ep, "grist_list_target_entries_total")
    if listed != objects:
        sys.exit(f"listing returned {listed} of {objects}")
    return {
        "ms_per_page": 1e3 * took / pages,
        "names_per_s": listed / took,
        "fetched_per_name": None if fetched0 is None else (fetched1 - fetched0) / listed,
        "proxy_cpu_ms_per_page": 1e3 * (p1 - p0) / TICK / pages,
        "targets_cpu_ms_per_page": 1e3 * (t1 - t0) / TICK / pages,
        "proxy_hwm_mib": max(hwm_mib(p) for p in pg.proxy),
        "target_hwm_mib": max(hwm_mib(p) for p in pg.targets),
    }


def prefill(tool: str, smap: str, data: str, a: argparse.Namespace) -> None:
    """Each target's share of the bucket written into its mountpath, `a.parallel` at a time."""
    ids = set(json.load(open(smap))["tmap"])
    # The playground's layout: target-I/mp0, the node's id in target-I/node_id.
    dirs = {}
    for i in range(a.targets):
        state = os.path.join(data, f"target-{i}")
        ident = open(os.path.join(state, "node_id")).read().strip()
        assert ident in ids, f"{ident} is not in the map"
        dirs[ident] = os.path.join(state, "mp0")
    running: list[subprocess.Popen] = []
    for ident, mp in dirs.items():
        while len(running) >= a.parallel:
            running.pop(0).wait()
        running.append(subprocess.Popen([tool, "--smap", smap, "--target", ident, "--mountpath", mp, "--bucket", "lst",
                                         "--objects", str(a.objects), "--prefix", "o/"]))
    for p in running:
        if p.wait() != 0:
            sys.exit("prefill failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", type=int, default=30)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--pages", default="1000,10000")
    ap.add_argument("--bin-dir", default="build/release")
    ap.add_argument("--before", help="binaries to compare with (same data, alternating)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("--prefill", action="store_true",
                    help="write empty objects into the stopped targets' mountpaths instead of PUTs")
    ap.add_argument("--parallel", type=int, default=2, help="prefill processes at once")
    a = ap.parse_args()
    pages = [int(p) for p in a.pages.split(",")]
    systems = [("after", os.path.abspath(a.bin_dir))]
    if a.before:
        systems.insert(0, ("before", os.path.abspath(a.before)))
    d = tempfile.mkdtemp(prefix="grist-list.")
    data = os.path.join(d, "pg")
    port = free_base(a.targets + 4)
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        pg = Playground(systems[-1][1], data, a.targets, port)
        request("POST", f"{pg.ep}/v1/buckets/lst", {"action": "create-bck"})
        t = time.monotonic()
        if a.prefill:
            smap = os.path.join(d, "smap.json")
            with open(smap, "wb") as f:
                f.write(request("GET", f"{pg.ep}/v1/daemon?what=smap"))
            pg.stop()
            prefill(os.path.join(systems[-1][1], "examples", "prefill_index"), smap, data, a)
        else:
            subprocess.run([os.path.join(systems[-1][1], "grist-bench"), "--mode", "direct", "--endpoint", pg.ep,
                            "--bucket", "lst", "--objects", str(a.objects), "--size", "16B", "--prefix", "o/",
                            "--pct-put", "100", "--count", str(a.objects), "--workers", "32", "--interval", "0"],
                           check=True, stdout=subprocess.DEVNULL)
            pg.stop()
        print(f"filled {a.objects} objects in {time.monotonic() - t:.0f} s", file=sys.stderr)
        for r in range(a.rounds):
            order = systems if r % 2 == 0 else list(reversed(systems))
            for name, bins in order:
                pg = Playground(bins, data, a.targets, port)
                try:
                    list_whole(pg, pages[0], a.objects)  # warm the index pages and connections
                    for page in pages:
                        res = list_whole(pg, page, a.objects)
                        results.setdefault((name, page), []).append(res)
                        print(f"round {r + 1} {name} page {page}: {json.dumps(res)}", file=sys.stderr)
                finally:
                    pg.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)

    def med(name: str, page: int, key: str) -> float | None:
        vals = [x[key] for x in results[(name, page)] if x[key] is not None]
        return statistics.median(vals) if vals else None

    def fmt(v: float | None, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    lines = [f"| {a.targets} targets, {a.objects:,} objects, one proxy | " + " | ".join(n for n, _ in systems) + " |",
             "|---|" + "---|" * len(systems)]
    for page in pages:
        for key, label, spec in [("ms_per_page", "ms per page", ".1f"), ("names_per_s", "names listed per second", ",.0f"),
                                 ("fetched_per_name", "names sent by targets per name listed", ".2f"),
                                 ("proxy_cpu_ms_per_page", "proxy CPU per page, ms", ".1f"),
                                 ("targets_cpu_ms_per_page", "targets' CPU per page, ms", ".1f"),
                                 ("proxy_hwm_mib", "proxy peak RSS, MiB", ".0f"),
                                 ("target_hwm_mib", "largest target peak RSS, MiB", ".0f")]:
            lines.append(f"| pages of {page:,}: {label} | " + " | ".join(fmt(med(n, page, key), spec) for n, _ in systems) + " |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        open(a.out, "w").write(table + "\n")


if __name__ == "__main__":
    main()

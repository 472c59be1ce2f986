#!/usr/bin/env python3
"""A cluster of many targets on one machine (issue 31): a `gristd playground` of N targets (one
tiny mountpath each) and 3 proxies, measured while it runs:

- formation: time until the map has all N targets;
- keepalives: CPU of the primary proxy and of all targets over an idle window;
- a map change reaching every node: one more target joins (a process of its own); the time
  until the primary's map has it and until every node's map does (each node polled);
- the share of objects that move: M small objects, the join's rebalance (its job's moved count
  against 1/(N+1)) and its duration (objects moved per second);
- a listing page: the whole bucket listed through the proxy, pages of 1,000 (every page asks
  every target), milliseconds per page;
- failure detection: the joined target killed with SIGKILL; time until the primary's map marks
  it (a flag) or drops it.

Prints a markdown table (and writes it to --out). Release binaries from --bin-dir.

Usage: benches/scale.py [--targets 100] [--objects 20000] [--bin-dir build/release] [--out F]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def get(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def request(method: str, url: str, body: dict | None = None, timeout: float = 60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def free_base(count: int) -> int:
    """A port such that it and the next count-1 are free."""
    for _ in range(1000):
        base = random.randint(20000, 60000 - count)
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    sys.exit("no free port range")


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait(what: str, check, timeout: float, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = check()
            if v:
                return v
        except Exception:
            pass
        time.sleep(every)
    sys.exit(f"timed out: {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", type=int, default=100)
    ap.add_argument("--objects", type=int, default=20000)
    ap.add_argument("--idle", type=float, default=20, help="seconds of the idle (keepalive) window")
    ap.add_argument("--bin-dir", default="build/release")
    ap.add_argument("--out")
    a = ap.parse_args()
    gristd = os.path.abspath(os.path.join(a.bin_dir, "gristd"))
    bench = os.path.abspath(os.path.join(a.bin_dir, "grist-bench"))
    d = tempfile.mkdtemp(prefix="grist-scale.")
    base = free_base(a.targets + 4)
    ep = f"http://127.0.0.1:{base}"
    rows: list[tuple[str, str]] = []
    procs: list[subprocess.Popen] = []
    try:
        t0 = time.monotonic()
        log = open(os.path.join(d, "playground.out"), "w")
        procs.append(subprocess.Popen(
            [gristd, "playground", "--targets", str(a.targets), "--proxies", "3",
             "--mountpaths-per-target", "1", "--data-dir", os.path.join(d, "pg"), "--port", str(base)],
            stdout=log, stderr=subprocess.STDOUT))
        smap = wait("the map has every target",
                    lambda: (m := get(f"{ep}/v1/daemon?what=smap")) and len(m["tmap"]) == a.targets and m,
                    600, 0.5)
        rows.append(("cluster formed (playground start to N targets in the map)", f"{time.monotonic() - t0:.1f} s"))
        targets = pids_of(f"gristd target .*{d}/pg/")
        primary = pids_of(f"gristd proxy .*{d}/pg/proxy-0")
        time.sleep(5)  # let the joins' rebalances and first keepalives settle

        # Keepalives: an idle window.
        p0, t0c, w0 = cpu_ticks(primary), cpu_ticks(targets), time.monotonic()
        time.sleep(a.idle)
        p1, t1c, w1 = cpu_ticks(primary), cpu_ticks(targets), time.monotonic()
        span = w1 - w0
        rows.append(("primary proxy CPU, idle (keepalives from every node)", f"{100 * (p1 - p0) / TICK / span:.1f} % of a core"))
        rows.append(("all targets' CPU, idle", f"{100 * (t1c - t0c) / TICK / span:.1f} % of a core ({1e3 * (t1c - t0c) / TICK / span / a.targets:.2f} ms/s per target)"))
        rss = 0
        for p in targets:
            try:
                rss += int(next(l for l in open(f"/proc/{p}/status") if l.startswith("VmRSS")).split()[1])
            except (OSError, StopIteration):
                pass
        rows.append(("target RSS, idle (mean)", f"{rss / max(1, len(targets)) / 1024:.1f} MiB"))

        # Objects.
        request("POST", f"{ep}/v1/buckets/scale", {"action": "create-bck"})
        subprocess.run([bench, "--mode", "direct", "--endpoint", ep, "--bucket", "scale", "--objects", str(a.objects),
                        "--size", "1KiB", "--prefix", "s/", "--pct-put", "100", "--count", str(a.objects),
                        "--workers", "16", "--interval", "0"], check=True, stdout=subprocess.DEVNULL)

        # A listing through the proxy, pages of 1,000.
        t = time.monotonic()
        pages, token, listed = 0, "", 0
        while True:
            body = {"action": "list", "value": {"pagesize": 1000, "continuation_token": token, "props": "name"}}
            page = json.loads(request("GET", f"{ep}/v1/buckets/scale", body))
            pages += 1
            listed += len(page.get("entries") or [])
            token = page.get("continuation_token") or ""
            if not token:
                break
        took = time.monotonic() - t
        if listed != a.objects:
            sys.exit(f"listing returned {listed} of {a.objects}")
        rows.append((f"listing {a.objects} objects, pages of 1,000", f"{1e3 * took / pages:.0f} ms per page ({pages} pages)"))

        # A map change: one more target joins.
        nodes = [n["public_net"]["direct_url"] for n in smap["tmap"].values()] + \
                [n["public_net"]["direct_url"] for n in smap["pmap"].values()]
        extra = os.path.join(d, "extra")
        os.makedirs(os.path.join(extra, "mp0"))
        xlog = open(os.path.join(extra, "log"), "w")
        t = time.monotonic()
        joiner = subprocess.Popen([gristd, "target", "--listen", "127.0.0.1:0", "--state-dir", extra, "--join", ep,
                                   "--mountpath", os.path.join(extra, "mp0")], stdout=xlog, stderr=subprocess.STDOUT)
        procs.append(joiner)
        new = wait("the primary's map has the new target",
                   lambda: (m := get(f"{ep}/v1/daemon?what=smap")) and len(m["tmap"]) == a.targets + 1 and m, 120, 0.01)
        at_primary = time.monotonic() - t
        version = new["version"]

        def reached(url: str) -> float:
            wait(f"{url} has map {version}", lambda: get(f"{url}/v1/daemon?what=smap")["version"] >= version, 120, 0.01)
            return time.monotonic() - t

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            times = sorted(pool.map(reached, nodes))
        rows.append(("a join: in the primary's map", f"{1e3 * at_primary:.0f} ms"))
        rows.append((f"a join: in every node's map ({len(nodes)} nodes, median / last)",
                     f"{1e3 * times[len(times) // 2]:.0f} / {1e3 * times[-1]:.0f} ms"))

        # Its rebalance.
        job = wait("the join's rebalance finished",
                   lambda: (j := get(f"{ep}/v1/jobs/rb{version}")) and j["state"] == "finished" and j, 600, 0.2)
        moved = job["objects"] - job.get("skipped", 0)
        share = moved / a.objects
        rows.append(("objects moved by the join", f"{moved} of {a.objects} = {share:.4f} (1/(N+1) = {1 / (a.targets + 1):.4f}, ratio {share * (a.targets + 1):.2f})"))
        started, ended = job.get("start_ns", 0), job.get("end_ns", 0)
        if started and ended > started:
            secs = (ended - started) / 1e9
            rows.append(("the join's rebalance", f"{secs:.2f} s, {moved / secs:.0f} objects/s"))

        # Failure detection: the joined target killed.
        joiner_id = next(k for k in new["tmap"] if k not in smap["tmap"])
        t = time.monotonic()
        joiner.send_signal(signal.SIGKILL)

        def marked():
            m = get(f"{ep}/v1/daemon?what=smap")
            n = m["tmap"].get(joiner_id)
            return n is None or n["flags"] != 0

        wait("the primary notices the killed target", marked, 300, 0.05)
        rows.append(("failure detection (SIGKILL to flagged in the primary's map)", f"{time.monotonic() - t:.1f} s"))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(d, ignore_errors=True)
    table = f"| {a.targets} targets, 3 proxies, one host | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    print(table)
    if a.out:
        open(a.out, "w").write(table + "\n")


if __name__ == "__main__":
    main()

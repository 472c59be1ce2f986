#!/usr/bin/env python3
"""Memory of the walks over every object (issue 31: "rebalance/scrub memory flat from 1 M to
10 M objects"): one target holding M empty objects of a native bucket, written straight into its
stopped mountpath by `build/release/examples/prefill_index` (as `list_bench.py --prefill` does),
then two phases, each with the target's peak RSS reset first (`echo 5 > /proc/PID/clear_refs`):

- scrub: a scrub job of the bucket (every record read, every data file opened and checked);
- rebalance: a second target joins (a process of its own) and the first sends it its share,
  about half the objects (the sender's memory is reported).

Each phase runs to its end or for --seconds at most (the job is then aborted: a 10 M rebalance
moves ~5 M objects, which at ~2,000 objects/s is 40 minutes). Reported per phase:
objects done, seconds, rate, the target's VmRSS when it started, its VmHWM at 30 s, 60 s,
120 s, 240 s ... and at the end; growth is the end's VmHWM minus the start's VmRSS.

For 10 M objects put the work directory on a file system of its own (--dir), for example a
loop-mounted ext4 image, and pass --keep: removing 10 M files takes longer than making the file
system again.

Usage: benches/walk_memory.py --objects 1000000 [--seconds 300] [--bin-dir build/release]
                              [--dir DIR] [--keep] [--reuse WORKDIR] [--phases scrub,rebalance] [--out F]
Build first: cargo build --release -p gristmill-daemon -p gristmill-target --example prefill_index
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from list_bench import Playground, prefill  # noqa: E402
from scale import free_base, get, request, wait  # noqa: E402


def status_kib(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def watch(ep: str, job: str, pid: int, seconds: float) -> dict:
    """Samples the job and the target's memory until the job ends or `seconds` pass."""
    start, marks, next_mark, s = time.monotonic(), [], 30.0, {}
    while True:
        try:
            s = get(f"{ep}/v1/jobs/{job}")
        except Exception:
            pass
        elapsed = time.monotonic() - start
        while elapsed >= next_mark:
            marks.append((next_mark, status_kib(pid, "VmHWM") / 1024))
            next_mark *= 2
        if s.get("state") in ("finished", "aborted", "failed") or elapsed >= seconds:
            break
        time.sleep(0.5)
    return {
        "state": s.get("state"),
        "objects": s.get("objects", 0),
        "seconds": time.monotonic() - start,
        "hwm_at": marks,
        "hwm_end": status_kib(pid, "VmHWM") / 1024,
        "counters": s.get("counters"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=300, help="longest a phase is watched")
    ap.add_argument("--bin-dir", default="build/release")
    ap.add_argument("--dir", help="where the work directory goes (default: the temp dir)")
    ap.add_argument("--keep", action="store_true", help="leave the work directory (and its objects)")
    ap.add_argument("--reuse", help="a work directory a --keep run left: its objects, no prefill")
    ap.add_argument("--phases", default="scrub,rebalance")
    ap.add_argument("--out")
    a = ap.parse_args()
    a.targets, a.parallel = 1, 1  # for list_bench.prefill
    bins = os.path.abspath(a.bin_dir)
    gristd = os.path.join(bins, "gristd")
    d = os.path.abspath(a.reuse) if a.reuse else tempfile.mkdtemp(prefix="grist-walk.", dir=a.dir)
    data = os.path.join(d, "pg")
    smap = os.path.join(d, "smap.json")
    if a.reuse:
        a.keep = True
        port = int(next(iter(json.load(open(smap))["pmap"].values()))["public_net"]["daemon_port"])
    else:
        port = free_base(8)
    rows = []
    procs: list[subprocess.Popen] = []
    pg = None
    try:
        if not a.reuse:
            pg = Playground(bins, data, 1, port)
            request("POST", f"{pg.ep}/v1/buckets/lst", {"action": "create-bck"})
            with open(smap, "wb") as f:
                f.write(request("GET", f"{pg.ep}/v1/daemon?what=smap"))
            pg.stop()
            t = time.monotonic()
            prefill(os.path.join(bins, "examples", "prefill_index"), smap, data, a)
            print(f"prefilled {a.objects} objects in {time.monotonic() - t:.0f} s", file=sys.stderr)
        t = time.monotonic()
        pg = Playground(bins, data, 1, port)
        print(f"started on them in {time.monotonic() - t:.0f} s", file=sys.stderr)
        pid = pg.targets[0]
        # The map the playground finds is the one it stopped with: the target serves (and
        # registers) only once its startup scan has read every record.
        list_one = {"action": "list", "value": {"pagesize": 1, "props": "name"}}
        wait("the target serves", lambda: json.loads(request("GET", f"{pg.ep}/v1/buckets/lst", list_one)).get("entries"),
             1800, 1)
        print(f"serving after {time.monotonic() - t:.0f} s", file=sys.stderr)
        time.sleep(5)

        def phase(name: str, start_job) -> None:
            open(f"/proc/{pid}/clear_refs", "w").write("5")
            rss = status_kib(pid, "VmRSS") / 1024
            # A target refuses jobs (503) until its startup scan has read every record.
            t = time.monotonic()
            job = wait(f"{name} starts", start_job, 1800, 2)
            if time.monotonic() - t > 5:
                print(f"{name} started after {time.monotonic() - t:.0f} s", file=sys.stderr)
                open(f"/proc/{pid}/clear_refs", "w").write("5")
                rss = status_kib(pid, "VmRSS") / 1024
            r = watch(pg.ep, job, pid, a.seconds)
            if r["state"] not in ("finished", "aborted", "failed"):
                try:  # cut off: not running beside the next phase
                    request("DELETE", f"{pg.ep}/v1/jobs/{job}")
                except Exception as e:
                    print(f"aborting {job}: {e}", file=sys.stderr)
            r.update(phase=name, rss_start=rss)
            print(json.dumps(r), file=sys.stderr)
            rows.append(r)

        for name in a.phases.split(","):
            if name == "scrub":
                phase("scrub", lambda: request("PUT", f"{pg.ep}/v1/cluster", {
                    "action": "start", "value": {"kind": "scrub", "bck": "ais://lst", "no_repair": True}}).decode())
            elif name == "rebalance":
                def join() -> str:
                    before = get(f"{pg.ep}/v1/daemon?what=smap")
                    extra = os.path.join(d, "extra")
                    os.makedirs(os.path.join(extra, "mp0"))
                    log = open(os.path.join(extra, "log"), "w")
                    procs.append(subprocess.Popen(
                        [gristd, "target", "--listen", "127.0.0.1:0", "--state-dir", extra, "--join", pg.ep,
                         "--mountpath", os.path.join(extra, "mp0")], stdout=log, stderr=subprocess.STDOUT))
                    new = wait("the new target is in the map",
                               lambda: (m := get(f"{pg.ep}/v1/daemon?what=smap")) and len(m["tmap"]) == 2 and m,
                               120, 0.05)
                    assert new["version"] > before["version"]
                    job = f"rb{new['version']}"
                    wait("the rebalance started", lambda: get(f"{pg.ep}/v1/jobs/{job}"), 60, 0.05)
                    return job
                phase("rebalance", join)
            else:
                sys.exit(f"unknown phase {name}")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        if pg is not None:
            pg.stop()
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)

    out = [f"| phase ({a.objects:,} objects) | objects done | seconds | objects/s | VmRSS at start MiB "
           f"| VmHWM MiB at 30/60/120/240… s | VmHWM at the end MiB | growth MiB |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ended = "" if r["state"] == "finished" else f" (cut off, {r['state']})"
        marks = " / ".join(f"{h:.0f}" for _, h in r["hwm_at"]) or "–"
        out.append(f"| {r['phase']}{ended} | {r['objects']:,} | {r['seconds']:.0f} | {r['objects'] / r['seconds']:.0f} "
                   f"| {r['rss_start']:.1f} | {marks} | {r['hwm_end']:.1f} | {r['hwm_end'] - r['rss_start']:+.1f} |")
    table = "\n".join(out)
    print(table)
    if a.out:
        open(a.out, "w").write(table + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Samples/s of PyTorch loaders over Gristmill vs webdataset reading the same tars from local disk.

Starts its own `gristd playground` (1 proxy + 3 targets) on free ports in a temp dir, writes
WebDataset shards (each sample = `<key>.bin` of the sample size + `<key>.cls`) to local disk,
PUTs the same files into a bucket, and times epochs through
`torch.utils.data.DataLoader(num_workers=W, persistent_workers=True, batch_size=64)` after a
warm-up epoch (worker start-up and cold caches are excluded; the local files and the targets'
files are both in the page cache, so this compares the data paths, not the disks). Rounds
alternate between the rows, so a machine's load drift hits every row alike. Rows:

  local-wds      webdataset.WebDataset(<local tar paths>)                       (the baseline)
  local-tarfile  gristmill.torch.samples_from_tar over the local files, same worker split
                 (our parser without the network: separates loader overhead from the data path)
  grist-direct   gristmill.torch.ShardDataset, Client(direct=True): GETs straight to targets
  grist-proxy    gristmill.torch.ShardDataset through the proxy (one 307 per shard)
  wds-http       webdataset.WebDataset(<target URLs>) (curl, direct)
  grist-shuffled   ShardDataset(shuffle=True): the shard order shuffled per epoch (the default)
  grist-interleave ShardDataset(shuffle=True, interleave=8): block shuffle across 8 open shards
  grist-buffer     ShardDataset(shuffle=True, shuffle_buffer=1000): a webdataset-style buffer
  grist-streams    ShardDataset(shuffle=True, streams=8, interleave=2): canonical streams (the
                   order that resumes on any topology) with a block shuffle in each stream
  batch-split      BatchDataset over the shards' .bin members, 64 per get-batch request, each
                   rank/worker its slice of the order (global_order=False)
  batch-global     the same with global_order=True (the order of world-size-independent resume)

Prints a table with samples/s, MiB/s and the ratio to local-wds (medians of --rounds epochs).

Usage: .venv/bin/python benches/torch_bench.py [--gristd PATH] [--workers 4] [--rounds 3]
           [--mib 256] [--sizes 16,128] [--json FILE]
Needs the torch extra (`pip install -e "python[torch]"`) and curl.
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
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402,F401
import webdataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from gristmill import Client  # noqa: E402
from gristmill.torch import BatchDataset, ShardDataset, samples_from_tar  # noqa: E402

BATCH = 64
warnings.filterwarnings("ignore", message="This DataLoader will create")  # 4 workers on 2 CPUs


def free_base_port(n: int) -> int:
    for _ in range(200):
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
    raise RuntimeError("no free port range")


def start_playground(gristd: str, data_dir: str):
    base = free_base_port(4)
    endpoint = f"http://127.0.0.1:{base}"
    log = open(os.path.join(data_dir, "playground.out"), "wb")
    proc = subprocess.Popen([gristd, "playground", "--data-dir", os.path.join(data_dir, "cluster"),
                             "--port", str(base), "--targets", "3"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gristd playground exited; see {data_dir}/playground.out")
        try:
            with urllib.request.urlopen(f"{endpoint}/v1/cluster?what=smap", timeout=2) as r:
                if len(json.loads(r.read()).get("tmap") or {}) == 3:
                    return proc, endpoint
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("playground not ready")


def stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def write_shards(directory: Path, sample_kib: int, total_mib: int, shards: int) -> list:
    per_shard = max(1, total_mib * 1024 // sample_kib // shards)
    rnd = random.Random(sample_kib)
    block = rnd.randbytes(sample_kib * 1024)
    paths = []
    for s in range(shards):
        path = directory / f"shard-{s:04d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per_shard):
                key = f"s{s:04d}-{i:06d}"
                for ext, data in (("bin", i.to_bytes(8, "big") + block[8:]), ("cls", str(i % 1000).encode())):
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(data)
                    tar.addfile(ti, io.BytesIO(data))
        paths.append(path)
    return paths, per_shard


def as_list(batch):
    return batch


class LocalTars(torch.utils.data.IterableDataset):
    """The local files through the same tar parser as ShardDataset, split over workers alike."""

    def __init__(self, paths):
        self.paths = [str(p) for p in paths]

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, n = (info.id, info.num_workers) if info else (0, 1)
        for p in self.paths[w::n]:
            with open(p, "rb") as f:
                yield from samples_from_tar(io.BufferedReader(f, 1 << 20))


def make_loader(dataset, workers: int) -> DataLoader:
    # BatchDataset yields whole batches (one get-batch request each).
    batch_size = None if isinstance(dataset, BatchDataset) else BATCH
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers, persistent_workers=True,
                      collate_fn=as_list, prefetch_factor=4)


def time_epoch(dataset, loader, epoch: int, expect: int) -> float:
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(epoch)
    t = time.perf_counter()
    n = sum(len(b) for b in loader)
    dt = time.perf_counter() - t
    if n != expect:
        raise AssertionError(f"{n} samples, expected {expect}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_bin = ROOT / "build" / "debug" / "gristd"
    ap.add_argument("--gristd", default=os.environ.get("GRISTD_BIN", str(default_bin)))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256, help="data per sample size (MiB)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--sizes", default="16,128", help="sample sizes in KiB")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if shutil.which("curl") is None:
        sys.exit("needs curl (webdataset reads http URLs with it)")

    work = tempfile.mkdtemp(prefix="torch-bench-")
    proc, endpoint = start_playground(args.gristd, work)
    results = []
    try:
        admin = Client(endpoint)
        for kib in (int(x) for x in args.sizes.split(",")):
            local_dir = Path(work) / f"local-{kib}k"
            local_dir.mkdir()
            paths, per_shard = write_shards(local_dir, kib, args.mib, args.shards)
            expect = per_shard * len(paths)
            bucket = admin.bucket(f"bench-{kib}k")
            bucket.create(exist_ok=True)
            names = []
            for p in paths:
                bucket.object(p.name).put(p)
                names.append(p.name)
            direct = Client(endpoint, direct=True)
            urls = [direct.bucket(bucket.name).object(n).get_url(direct=True) for n in names]
            members = [(n, f"s{s:04d}-{i:06d}.bin") for s, n in enumerate(names) for i in range(per_shard)]
            rows = {
                "local-wds": webdataset.WebDataset([str(p) for p in paths], shardshuffle=False,
                                                   workersplitter=webdataset.split_by_worker),
                "local-tarfile": LocalTars(paths),
                "grist-direct": ShardDataset(direct.bucket(bucket.name), names=names, shuffle=False),
                "grist-proxy": ShardDataset(Client(endpoint).bucket(bucket.name), names=names, shuffle=False),
                "wds-http": webdataset.WebDataset(urls, shardshuffle=False,
                                                  workersplitter=webdataset.split_by_worker),
                "grist-shuffled": ShardDataset(direct.bucket(bucket.name), names=names, shuffle=True),
                "grist-interleave": ShardDataset(direct.bucket(bucket.name), names=names, shuffle=True,
                                                 interleave=8),
                "grist-buffer": ShardDataset(direct.bucket(bucket.name), names=names, shuffle=True,
                                             shuffle_buffer=1000),
                "grist-streams": ShardDataset(direct.bucket(bucket.name), names=names, shuffle=True,
                                              streams=8, interleave=2),
                "batch-split": BatchDataset(direct.bucket(bucket.name), names=members, batch_size=BATCH),
                "batch-global": BatchDataset(direct.bucket(bucket.name), names=members, batch_size=BATCH,
                                             global_order=True),
            }
            loaders = {name: make_loader(ds, args.workers) for name, ds in rows.items()}
            for name, ds in rows.items():  # warm-up epoch: workers start, caches fill
                time_epoch(ds, loaders[name], 0, expect)
            times = {name: [] for name in rows}
            for r in range(1, args.rounds + 1):  # rounds alternate loaders, so drift hits all
                for name, ds in rows.items():
                    times[name].append(time_epoch(ds, loaders[name], r, expect))
            medians = {}
            for name in rows:
                medians[name] = statistics.median(times[name])
                print(f"  {kib:>4} KiB {name:<16} {expect / medians[name]:>10.0f} samples/s  "
                      f"(epochs: {', '.join(f'{t:.2f}s' for t in times[name])})", flush=True)
            del loaders
            base = medians["local-wds"]
            for name, t in medians.items():
                results.append({
                    "sample_kib": kib, "loader": name, "samples": expect, "seconds": t,
                    "samples_per_s": expect / t, "mib_per_s": expect * kib / 1024 / t,
                    "ratio_vs_local": base / t,
                })
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"gristd: {args.gristd}; {args.workers} DataLoader workers, batch {BATCH}, "
          f"{os.cpu_count()} CPUs, median of {args.rounds} epochs")
    print(f"{'sample':>7} {'loader':<16} {'samples/s':>10} {'MiB/s':>8} {'vs local-wds':>13}")
    for r in results:
        print(f"{r['sample_kib']:>5}Ki {r['loader']:<16} {r['samples_per_s']:>10.0f} "
              f"{r['mib_per_s']:>8.0f} {r['ratio_vs_local']:>12.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

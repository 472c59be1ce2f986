#!/usr/bin/env python3
"""Checkpoint save/load MB/s: ``gristmill.torch.checkpoint`` (native API, chunked upload and
range reads) against s3torchconnector's ``S3Checkpoint`` writing to and reading from the same
cluster through Gristmill's own S3 API, in one run on one machine.

Starts its own ``gristd playground`` (1 proxy + 3 targets), builds a state dict of ``--mib``
MiB (float32 tensors of 64 MiB), then alternates rounds: each row saves the state dict to a new
object and loads it back (``torch.load(map_location="cpu")``), timed separately; medians of
``--rounds``. The S3 client gets the proxy's S3 endpoint (path style) and the key a cluster
with auth off accepts. Rows:

  grist   gristmill.torch.checkpoint.save / load              (native API, direct to targets)
  s3tc    s3torchconnector.S3Checkpoint writer / reader        (S3 API, through the proxy)
  dcp     torch.distributed.checkpoint with gristmill.dcp's GristmillStorageWriter/Reader
  s3dcp   torch.distributed.checkpoint with s3torchconnector.dcp's S3StorageWriter/Reader
          (S3 API; both writers with thread_count=4, one process, no process group)

Usage: .venv/bin/python benches/checkpoint_bench.py [--gristd PATH] [--mib 1024] [--rounds 3] [--json FILE]
Needs the torch extra and s3torchconnector (`pip install s3torchconnector`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

import torch  # noqa: E402

from gristmill import Client  # noqa: E402
from gristmill.torch import checkpoint  # noqa: E402
from torch_bench import start_playground, stop  # noqa: E402


def state_dict(mib: int) -> dict:
    g = torch.Generator().manual_seed(1)
    per = 64 << 20
    return {f"layer{i}.weight": torch.randn(per // 4, generator=g) for i in range(max(1, mib // 64))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gristd", default=str(ROOT / "build/release/gristd"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch.distributed.checkpoint as dcp
    from s3torchconnector import S3Checkpoint, S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import S3FileSystem, S3StorageReader, S3StorageWriter

    from gristmill.dcp import GristmillStorageReader, GristmillStorageWriter

    tmp = tempfile.mkdtemp(prefix="grist-ckpt-bench-")
    proc, endpoint = start_playground(args.gristd, tmp)
    try:
        client = Client(endpoint)
        bucket = client.bucket("ckpt")
        bucket.create(exist_ok=True)
        os.environ.update(AWS_ACCESS_KEY_ID="gristmill", AWS_SECRET_ACCESS_KEY="gristmill-secret")
        s3 = S3Checkpoint(region="us-east-1", endpoint=endpoint,
                          s3client_config=S3ClientConfig(force_path_style=True))
        state = state_dict(args.mib)
        size = sum(t.numel() * t.element_size() for t in state.values())

        def grist(i):
            uri = f"ais://ckpt/grist-{i}.pt"
            t = time.perf_counter()
            checkpoint.save(state, uri, client=client)
            saved = time.perf_counter() - t
            t = time.perf_counter()
            back = checkpoint.load(uri, client=client, map_location="cpu", weights_only=True)
            loaded = time.perf_counter() - t
            assert torch.equal(back["layer0.weight"], state["layer0.weight"])
            return saved, loaded

        def s3tc(i):
            uri = f"s3://ckpt/s3tc-{i}.pt"
            t = time.perf_counter()
            with s3.writer(uri) as w:
                torch.save(state, w)
            saved = time.perf_counter() - t
            t = time.perf_counter()
            with s3.reader(uri) as r:
                back = torch.load(r, map_location="cpu", weights_only=True)
            loaded = time.perf_counter() - t
            assert torch.equal(back["layer0.weight"], state["layer0.weight"])
            return saved, loaded

        def s3_fs(**kw):
            # S3StorageWriter/Reader take no endpoint: their file system gets a client that has one.
            s3_client = S3Client("us-east-1", endpoint=endpoint,
                                 s3client_config=S3ClientConfig(force_path_style=True))
            return S3FileSystem("us-east-1", s3_client=s3_client, **kw)

        def fresh_copy():
            return {k: torch.empty_like(v) for k, v in state.items()}

        def grist_dcp(i):
            uri = f"ais://ckpt/dcp-{i}"
            t = time.perf_counter()
            dcp.save(state, storage_writer=GristmillStorageWriter(uri, client=client, thread_count=4))
            saved = time.perf_counter() - t
            back = fresh_copy()
            t = time.perf_counter()
            dcp.load(back, storage_reader=GristmillStorageReader(uri, client=client))
            loaded = time.perf_counter() - t
            assert torch.equal(back["layer0.weight"], state["layer0.weight"])
            return saved, loaded

        def s3_dcp(i):
            uri = f"s3://ckpt/s3dcp-{i}"
            writer = S3StorageWriter("us-east-1", uri, thread_count=4)
            writer.fs = s3_fs()
            t = time.perf_counter()
            dcp.save(state, storage_writer=writer)
            saved = time.perf_counter() - t
            reader = S3StorageReader("us-east-1", uri)
            reader.fs = s3_fs(reader_constructor=reader._reader_constructor)
            back = fresh_copy()
            t = time.perf_counter()
            dcp.load(back, storage_reader=reader)
            loaded = time.perf_counter() - t
            assert torch.equal(back["layer0.weight"], state["layer0.weight"])
            return saved, loaded

        rows = {"grist": grist, "s3tc": s3tc, "dcp": grist_dcp, "s3dcp": s3_dcp}
        times = {k: ([], []) for k in rows}
        for r in range(args.rounds):
            order = list(rows) if r % 2 == 0 else list(reversed(rows))  # who goes first alternates
            for name in order:
                s, l = rows[name](r)
                times[name][0].append(s)
                times[name][1].append(l)
        result = {}
        print(f"checkpoint of {size >> 20} MiB, median of {args.rounds} rounds ({args.gristd})")
        print(f"{'row':6} {'save MB/s':>10} {'load MB/s':>10}")
        for name, (saves, loads) in times.items():
            sv, ld = size / statistics.median(saves) / 1e6, size / statistics.median(loads) / 1e6
            result[name] = {"save_mb_s": round(sv, 1), "load_mb_s": round(ld, 1)}
            print(f"{name:6} {sv:10.1f} {ld:10.1f}")
        for ours, theirs in [("grist", "s3tc"), ("dcp", "s3dcp")]:
            g, b = result[ours], result[theirs]
            print(f"{ours} / {theirs}: save {g['save_mb_s'] / b['save_mb_s']:.2f}x, "
                  f"load {g['load_mb_s'] / b['load_mb_s']:.2f}x")
        if args.json:
            Path(args.json).write_text(json.dumps({"mib": size >> 20, **result}, indent=2))
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

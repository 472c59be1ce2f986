"""Helpers for the torch tests: tiny WebDataset shards made with tarfile and PUT into a bucket,
and the process body of the two-rank gloo test (importable by spawned children)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Dict, List

from gristmill import Bucket, Client


def key_of(shard: int, i: int) -> str:
    return f"s{shard:03d}/x{i:04d}"


def payload(key: str) -> bytes:
    return key.encode() * 2


def make_shard(shard: int, samples: int) -> bytes:
    """A tar with `samples` samples, each `<key>.bin` (payload(key)) and `<key>.cls` (i % 10)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            key = key_of(shard, i)
            for ext, data in (("bin", payload(key)), ("cls", str(i % 10).encode())):
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(data)
                ti.mtime = 1700000000
                tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def put_shards(bucket: Bucket, shards: int, samples: int, prefix: str = "train/shard-") -> List[str]:
    names = []
    for s in range(shards):
        name = f"{prefix}{s:04d}.tar"
        bucket.object(name).put(make_shard(s, samples))
        names.append(name)
    return names


def all_keys(shards: int, samples: int) -> set:
    return {key_of(s, i) for s in range(shards) for i in range(samples)}


def check_sample(sample: Dict) -> None:
    assert sample["bin"] == payload(sample["__key__"]), sample["__key__"]


def gloo_rank_main(rank: int, world: int, init: str, endpoint: str, bucket: str, template: str,
                   out_dir: str) -> None:
    """One rank of the two-process test: joins a gloo group on loopback, builds a ShardDataset
    *without* rank arguments, reads one epoch with 2 DataLoader workers, writes the keys."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from gristmill.torch import ShardDataset

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        ds = ShardDataset(Client(endpoint).bucket(bucket), template=template, seed=7)
        assert (ds.rank, ds.world_size) == (rank, world)
        ds.set_epoch(3)
        keys = [k for batch in DataLoader(ds, batch_size=50, num_workers=2) for k in batch["__key__"]]
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(keys, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()

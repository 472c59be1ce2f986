"""Other loaders reading Gristmill shards: `webdataset` over plain HTTP URLs (through the
proxy's redirect, or straight at the owning targets) and the `aistore` 2.0.0 SDK's own PyTorch
datasets, unmodified."""

from __future__ import annotations

import uuid

import pytest

import torch  # noqa: F401  (installed by the test command)
import webdataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from gristmill import Client  # noqa: E402
from gristmill.torch import ShardDataset  # noqa: E402
from shardutil import all_keys, check_sample, put_shards  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SHARDS, PER_SHARD = 10, 40


@pytest.fixture(scope="module")
def wds_bucket(client):
    b = client.bucket(f"wds-{uuid.uuid4().hex[:8]}")
    b.create()
    put_shards(b, SHARDS, PER_SHARD)
    yield b
    b.delete(missing_ok=True)


def _strip(sample):
    return {k: v for k, v in sample.items() if k in ("__key__", "bin", "cls")}


def _ours(bucket):
    ds = ShardDataset(bucket, template="train/shard-{0000..0009}.tar", shuffle=False)
    return [_strip(s) for s in ds]


def test_webdataset_reads_gristmill_urls(cluster, wds_bucket):
    base = f"{cluster}/v1/objects/{wds_bucket.name}/train/shard-{{0000..0009}}.tar"
    ours = _ours(wds_bucket)
    assert len(ours) == SHARDS * PER_SHARD
    # http URLs with a brace range (webdataset runs `curl -L`: the proxy's 307 is followed).
    got = [_strip(s) for s in webdataset.WebDataset(base, shardshuffle=False)]
    assert got == ours
    # `pipe:` form, as webdataset's docs show for object stores.
    got = [_strip(s) for s in webdataset.WebDataset(f"pipe:curl -s -f -L '{base}'", shardshuffle=False)]
    assert got == ours
    # Straight at the owning targets (no proxy hop), URLs from the SDK.
    direct = Client(cluster, direct=True).bucket(wds_bucket.name)
    urls = [direct.object(f"train/shard-{i:04d}.tar").get_url(direct=True) for i in range(SHARDS)]
    assert all(not u.startswith(cluster) for u in urls)
    got = [_strip(s) for s in webdataset.WebDataset(urls, shardshuffle=False)]
    assert got == ours
    # ... and in DataLoader workers, split by webdataset's own node/worker splitters.
    wds = webdataset.WebDataset(urls, shardshuffle=False, nodesplitter=webdataset.split_by_node,
                                workersplitter=webdataset.split_by_worker)
    keys = [s["__key__"] for s in DataLoader(wds, batch_size=None, num_workers=2)]
    assert sorted(keys) == sorted(all_keys(SHARDS, PER_SHARD))


def test_aistore_shard_reader_reads_gristmill_shards(cluster, wds_bucket):
    from aistore.pytorch import AISShardReader
    from aistore.sdk import Client as AisClient

    ab = AisClient(cluster).bucket(wds_bucket.name)
    reader = AISShardReader(bucket_list=ab, prefix_map={ab: "train/"})
    # (Not list(reader): AISShardReader.__len__ is broken in aistore 2.0.0 itself — it reads
    # `Object.bucket`, which that SDK's Object does not have.)
    samples = [s for s in reader]
    assert len(samples) == SHARDS * PER_SHARD
    ours = _ours(wds_bucket)
    # It keys samples by base name (no directory) and yields them shard by shard, in order.
    assert [(k, c["bin"], c["cls"]) for k, c in samples] == \
        [(s["__key__"].split("/")[-1], s["bin"], s["cls"]) for s in ours]
    # With DataLoader workers it splits shards over workers (islice): each sample once.
    got = [c["bin"] for _, c in DataLoader(reader, batch_size=None, num_workers=2)]
    assert sorted(got) == sorted(s["bin"] for s in ours)


def test_aistore_iter_dataset_reads_gristmill_objects(cluster, wds_bucket):
    from aistore.pytorch import AISIterDataset
    from aistore.sdk import Client as AisClient

    ab = AisClient(cluster).bucket(wds_bucket.name)
    ds = AISIterDataset(ais_source_list=ab, prefix_map={ab: "train/shard-000"})
    got = [(name, data) for name, data in ds]
    assert [n for n, _ in got] == [f"train/shard-{i:04d}.tar" for i in range(SHARDS)]
    for name, data in got:
        assert data == wds_bucket.object(name).get()
    assert len(ds) == SHARDS
    loaded = sorted(n for n, _ in DataLoader(ds, batch_size=None, num_workers=2))
    assert loaded == [f"train/shard-{i:04d}.tar" for i in range(SHARDS)]


def test_our_samples_match_webdataset_decoding_of_the_same_files(wds_bucket, tmp_path):
    """The same shard, through ShardDataset and webdataset from local disk: same samples."""
    for i in (0, 1):
        wds_bucket.object(f"train/shard-{i:04d}.tar").get_to_file(tmp_path / f"{i}.tar")
    local = [_strip(s) for s in webdataset.WebDataset([str(tmp_path / "0.tar"), str(tmp_path / "1.tar")],
                                                      shardshuffle=False)]
    ours = [_strip(s) for s in ShardDataset(wds_bucket, names=["train/shard-0000.tar", "train/shard-0001.tar"],
                                            shuffle=False)]
    assert local == ours
    for s in ours:
        check_sample(s)

"""gristmill.torch against a real cluster with real torch (CPU): map-style objects, tar shards
split exactly once over ranks × DataLoader workers, epoch shuffling, resume mid-epoch."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import socket
import tarfile
import uuid

import pytest

import torch  # installed by the test command (python[torch])
from torch.utils.data import DataLoader  # noqa: E402

import webdataset  # noqa: E402

from gristmill import Client, ObjectNotFound  # noqa: E402
from gristmill.torch import ObjectDataset, ShardDataset, samples_from_tar  # noqa: E402
from shardutil import all_keys, check_sample, gloo_rank_main, put_shards  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SHARDS, PER_SHARD = 40, 250
TEMPLATE = "train/shard-{0000..0039}.tar"


@pytest.fixture(scope="module")
def shard_bucket(client):
    b = client.bucket(f"torch-{uuid.uuid4().hex[:10]}")
    b.create()
    put_shards(b, SHARDS, PER_SHARD)
    b.object("train/README").put(b"not a shard, and not under the template")
    yield b
    b.delete(missing_ok=True)


def _metric(endpoint: str, op: str) -> int:
    text = Client(endpoint)._request("GET", f"{endpoint}/metrics").data.decode()
    for line in text.splitlines():
        if line.startswith(f'grist_requests_total{{op="{op}"}}'):
            return int(float(line.split()[-1]))
    return 0


def _epoch_keys(ds, workers=3, batch_size=32, loader=None):
    if loader is None:
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers)
    keys = []
    for batch in loader:
        for i, k in enumerate(batch["__key__"]):
            keys.append(k)
            assert batch["bin"][i] == k.encode() * 2
    return keys


# ---- the tar → sample grouping ------------------------------------------------------------------

def _tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            if data is None:
                ti.type = tarfile.DIRTYPE
                tar.addfile(ti)
            else:
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_samples_from_tar_groups_like_webdataset(tmp_path):
    members = [
        ("__meta__", b"skipped"), ("dir", None), ("dir/0001.JPG", b"j1"), ("dir/0001.cls", b"1"),
        ("dir/0001.seg.png", b"p1"), ("noext", b"dropped"), ("dir/0002.jpg", b"j2"),
        ("0002.jpg", b"other dir, other key"), ("dir/0001.txt", b"key again, not consecutive"),
    ]
    data = _tar(members)
    ours = list(samples_from_tar(io.BytesIO(data)))
    path = tmp_path / "s.tar"
    path.write_bytes(data)
    theirs = list(webdataset.WebDataset(str(path), shardshuffle=False))
    assert [s["__key__"] for s in ours] == ["dir/0001", "dir/0002", "0002", "dir/0001"]
    assert ours[0] == {"__key__": "dir/0001", "jpg": b"j1", "cls": b"1", "seg.png": b"p1"}
    strip = lambda s: {k: v for k, v in s.items() if not k.startswith("__") or k == "__key__"}  # noqa: E731
    assert [strip(s) for s in ours] == [strip(s) for s in theirs]
    with pytest.raises(ValueError, match="repeats extension"):
        list(samples_from_tar(io.BytesIO(_tar([("a.x", b"1"), ("a.x", b"2")]))))


def test_samples_from_tar_reads_a_pipe_once_front_to_back():
    """Stream mode: a non-seekable source works (nothing seeks back or reads ahead whole)."""
    data = _tar([(f"k{i}.bin", bytes([i]) * 1000) for i in range(50)])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: feed the pipe
        os.close(r)
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = list(samples_from_tar(f))
    os.waitpid(pid, 0)
    assert [s["bin"] for s in got] == [bytes([i]) * 1000 for i in range(50)]


# ---- ObjectDataset -----------------------------------------------------------------------------------

def test_object_dataset_prefix_list_template(cluster, client, bucket):
    for i in range(12):
        bucket.object(f"img/{i:03d}.bin").put(f"object {i}".encode())
    bucket.object("other/x").put(b"x")
    by_prefix = ObjectDataset(bucket, prefix="img/")
    assert len(by_prefix) == 12 and by_prefix[3] == b"object 3" and by_prefix[-1] == b"object 11"
    by_list = ObjectDataset(f"ais://{bucket.name}", names=["img/005.bin", "other/x"], client=client,
                            with_name=True)
    assert by_list[0] == ("img/005.bin", b"object 5") and by_list[1] == ("other/x", b"x")
    by_template = ObjectDataset(bucket, template="img/{000..011..2}.bin", decode=lambda b: b.decode().upper())
    assert len(by_template) == 6 and by_template[1] == "OBJECT 2"
    with pytest.raises(ValueError):
        ObjectDataset(bucket, prefix="img/", names=["a"])
    with pytest.raises(ObjectNotFound):
        ObjectDataset(bucket, names=["img/nope"])[0]

    # DataLoader workers get the listing with the dataset: no listing request while loading.
    lists = _metric(cluster, "list")
    loader = DataLoader(by_prefix, batch_size=4, num_workers=2, persistent_workers=True, shuffle=True)
    for _ in range(2):
        got = sorted(x for batch in loader for x in batch)
        assert got == sorted(f"object {i}".encode() for i in range(12))
    assert _metric(cluster, "list") == lists


# ---- ShardDataset: exactly once, epochs -------------------------------------------------------------

def test_two_ranks_three_workers_read_every_sample_exactly_once(client, shard_bucket):
    expected = all_keys(SHARDS, PER_SHARD)
    orders = {}
    for epoch in (0, 1):
        per_rank = []
        for rank in (0, 1):
            ds = ShardDataset(shard_bucket, prefix="train/shard-", seed=42, rank=rank, world_size=2)
            assert ds.shards[:2] == ["train/shard-0000.tar", "train/shard-0001.tar"] and len(ds.shards) == 40
            ds.set_epoch(epoch)
            keys = _epoch_keys(ds, workers=3)
            assert len(keys) == len(set(keys))  # no duplicates within the rank
            per_rank.append(keys)
            orders[(epoch, rank)] = keys
        assert not set(per_rank[0]) & set(per_rank[1])
        assert set(per_rank[0]) | set(per_rank[1]) == expected
        assert sum(map(len, per_rank)) == SHARDS * PER_SHARD
    # A different epoch: another order (and another split of the shards over ranks).
    assert orders[(0, 0)] != orders[(1, 0)]
    assert set(orders[(0, 0)]) != set(orders[(1, 0)])
    # The same epoch and seed: the same order, also through a template and a reused
    # persistent loader whose workers learn the epoch from set_epoch.
    ds = ShardDataset(shard_bucket, template=TEMPLATE, seed=42, rank=0, world_size=2)
    loader = DataLoader(ds, batch_size=32, num_workers=3, persistent_workers=True)
    for epoch in (1, 0, 1):
        ds.set_epoch(epoch)
        assert _epoch_keys(ds, loader=loader) == orders[(epoch, 0)]
    # Another seed: another order.
    other = ShardDataset(shard_bucket, template=TEMPLATE, seed=43, rank=0, world_size=2)
    assert _epoch_keys(other) != orders[(0, 0)]


def test_spawned_persistent_workers_follow_set_epoch(shard_bucket):
    """With the spawn start method the dataset is pickled into the workers; the epoch set in
    the training process still reaches them (shared memory), and orders match fork's."""
    ds = ShardDataset(shard_bucket, template="train/shard-{0000..0005}.tar", seed=11)
    spawned = DataLoader(ds, batch_size=50, num_workers=2, persistent_workers=True,
                         multiprocessing_context="spawn")
    forked = DataLoader(ds, batch_size=50, num_workers=2)
    got = {}
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got[epoch] = _epoch_keys(ds, loader=spawned)
        assert got[epoch] == _epoch_keys(ds, loader=forked)
    assert got[0] != got[1] and sorted(got[0]) == sorted(got[1]) == sorted(all_keys(6, PER_SHARD))


def test_uneven_split_still_exactly_once(shard_bucket):
    """7 shards over 2 ranks × 3 workers (some get 2 shards, some 1, one none)."""
    names = [f"train/shard-{i:04d}.tar" for i in range(7)]
    seen = []
    for rank in (0, 1):
        ds = ShardDataset(shard_bucket, names=names, rank=rank, world_size=2, seed=1)
        counts = [len(ds.assigned_shards(w, 3)) for w in range(3)]
        assert sum(counts) == (4 if rank == 0 else 3)
        seen += _epoch_keys(ds, workers=3)
    assert sorted(seen) == sorted(all_keys(7, PER_SHARD))


def test_shuffle_buffer_mixes_samples_deterministically(shard_bucket):
    def run(buffer, seed=5):
        ds = ShardDataset(shard_bucket, template="train/shard-{0000..0003}.tar", seed=seed, shuffle_buffer=buffer)
        return [s["__key__"] for s in DataLoader(ds, batch_size=None, num_workers=0)]
    plain, mixed = run(0), run(100)
    assert sorted(plain) == sorted(mixed) == sorted(all_keys(4, PER_SHARD))
    assert mixed != plain and run(100) == mixed and run(100, seed=6) != mixed
    # Without the buffer samples come in tar order within each shard.
    first = [k for k in plain if k.startswith(plain[0].split("/")[0])]
    assert first == sorted(first)


def test_decode_keeps_metadata_and_collates(shard_bucket):
    def decode(s):
        return {"x": torch.tensor([len(s["bin"])]), "y": int(s["cls"])}

    ds = ShardDataset(shard_bucket, template="train/shard-{0000..0001}.tar", decode=decode)
    batch = next(iter(DataLoader(ds, batch_size=8, num_workers=1)))
    assert batch["x"].shape == (8, 1) and batch["y"].dtype == torch.int64
    assert len(batch["__key__"]) == 8 and batch["__index__"].tolist() == list(range(8))
    assert batch["__url__"][0] == f"ais://{shard_bucket.name}/{batch['__shard__'][0]}"
    ds.mark_consumed(batch)
    assert ds.state_dict()["partial"] == {batch["__shard__"][0]: [[0, 8]]}


# ---- resume ------------------------------------------------------------------------------------------

def _consume(ds, loader, batches):
    keys = []
    it = iter(loader)
    for _ in range(batches):
        batch = next(it)
        keys += batch["__key__"]
        ds.mark_consumed(batch)
    return keys


def test_resume_mid_epoch_yields_exactly_the_rest(cluster, shard_bucket):
    def make():
        return ShardDataset(shard_bucket, template=TEMPLATE, seed=9, rank=0, world_size=2)

    ds = make()
    ds.set_epoch(2)
    rank_shards = set(ds.epoch_order()[0::2])
    full = {k for k in all_keys(SHARDS, PER_SHARD) if f"train/shard-{int(k[1:4]):04d}.tar" in rank_shards}
    loader = DataLoader(ds, batch_size=25, num_workers=3, persistent_workers=True)
    before = _consume(ds, loader, 131)  # 3275 of rank 0's 5000 samples: ~4.4 shards per worker
    state = json.loads(json.dumps(ds.state_dict()))  # a checkpoint survives JSON
    assert state["epoch"] == 2 and state["complete"] and state["partial"]
    done = len(state["complete"])
    del loader

    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.epoch == 2
    gets = _metric(cluster, "get")
    loader = DataLoader(resumed, batch_size=25, num_workers=3, persistent_workers=True)
    after = []
    for batch in loader:
        after += batch["__key__"]
        resumed.mark_consumed(batch)
    # Complete shards were not read again: one GET per shard still to finish.
    assert _metric(cluster, "get") - gets == len(rank_shards) - done
    assert not set(before) & set(after)
    assert len(before) + len(after) == len(full) and set(before) | set(after) == full
    assert set(resumed.state_dict()["complete"]) == rank_shards and not resumed.state_dict()["partial"]
    # The next epoch on the same (persistent) loader is whole again.
    resumed.set_epoch(3)
    nxt = _epoch_keys(resumed, loader=loader)
    assert len(nxt) == 5000 and len(set(nxt)) == 5000


def test_resume_with_shuffle_buffer_other_workers_and_world_size(shard_bucket):
    """States of two ranks (shuffle buffer on, 3 workers each) merged and resumed by a single
    process with 2 workers: exactly the samples nobody consumed."""
    template = "train/shard-{0000..0011}.tar"
    states, consumed = [], []
    for rank in (0, 1):
        ds = ShardDataset(shard_bucket, template=template, seed=3, shuffle_buffer=64, rank=rank, world_size=2)
        ds.set_epoch(1)
        consumed += _consume(ds, DataLoader(ds, batch_size=10, num_workers=3), 40 + 30 * rank)
        states.append(ds.state_dict())
    resumed = ShardDataset(shard_bucket, template=template, seed=3, shuffle_buffer=64, rank=0, world_size=1)
    resumed.load_state_dict(states)
    rest = _epoch_keys(resumed, workers=2, batch_size=10)
    assert len(consumed) == 1100 and not set(consumed) & set(rest)
    assert sorted(consumed + rest) == sorted(all_keys(12, PER_SHARD))
    with pytest.raises(ValueError, match="different list of shards"):
        ShardDataset(shard_bucket, template="train/shard-{0000..0010}.tar", seed=3).load_state_dict(states[0])


# ---- two real ranks with torch.distributed -------------------------------------------------------

def test_gloo_two_processes_split_exactly_once(cluster, shard_bucket, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=gloo_rank_main, args=(r, 2, f"tcp://127.0.0.1:{port}", cluster, shard_bucket.name,
                                                  "train/shard-{0000..0009}.tar", str(tmp_path)))
        for r in (0, 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] and ranks[1] and not set(ranks[0]) & set(ranks[1])
    assert sorted(ranks[0] + ranks[1]) == sorted(all_keys(10, PER_SHARD))
    # The same split as explicit rank arguments give.
    ds = ShardDataset(shard_bucket, template="train/shard-{0000..0009}.tar", seed=7, rank=1, world_size=2)
    ds.set_epoch(3)
    assert _epoch_keys(ds, workers=2, batch_size=50) == ranks[1]


def test_sample_contents(shard_bucket):
    ds = ShardDataset(shard_bucket, names=["train/shard-0007.tar"], shuffle=False)
    samples = list(ds)
    assert [s["__index__"] for s in samples] == list(range(PER_SHARD))
    assert [s["__shard_size__"] for s in samples] == [0] * (PER_SHARD - 1) + [PER_SHARD]
    for s in samples:
        check_sample(s)
        assert s["cls"] == str(s["__index__"] % 10).encode() and s["__shard__"] == "train/shard-0007.tar"


def test_compressed_shards_read_like_plain_ones(client, shard_bucket):
    """`.tar.lz4` (LZ4 frames, as `grist archive` writes them) and `.tgz` shards give the same
    samples, in the same order, as the plain tar they were made from."""
    import gzip

    import lz4.frame

    plain = shard_bucket.object("train/shard-0003.tar").get()
    b = client.bucket(f"torch-z-{uuid.uuid4().hex[:8]}")
    b.create()
    try:
        b.object("z/s.tar.lz4").put(lz4.frame.compress(plain))
        b.object("z/s.tgz").put(gzip.compress(plain))
        want = [(s["__key__"], s["bin"], s["cls"]) for s in
                ShardDataset(shard_bucket, names=["train/shard-0003.tar"], shuffle=False)]
        assert len(want) == PER_SHARD
        for name in ("z/s.tar.lz4", "z/s.tgz"):
            got = [(s["__key__"], s["bin"], s["cls"]) for s in ShardDataset(b, names=[name], shuffle=False)]
            assert got == want, name
    finally:
        b.delete(missing_ok=True)


class _Numbers(torch.utils.data.IterableDataset):
    """An in-memory source for mixing: ``tag`` and a running number, split across workers."""

    def __init__(self, tag: str, n: int):
        self.tag, self.n = tag, n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, nw = (info.id, info.num_workers) if info else (0, 1)
        return ({"tag": self.tag, "i": i} for i in range(w, self.n, nw))


def test_mix_proportions_over_100k_samples():
    from gristmill.torch import Mix

    mix = Mix([(_Numbers("a", 1000), 0.7), (_Numbers("b", 300), 0.2), (_Numbers("c", 50), 0.1)],
              samples_per_epoch=100_000, seed=3)
    tags = [s["tag"] for s in mix]
    assert len(tags) == 100_000
    for tag, want in (("a", 0.7), ("b", 0.2), ("c", 0.1)):
        assert abs(tags.count(tag) / 100_000 - want) < 0.01, tag
    # One global sequence: another epoch differs, the same epoch repeats.
    assert [s["__mix__"] for s in mix] == mix.choices()
    mix.set_epoch(1)
    assert mix.choices() != mix.choices(0)
    with pytest.raises(ValueError):
        Mix([(_Numbers("a", 1), -1)], samples_per_epoch=10)


def test_mix_of_shard_datasets_over_ranks_and_workers(shard_bucket):
    """Two ShardDatasets (2,500 and 1,000 samples) mixed 1:1 for 4,000 samples per epoch, read by
    2 ranks × 2 DataLoader workers: exactly 4,000 samples in all, each consumer's sources the
    ones the global sequence gives it, the small source upsampled, every sample whole."""
    from gristmill.torch import Mix

    seen = []
    for rank in range(2):
        big = ShardDataset(shard_bucket, names=[f"train/shard-{i:04d}.tar" for i in range(10)],
                           rank=rank, world_size=2, seed=1)
        small = ShardDataset(shard_bucket, names=[f"train/shard-{i:04d}.tar" for i in range(20, 24)],
                             rank=rank, world_size=2, seed=1)
        mix = Mix([(big, 1.0), (small, 1.0)], samples_per_epoch=4000, seed=9, rank=rank, world_size=2)
        loader = DataLoader(mix, batch_size=None, num_workers=2)
        for s in loader:
            check_sample(s)
            seen.append((s["__mix__"], s["__shard__"]))
    assert len(seen) == 4000
    sources = [m for m, _ in seen]
    assert sorted(sources) == sorted(mix.choices())
    assert abs(sources.count(1) / 4000 - 0.5) < 0.05
    assert all((m == 1) == (shard >= "train/shard-0020.tar") for m, shard in seen)


def test_stateful_dataloader_round_trip_mid_epoch(shard_bucket):
    """torchdata's StatefulDataLoader saves and restores ShardDataset mid-epoch by itself (each
    worker's dataset reports what it handed over; no ``mark_consumed``): the resumed loader
    yields exactly the samples the first one had not, with or without a shuffle buffer."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    template = "train/shard-{0000..0011}.tar"  # 3,000 samples
    for shuffle_buffer in (0, 50):
        def make():
            ds = ShardDataset(shard_bucket, template=template, seed=4, shuffle_buffer=shuffle_buffer)
            ds.set_epoch(2)
            return ds, StatefulDataLoader(ds, batch_size=10, num_workers=3)

        ds, loader = make()
        before = []
        for i, batch in enumerate(loader):
            before += batch["__key__"]
            if i == 111:
                state = loader.state_dict()
                break
        del loader
        ds, loader = make()
        loader.load_state_dict(state)
        after = [k for batch in loader for k in batch["__key__"]]
        assert len(before) == 1120 and not set(before) & set(after), shuffle_buffer
        assert sorted(before + after) == sorted(all_keys(12, PER_SHARD)), shuffle_buffer


def _same_shard_neighbours(samples) -> float:
    pairs = list(zip(samples, samples[1:]))
    return sum(a["__shard__"] == b["__shard__"] for a, b in pairs) / len(pairs)


def test_canonical_streams_resume_on_another_topology_in_the_same_order(shard_bucket):
    """``streams=6`` with ``interleave=2`` (4 shards per stream): 2 ranks x 3 workers stopped mid-epoch and resumed
    as 3 ranks x 2 workers yield exactly the remaining samples, each canonical stream in the
    order one process reading the whole epoch gives it (the interleave replayed from the
    state, not re-read)."""
    template = "train/shard-{0000..0023}.tar"

    def make(rank, world):
        ds = ShardDataset(shard_bucket, template=template, seed=5, interleave=2, streams=6,
                          rank=rank, world_size=world)
        ds.set_epoch(4)
        return ds

    one = make(0, 1)
    stream_of = {shard: k for k in range(6) for shard in one.stream_shards(k)}

    def by_stream(keys_and_shards):
        out = {k: [] for k in range(6)}
        for key, shard in keys_and_shards:
            out[stream_of[shard]].append(key)
        return out

    def run(ds, loader, batches=None):
        got, it = [], iter(loader)
        while batches is None or batches > 0:
            try:
                batch = next(it)
            except StopIteration:
                break
            got += list(zip(batch["__key__"], batch["__shard__"]))
            ds.mark_consumed(batch)
            batches = None if batches is None else batches - 1
        return got

    # The reference: one process, one worker (the order is the same for any topology).
    whole = run(one, DataLoader(one, batch_size=10, num_workers=0))
    assert sorted(k for k, _ in whole) == sorted(all_keys(24, PER_SHARD))
    reference = by_stream(whole)
    assert make(0, 3).assigned_shards(1, 2) == one.stream_shards(1)
    with pytest.raises(ValueError, match="multiple of world_size"):
        ShardDataset(shard_bucket, template=template, streams=6, rank=0, world_size=4)

    first = [make(r, 2) for r in range(2)]
    before = []
    for r, ds in enumerate(first):
        before += run(ds, DataLoader(ds, batch_size=10, num_workers=3), batches=180 + 20 * r)
    resumed = [make(r, 3) for r in range(3)]
    for ds in resumed:
        ds.load_state_dict([d.state_dict() for d in first])
    after = []
    for ds in resumed:
        after += run(ds, DataLoader(ds, batch_size=10, num_workers=2))
    assert len(before) == 3800 and not {k for k, _ in before} & {k for k, _ in after}
    assert sorted(k for k, _ in before + after) == sorted(all_keys(24, PER_SHARD))
    # Some shards were finished before the stop: the resume replays past them unread.
    assert any(d.state_dict()["complete"] for d in first)
    b, a = by_stream(before), by_stream(after)
    for k in range(6):
        assert b[k] + a[k] == reference[k], f"stream {k}"


def test_interleaved_resume_of_two_ranks_by_one_is_exact(shard_bucket):
    """``interleave=2`` states of two ranks (some shards finished) resumed by one process:
    the interleave cannot be replayed on another topology, and finished shards must still
    not be read again (they were, once: every sample of a finished shard came twice)."""
    template = "train/shard-{0000..0011}.tar"
    states, consumed = [], []
    for rank in (0, 1):
        ds = ShardDataset(shard_bucket, template=template, seed=4, interleave=2, rank=rank, world_size=2)
        ds.set_epoch(1)
        consumed += _consume(ds, DataLoader(ds, batch_size=10, num_workers=1), 70 + 20 * rank)
        states.append(ds.state_dict())
    assert any(s["complete"] for s in states)
    resumed = ShardDataset(shard_bucket, template=template, seed=4, interleave=2, rank=0, world_size=1)
    resumed.load_state_dict(states)
    rest = _epoch_keys(resumed, workers=2, batch_size=10)
    assert len(rest) == len(set(rest)) and not set(consumed) & set(rest)
    assert sorted(consumed + rest) == sorted(all_keys(12, PER_SHARD))


def test_interleaved_shards_mix_neighbours_exactly_once_and_resume(shard_bucket):
    """``interleave=8``: each worker streams 8 shards at once; still every sample exactly
    once, far fewer neighbours from one shard than sequential reading (about 1/8, against
    nearly all), and a mid-epoch resume yields exactly the rest."""
    template = "train/shard-{0000..0015}.tar"
    seq = list(ShardDataset(shard_bucket, template=template, seed=2))
    mixed = list(ShardDataset(shard_bucket, template=template, seed=2, interleave=8))
    assert sorted(s["__key__"] for s in mixed) == sorted(s["__key__"] for s in seq) == sorted(all_keys(16, PER_SHARD))
    for s in mixed:
        check_sample(s)
    same_seq, same_mixed = _same_shard_neighbours(seq), _same_shard_neighbours(mixed)
    # webdataset's way for comparison: a shuffle buffer of 1,000 samples (4 shards' worth here).
    buffered = list(ShardDataset(shard_bucket, template=template, seed=2, shuffle_buffer=1000))
    print(f"adjacent samples from one shard: sequential {same_seq:.3f}, interleave=8 {same_mixed:.3f}, "
          f"shuffle buffer of 1000 samples {_same_shard_neighbours(buffered):.3f}")
    assert same_seq > 0.99 and same_mixed < 0.2
    # Resume after 1,000 samples (2 workers).
    ds = ShardDataset(shard_bucket, template=template, seed=2, interleave=8)
    loader = DataLoader(ds, batch_size=20, num_workers=2)
    before = _consume(ds, loader, 50)
    resumed = ShardDataset(shard_bucket, template=template, seed=2, interleave=8)
    resumed.load_state_dict(ds.state_dict())
    rest = _epoch_keys(resumed, workers=2, batch_size=20)
    assert len(before) == 1000 and not set(before) & set(rest)
    assert sorted(before + rest) == sorted(all_keys(16, PER_SHARD))

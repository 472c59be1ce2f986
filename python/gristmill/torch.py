"""PyTorch datasets over a Gristmill cluster (``pip install gristmill[torch]``).

* ``ObjectDataset`` — map-style: one object per item (names by prefix, list or brace template),
  returned as bytes or through your ``decode``.
* ``ShardDataset`` — iterable: tar shards (WebDataset layout) streamed member by member and
  grouped into samples ``{"__key__": ..., "jpg": b"...", "cls": b"..."}``; shards split across
  DDP ranks *and* DataLoader workers so each sample is read exactly once per epoch; shard order
  shuffled by ``seed + epoch``; an optional seeded shuffle buffer; resumable mid-epoch.
* ``BatchDataset`` — iterable: objects (or members of shards) fetched a batch at a time, each
  batch with one get-batch request (``GET /v1/ml/moss``); names split across ranks and
  workers exactly once per epoch, order shuffled by ``seed + epoch``.
* ``samples_from_tar`` — the streaming tar → sample grouping on its own, for any file object.
* ``Mix`` — weighted mixing of several datasets, a fixed number of samples per epoch.
* ``checkpoint`` — ``save(obj, "ais://b/ckpt/step-100.pt")`` / ``load(...)``: ``torch.save`` and
  ``torch.load`` streamed to and from an object (see ``gristmill.checkpoint``).

``ObjectDataset(get_batch=True)`` is the map-style way to the same requests: the DataLoader
hands it a whole batch of indices (``__getitems__``), fetched with one get-batch, so any
sampler (``DistributedSampler``, ``BatchSampler``...) keeps working.

The datasets work with ``torch.utils.data.DataLoader`` as it is (``num_workers > 0``,
``persistent_workers=True``, any start method): the object listing happens once, in the
constructor (the parent process), and travels to the workers with the dataset; each worker
process opens its own HTTP connections on first use (the client is fork-safe and picklable).

This is the only module of the package that imports torch.
"""

from __future__ import annotations

import io
import multiprocessing
import multiprocessing.context
import random
import re
import tarfile
import warnings
import zlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from torch.utils.data import Dataset, IterableDataset, get_worker_info

from . import checkpoint
from .client import Bucket, Client
from .template import expand_template

__all__ = ["BatchDataset", "Mix", "ObjectDataset", "ShardDataset", "checkpoint", "samples_from_tar"]

BucketLike = Union[Bucket, str]
"""A ``Bucket``, or a bucket URI such as ``"ais://train"`` (``"train"`` alone means ``ais``)."""

_PROVIDERS = {"ais": "ais", "s3": "aws", "aws": "aws", "ht": "ht", "gs": "gcp", "gcp": "gcp", "az": "azure"}
_SCHEMES = {"aws": "s3", "gcp": "gs", "azure": "az"}  # provider → URI scheme, for __url__
_STREAM_BUFFER = 1 << 20  # bytes read from the network at a time while parsing a shard


# ---- selecting objects -------------------------------------------------------------------------

def _resolve_bucket(bucket: BucketLike, client: Optional[Client]) -> Bucket:
    if isinstance(bucket, Bucket):
        return bucket
    scheme, sep, name = bucket.partition("://")
    if not sep:
        scheme, name = "ais", bucket
    if scheme not in _PROVIDERS or not name or "/" in name.strip("/"):
        raise ValueError(f"not a bucket URI: {bucket!r} (expected e.g. 'ais://name')")
    return (client or Client()).bucket(name.strip("/"), _PROVIDERS[scheme])


def _select_names(bucket: Bucket, prefix: Optional[str], names: Optional[Iterable[Any]],
                  template: Optional[str]) -> List[Any]:
    """Object names from exactly one of: an explicit list, a brace template, or a listing by
    prefix (the default: the whole bucket). Listing order is by name."""
    given = [x is not None for x in (prefix, names, template)]
    if sum(given) > 1:
        raise ValueError("give one of prefix=, names=, template=")
    if names is not None:
        out = [names] if isinstance(names, str) else list(names)
    elif template is not None:
        out = expand_template(template)
    else:
        out = [e.name for e in bucket.list_objects_iter(prefix=prefix or "")]
    if not out:
        raise ValueError(f"no objects selected in {bucket!r}")
    return out


Key = Union[str, Tuple[str, str]]
"""What ``BatchDataset`` reads: an object's name, or ``(shard, member)`` for a member of a shard."""


def _fetch_batch(bucket: Bucket, keys: Sequence[Key], *, continue_on_error: bool = False,
                 output_format: str = ".tar") -> List[Tuple[Key, Optional[bytes]]]:
    """``(key, data)`` for every key, in order, with one get-batch request; ``data`` is None
    for a key that could not be read (only with ``continue_on_error``)."""
    batch = bucket.client.batch(bucket, output_format=output_format, continue_on_error=continue_on_error)
    for key in keys:
        if isinstance(key, str):
            batch.add(key)
        else:
            batch.add(key[0], archpath=key[1])
    return [(key, None if item.missing else data) for key, (item, data) in zip(keys, batch.get())]


# ---- map-style -----------------------------------------------------------------------------------

class ObjectDataset(Dataset):
    """Map-style dataset: item ``i`` is the content of the ``i``-th selected object.

    Args:
        bucket: a ``Bucket`` (its client's settings, e.g. ``direct=True``, apply) or a URI
            such as ``"ais://train"`` (then ``client`` or a default ``Client()`` is used).
        prefix / names / template: which objects — at most one: every object whose name starts
            with ``prefix`` (listed once, here, in name order; the default is the whole bucket),
            an explicit list, or a brace template like ``"img-{000000..099999}.jpg"`` (no
            listing at all).
        decode: ``decode(data: bytes) -> Any`` applied to each object's content (e.g. image
            decoding); it runs in the DataLoader worker, so it must be picklable with ``spawn``.
        with_name: return ``(name, value)`` instead of ``value``.
        get_batch: fetch each DataLoader batch with one get-batch request instead of one GET
            per object. The DataLoader (``batch_size=N``, any sampler) hands the dataset a
            whole batch of indices at once through ``__getitems__``; with this off, that
            method reads them one by one, exactly as ``__getitem__`` would.
        client: the client for a bucket given as a URI.

    Use it with a ``DistributedSampler`` under DDP, as any map-style dataset.
    """

    def __init__(self, bucket: BucketLike, *, prefix: Optional[str] = None,
                 names: Optional[Iterable[str]] = None, template: Optional[str] = None,
                 decode: Optional[Callable[[bytes], Any]] = None, with_name: bool = False,
                 get_batch: bool = False, client: Optional[Client] = None):
        self.bucket = _resolve_bucket(bucket, client)
        self.names: List[str] = _select_names(self.bucket, prefix, names, template)
        self.decode = decode
        self.with_name = with_name
        self.get_batch = get_batch

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> Any:
        name = self.names[index]
        return self._value(name, self.bucket.object(name).get())

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        """The items at ``indices``, in that order: with ``get_batch``, one get-batch request
        for all of them. (The DataLoader calls this with each batch of indices.)"""
        if not self.get_batch:
            return [self[i] for i in indices]
        names = [self.names[i] for i in indices]
        return [self._value(name, data) for name, data in _fetch_batch(self.bucket, names)]

    def _value(self, name: str, data: bytes) -> Any:
        value = self.decode(data) if self.decode is not None else data
        return (name, value) if self.with_name else value

    def __repr__(self) -> str:
        return f"ObjectDataset({self.bucket!r}, {len(self.names)} objects)"


# ---- tar shards ----------------------------------------------------------------------------------

# WebDataset's rules, kept identical so both read a shard into the same samples: the key is
# the member's directory plus its base name up to the first dot, the extension the rest.
_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META_MEMBER = re.compile(r"__[^/]*__($|/)")


def split_member_name(name: str) -> Optional[Tuple[str, str]]:
    """``(key, extension)`` of a tar member as WebDataset groups them
    (``"a/b/0001.seg.png"`` → ``("a/b/0001", "seg.png")``); None when the base name has no dot
    (such members belong to no sample)."""
    m = _KEY_EXT.match(name)
    return (m.group(1), m.group(2)) if m else None


def samples_from_tar(fileobj: Any, *, lowercase_ext: bool = True) -> Iterator[Dict[str, Any]]:
    """Streams WebDataset samples out of a tar (optionally gz/bz2/xz-compressed) file object.

    The archive is read once, front to back, through ``tarfile`` in stream mode (``"r|*"``):
    only the current member is in memory, never the whole archive. Consecutive members with the
    same key form one sample ``{"__key__": key, ext: bytes, ...}``; members without an
    extension, non-regular files and WebDataset metadata (``__*__``) are skipped, exactly as
    ``webdataset`` does. A key that
    repeats an extension within one sample raises ``ValueError``.
    """
    current: Optional[Dict[str, Any]] = None
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        for member in tar:
            tar.members = []  # stream mode would otherwise keep every member's header
            if not member.isfile():
                continue
            if _META_MEMBER.match(member.name):
                continue
            split = split_member_name(member.name)
            if split is None:
                continue
            key, ext = split
            if lowercase_ext:
                ext = ext.lower()
            f = tar.extractfile(member)
            data = f.read() if f is not None else b""
            if current is None or current["__key__"] != key:
                if current is not None:
                    yield current
                current = {"__key__": key}
            if ext in current:
                raise ValueError(f"tar member {member.name!r} repeats extension {ext!r} of sample {key!r}")
            current[ext] = data
    if current is not None:
        yield current


class _SharedEpoch:
    """The epoch number, shared with DataLoader workers — persistent ones too — so that
    ``set_epoch`` in the training loop reaches them (a plain attribute would be frozen in each
    worker's copy of the dataset). Inherited by fork, or pickled while a worker is spawned;
    any other pickling (``copy.deepcopy``, saving) takes a snapshot of the value."""

    def __init__(self, value: int = 0):
        self._shared = multiprocessing.RawValue("q", value)

    @property
    def value(self) -> int:
        return int(self._shared.value)

    @value.setter
    def value(self, v: int) -> None:
        self._shared.value = v

    def __reduce__(self):
        if multiprocessing.context.get_spawning_popen() is not None:
            return (_rebuild_shared_epoch, (self._shared,))
        return (_SharedEpoch, (self.value,))


def _rebuild_shared_epoch(shared: Any) -> _SharedEpoch:
    e = _SharedEpoch.__new__(_SharedEpoch)
    e._shared = shared
    return e


class _Progress:
    """Which samples of which shards the training loop has consumed in one epoch.

    A sample is ``(shard, index)``, ``index`` its ordinal in the shard. A shard is complete
    once its size is known (carried by the last sample a worker emits from it) and every index
    below it has been consumed; complete shards are never read again on resume.
    """

    def __init__(self) -> None:
        self.complete: Set[str] = set()
        self.partial: Dict[str, Set[int]] = {}
        self.sizes: Dict[str, int] = {}
        # Sizes of complete shards: an interleaved reader replays its consumed prefix from
        # them on resume without reading the shards again.
        self.complete_sizes: Dict[str, int] = {}

    def add(self, shard: str, index: int, size: int = 0) -> None:
        if shard in self.complete:
            return
        if size:
            self.sizes[shard] = size
        self.partial.setdefault(shard, set()).add(index)
        self._check(shard)

    def merge(self, other: "_Progress") -> None:
        for shard in other.complete:
            self.complete.add(shard)
            self.partial.pop(shard, None)
            self.sizes.pop(shard, None)
        self.complete_sizes.update(other.complete_sizes)
        for shard, seen in other.partial.items():
            if shard in self.complete:
                continue
            self.partial.setdefault(shard, set()).update(seen)
            if shard in other.sizes:
                self.sizes[shard] = other.sizes[shard]
            self._check(shard)

    def _check(self, shard: str) -> None:
        n = self.sizes.get(shard)
        seen = self.partial.get(shard, ())
        if n is not None and len(seen) >= n and all(i in seen for i in range(n)):
            self.complete.add(shard)
            self.complete_sizes[shard] = n
            del self.partial[shard]
            del self.sizes[shard]

    def consumed(self, shard: str) -> Set[int]:
        return self.partial.get(shard, set())

    def to_state(self) -> Dict[str, Any]:
        return {
            "complete": sorted(self.complete),
            "partial": {s: _to_ranges(v) for s, v in sorted(self.partial.items()) if v},
            "sizes": dict(sorted(self.sizes.items())),
            "complete_sizes": dict(sorted(self.complete_sizes.items())),
        }

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "_Progress":
        p = cls()
        p.complete = set(state.get("complete") or ())
        for shard, ranges in (state.get("partial") or {}).items():
            p.partial[shard] = {i for a, b in ranges for i in range(a, b)}
        p.sizes = {s: int(n) for s, n in (state.get("sizes") or {}).items()}
        p.complete_sizes = {s: int(n) for s, n in (state.get("complete_sizes") or {}).items()}
        return p


def _to_ranges(indices: Set[int]) -> List[List[int]]:
    out: List[List[int]] = []
    for i in sorted(indices):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def _rows(values: Any) -> List[Any]:
    """A collated column (list, tuple, tensor) or a single value, as a list."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _dist_rank_world() -> Tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:  # torch built without distributed support
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _rank_and_world(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """The given rank and world size, or those of ``torch.distributed`` (else 0 and 1)."""
    auto_rank, auto_world = _dist_rank_world()
    rank = auto_rank if rank is None else int(rank)
    world_size = auto_world if world_size is None else int(world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    return rank, world_size


def _epoch_order(items: Sequence[Any], shuffle: bool, seed: int, epoch: int) -> List[Any]:
    """All items in the order of ``epoch``: the same on every rank and worker."""
    order = list(items)
    if shuffle:
        random.Random(f"{seed}/{epoch}").shuffle(order)
    return order


def _share(order: Sequence[Any], rank: int, world_size: int, worker: int, num_workers: int) -> List[Any]:
    """The part of ``order`` that DataLoader worker ``worker`` of ``num_workers`` on ``rank``
    reads: every item goes to exactly one (rank, worker)."""
    if not 0 <= worker < num_workers:
        raise ValueError(f"worker {worker} is not in [0, {num_workers})")
    return list(order[rank::world_size][worker::num_workers])


def _worker() -> Tuple[int, int]:
    """``(worker id, number of workers)`` of the DataLoader worker running this, else (0, 1)."""
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


class ShardDataset(IterableDataset):
    """Iterable dataset over tar shards (WebDataset layout), streamed member by member.

    Each sample is a dict: the member contents by extension (``"jpg"``, ``"cls"``, ...,
    lower-cased, as bytes) plus metadata:

    * ``__key__`` — the sample key (member directory + base name up to the first dot);
    * ``__shard__`` — the shard's object name; ``__url__`` — ``ais://bucket/shard``;
    * ``__index__`` — the sample's ordinal in its shard;
    * ``__shard_size__`` — the shard's sample count on the last sample emitted from that shard,
      else 0 (``mark_consumed`` uses these three to know when a shard is finished).

    Args:
        bucket: a ``Bucket`` (its client's settings apply: ``direct=True`` reads from the owning
            targets without a proxy hop) or a URI such as ``"ais://train"``.
        prefix / names / template: which shards — listed once here by prefix (default: the
            whole bucket, in name order), an explicit list, or ``"shard-{0000..0999}.tar"``.
        shuffle: shuffle the shard order each epoch with ``random.Random(f"{seed}/{epoch}")``
            — the same order on every rank, before the split, so the split stays exact.
        seed: base of every random choice (shard order and shuffle buffer).
        shuffle_buffer: if > 0, samples pass through a buffer of this many samples and leave it
            in random order (seeded by seed, epoch, rank and worker); it holds raw samples, so
            it costs ``shuffle_buffer × sample size`` of memory per worker.
        interleave: if > 1, each worker streams this many of its shards at once and takes
            each next sample from one of them at random (seeded like the buffer), opening the
            next shard when one ends — a block shuffle across shards whose memory is a few
            stream buffers, not samples: neighbours come from different shards (about
            ``1/interleave`` of adjacent pairs share one, against nearly all without it).
            Combine with ``shuffle_buffer`` to also mix within shards.
        rank, world_size: this process's place in data-parallel training; by default taken
            from ``torch.distributed`` when its process group is initialized (initialize it
            before building the dataset), else 0 and 1.
        decode: ``decode(sample: dict) -> Any`` applied to each sample in the worker, after
            the shuffle buffer. If it returns a dict, the metadata keys are put back when
            missing; return a dict to keep ``mark_consumed`` (resume) working.
        client: the client for a bucket given as a URI.
        streams: if set, the sample order is fixed by ``streams`` *canonical streams* instead of
            by the ranks and workers (MosaicML Streaming's "canonical nodes"): see below.

    **Canonical streams** (``streams=S``). The epoch's shard order is dealt to ``S`` streams
    (stream ``k`` reads ``order[k::S]`` in turn, its interleave and shuffle buffer seeded by
    the seed, the epoch and ``k`` only), so every stream's sample sequence depends on the seed
    and the epoch alone. The global order is the streams' round-robin: position ``(i, k)`` is
    the ``i``-th sample of stream ``k``. Reader ``g = rank × num_workers + worker`` of
    ``G = world_size × num_workers`` serves the streams ``k ≡ g (mod G)`` in that round-robin
    (``G`` must divide ``S``; pick ``S`` with many divisors, e.g. 48 or 96). A state taken on
    one topology (``state_dict``, merged over ranks) resumes on any other: every stream
    continues exactly where it stopped, in its own order, so the job sees exactly the remaining
    samples in the same per-stream order — with ``interleave`` and ``shuffle_buffer`` too, as
    long as nothing was consumed out of a stream's order (a shuffle buffer reorders within a
    stream, so after a resume its remaining samples come out in another order; the set stays
    exact).

    **Splitting.** For epoch ``e`` the shard list is (optionally) shuffled, rank ``r`` takes
    ``order[r::world_size]`` and DataLoader worker ``w`` of ``W`` takes ``mine[w::W]`` of those.
    Every shard goes to exactly one (rank, worker) and each shard is read once, so every sample
    is read exactly once per epoch. When the shard count does not divide evenly, some ranks
    (and workers) get one shard more than others — nothing is padded or dropped, so ranks may
    see different sample counts: with DDP use ``torch.distributed.algorithms.Join``, stop all
    ranks at the smallest count, or make the shard count a multiple of
    ``world_size × num_workers`` with equal shard sizes.

    **Epochs.** Call ``set_epoch(e)`` before iterating each epoch (before ``iter(loader)``); it
    reaches persistent DataLoader workers too.

    **Resume.** The DataLoader hides its workers from the dataset in the training process, and
    workers read ahead of what the loop has consumed, so neither the workers' positions nor a
    count of consumed batches (which the DataLoader interleaves in ways that depend on every
    shard's size) tells what the loop has really consumed. Instead each sample names its shard
    and index, the loop reports what it consumed with ``mark_consumed(batch)``, and
    ``state_dict()`` records, per shard, "complete" or the consumed indices. On resume
    (``load_state_dict`` before the first ``iter(loader)``), the same epoch's shard assignment
    is rebuilt, complete shards are skipped without being read, partly consumed shards are
    streamed again with their consumed samples dropped, so exactly the remaining samples are
    yielded. The state does not depend on the worker count, and states of several ranks can
    be merged (pass a list to ``load_state_dict``), so a run may resume with other
    ``num_workers`` or ``world_size``. With a shuffle buffer, the remaining samples come out in
    a different order than they would have without the interruption (the set is exact).
    """

    def __init__(self, bucket: BucketLike, *, prefix: Optional[str] = None,
                 names: Optional[Iterable[str]] = None, template: Optional[str] = None,
                 shuffle: bool = True, seed: int = 0, shuffle_buffer: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 decode: Optional[Callable[[Dict[str, Any]], Any]] = None,
                 client: Optional[Client] = None, interleave: int = 1,
                 streams: Optional[int] = None):
        if interleave < 1:
            raise ValueError("interleave must be >= 1")
        self.interleave = int(interleave)
        self.bucket = _resolve_bucket(bucket, client)
        self.shards: List[str] = _select_names(self.bucket, prefix, names, template)
        if len(set(self.shards)) != len(self.shards):
            raise ValueError("the shard list names a shard twice")
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        if streams is not None and (streams < 1 or streams % self.world_size):
            raise ValueError(f"streams={streams} must be a positive multiple of world_size "
                             f"({self.world_size})")
        self.streams = streams
        if shuffle_buffer < 0:
            raise ValueError("shuffle_buffer must be >= 0")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.shuffle_buffer = int(shuffle_buffer)
        self.decode = decode
        self._epoch = _SharedEpoch(0)
        self._progress = _Progress()  # filled by mark_consumed in the training process
        self._yielded = _Progress()  # what this copy's iteration handed out (a worker's own state)
        self._resume: Optional[Tuple[int, _Progress]] = None  # (epoch, what to skip) from load_state_dict
        self._fingerprint = zlib.crc32("\0".join(self.shards).encode())

    def __repr__(self) -> str:
        return (f"ShardDataset({self.bucket!r}, {len(self.shards)} shards, rank {self.rank}/"
                f"{self.world_size}, epoch {self.epoch})")

    # ---- epochs and the split ----

    @property
    def epoch(self) -> int:
        return self._epoch.value

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration reads (shard order and shuffle seeds). A new
        epoch starts with no progress; setting the epoch a loaded state belongs to keeps it."""
        epoch = int(epoch)
        if epoch != self._epoch.value:
            self._epoch.value = epoch
            self._progress = _Progress()
            self._yielded = _Progress()
            self._resume = None

    def epoch_order(self, epoch: Optional[int] = None) -> List[str]:
        """All shards in the order of ``epoch`` (default: the current one), before the split."""
        return _epoch_order(self.shards, self.shuffle, self.seed, self.epoch if epoch is None else epoch)

    def assigned_shards(self, worker: int = 0, num_workers: int = 1, epoch: Optional[int] = None) -> List[str]:
        """The shards that DataLoader worker ``worker`` of ``num_workers`` on this rank reads in
        ``epoch``, in reading order."""
        if self.streams is not None:
            return [shard for k in self._my_streams(worker, num_workers)
                    for shard in self.stream_shards(k, epoch)]
        return _share(self.epoch_order(epoch), self.rank, self.world_size, worker, num_workers)

    def stream_shards(self, stream: int, epoch: Optional[int] = None) -> List[str]:
        """The shards canonical stream ``stream`` reads in ``epoch``, in order (``streams=S``)."""
        if self.streams is None:
            raise ValueError("stream_shards() needs streams=S")
        return self.epoch_order(epoch)[stream::self.streams]

    def _my_streams(self, worker: int, num_workers: int) -> List[int]:
        readers = self.world_size * num_workers
        if self.streams is None or self.streams % readers:
            raise ValueError(f"streams={self.streams} must be a multiple of world_size × num_workers "
                             f"({self.world_size} × {num_workers})")
        me = self.rank * num_workers + worker
        return list(range(me, self.streams, readers))

    # ---- iteration (in the DataLoader worker) ----

    def __iter__(self) -> Iterator[Any]:
        worker, num_workers = _worker()
        epoch = self.epoch
        shards = self.assigned_shards(worker, num_workers, epoch)
        resume, self._resume = self._resume, None  # a loaded state applies to one iteration...
        skip = resume[1] if resume is not None and resume[0] == epoch else _Progress()  # ...of its epoch
        self._yielded = _Progress.from_state(skip.to_state())
        if self.streams is not None:
            # Each canonical stream seeded by itself alone; this reader's streams in turn.
            samples = _round_robin([self._ordered(self.stream_shards(k, epoch), skip, f"{self.seed}/{epoch}/s{k}")
                                    for k in self._my_streams(worker, num_workers)])
        else:
            samples = self._ordered(shards, skip,
                                    f"{self.seed}/{epoch}/{self.rank}/{self.world_size}/{worker}/{num_workers}")
        for sample in samples:
            self._yielded.add(sample["__shard__"], sample["__index__"], sample["__shard_size__"])
            if self.decode is None:
                yield sample
                continue
            out = self.decode(sample)
            if isinstance(out, dict):
                for k in _META:
                    out.setdefault(k, sample[k])
            yield out

    def _ordered(self, shards: Sequence[str], skip: _Progress, seed: str) -> Iterator[Dict[str, Any]]:
        """The samples of ``shards`` in reading order: interleaved and through the shuffle
        buffer when asked, both seeded from ``seed``."""
        if self.interleave > 1:
            samples = self._interleaved(shards, skip, random.Random(f"{seed}/mix"))
        else:
            samples = self._stream(shards, skip)
        if self.shuffle_buffer > 0:
            samples = _shuffled(samples, self.shuffle_buffer, random.Random(seed))
        return samples

    def _stream(self, shards: Sequence[str], skip: _Progress) -> Iterator[Dict[str, Any]]:
        for shard in shards:
            if shard in skip.complete:
                continue
            yield from self._shard_samples(shard, skip.consumed(shard))

    def _interleaved(self, shards: Sequence[str], skip: _Progress, rng: random.Random) -> Iterator[Dict[str, Any]]:
        """Samples of ``shards``, ``interleave`` shards open at a time, each next sample from a
        random one of them."""
        todo = list(reversed(shards))  # pop() takes them in reading order
        open_: List[Iterator[Dict[str, Any]]] = []
        replayed = None
        if self.shuffle_buffer == 0:  # with a buffer, what was consumed is no prefix
            replayed = self._replay_interleave(shards, skip, rng, todo)
        # Finished shards are never read again (with the prefix replayed exactly, none is
        # left to open; otherwise this keeps the set exact).
        todo[:] = [s for s in todo if s not in skip.complete]
        if replayed is not None:
            # Where the consumed prefix left off: the same open shards and random state, so
            # the rest comes in the order an uninterrupted epoch would have had.
            open_ = [iter(()) if s in skip.complete else self._shard_samples(s, skip.consumed(s))
                     for s in replayed]
        try:
            while todo or open_:
                while todo and len(open_) < self.interleave:
                    shard = todo.pop()
                    open_.append(self._shard_samples(shard, skip.consumed(shard)))
                i = rng.randrange(len(open_))
                try:
                    yield next(open_[i])
                except StopIteration:
                    open_.pop(i)
        finally:
            for it in open_:
                close = getattr(it, "close", None)
                if close is not None:
                    close()

    def _replay_interleave(self, shards: Sequence[str], skip: _Progress, rng: random.Random,
                           todo: List[str]) -> Optional[List[str]]:
        """Replays the interleave's choices over what ``skip`` says was consumed (a prefix of
        every shard; complete shards by their recorded sizes) without reading anything:
        advances ``rng`` and ``todo`` as the original run did and returns the shards open at
        that point. ``None`` when the size of a complete shard is unknown."""
        if any(s in skip.complete and s not in skip.complete_sizes for s in shards):
            return None
        left = sum(skip.complete_sizes[s] if s in skip.complete else len(skip.consumed(s)) for s in shards)
        passed: Dict[str, int] = {}
        open_: List[str] = []
        while left > 0 and (todo or open_):
            while todo and len(open_) < self.interleave:
                open_.append(todo.pop())
            i = rng.randrange(len(open_))
            shard = open_[i]
            if passed.get(shard, 0) >= skip.complete_sizes.get(shard, 1 << 62):
                open_.pop(i)  # the draw that found it ended
                continue
            passed[shard] = passed.get(shard, 0) + 1
            left -= 1
        return open_

    def _shard_samples(self, shard: str, skip: Set[int]) -> Iterator[Dict[str, Any]]:
        scheme = _SCHEMES.get(self.bucket.provider, self.bucket.provider)
        url = f"{scheme}://{self.bucket.name}/{shard}"
        pending: Optional[Dict[str, Any]] = None
        count = 0
        with self.bucket.object(shard).get_stream(chunk_size=_STREAM_BUFFER) as reader:
            buffered: Any = io.BufferedReader(reader, buffer_size=_STREAM_BUFFER)
            if shard.endswith(".lz4"):
                # tarfile knows gz/bz2/xz; LZ4 frames (`.tar.lz4`, as `grist archive` and
                # AIStore write them) are decoded as they stream.
                import lz4.frame

                buffered = lz4.frame.LZ4FrameFile(buffered, mode="rb")
            for index, sample in enumerate(samples_from_tar(buffered)):
                count = index + 1
                if index in skip:
                    continue
                sample["__shard__"] = shard
                sample["__url__"] = url
                sample["__index__"] = index
                sample["__shard_size__"] = 0
                # Hold one sample back: the last one carries the shard's size.
                if pending is not None:
                    yield pending
                pending = sample
        if pending is not None:
            pending["__shard_size__"] = count
            yield pending

    # ---- progress and resume (in the training process) ----

    def mark_consumed(self, batch: Any) -> None:
        """Records that the training loop consumed ``batch``: one sample dict, a batch collated
        by the default ``collate_fn`` (a dict of lists/tensors), or a list of sample dicts.
        Call it once per batch, after the step that used it; ``state_dict()`` then reflects it.
        """
        if isinstance(batch, (list, tuple)):
            for sample in batch:
                self.mark_consumed(sample)
            return
        if not isinstance(batch, dict) or "__shard__" not in batch or "__index__" not in batch:
            raise TypeError("mark_consumed needs samples (or batches) that keep the "
                            "'__shard__', '__index__' and '__shard_size__' keys")
        shards = _rows(batch["__shard__"])
        indices = _rows(batch["__index__"])
        sizes = _rows(batch.get("__shard_size__", 0))
        if len(sizes) == 1 and len(shards) > 1:
            sizes = sizes * len(shards)
        if not len(shards) == len(indices) == len(sizes):
            raise ValueError("batch columns '__shard__', '__index__', '__shard_size__' differ in length")
        for shard, index, size in zip(shards, indices, sizes):
            self._progress.add(shard, int(index), int(size))

    def state_dict(self) -> Dict[str, Any]:
        """The epoch and what of it has been consumed: in the training process, what
        ``mark_consumed`` was told; in a DataLoader worker (torchdata's ``StatefulDataLoader``
        asks each worker's dataset after every batch it hands over), what that worker's
        iteration yielded. A small JSON-able dict to store in the training checkpoint."""
        progress = _Progress()
        progress.merge(self._progress)
        progress.merge(self._yielded)
        return {
            "version": 1,
            "epoch": self.epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shards": len(self.shards),
            "fingerprint": self._fingerprint,
            **progress.to_state(),
        }

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Resumes from ``state_dict()`` output — or a list of them, one per rank, merged
        (needed when ``world_size`` changed). Call it before the first ``iter(loader)``: workers
        copy the dataset when they start. The next iteration then yields exactly the samples of
        the state's epoch not consumed yet; later epochs are whole."""
        states = [state] if isinstance(state, dict) else list(state)
        if not states:
            raise ValueError("no state to load")
        merged = _Progress()
        epoch = None
        for s in states:
            if s.get("version") != 1:
                raise ValueError(f"unknown ShardDataset state version {s.get('version')!r}")
            if (s["fingerprint"], s["shards"]) != (self._fingerprint, len(self.shards)):
                raise ValueError("the state belongs to a different list of shards")
            if (s["seed"], s["shuffle"]) != (self.seed, self.shuffle):
                raise ValueError("the state was taken with a different seed or shuffle setting")
            if epoch is not None and s["epoch"] != epoch:
                raise ValueError("the states belong to different epochs")
            epoch = s["epoch"]
            merged.merge(_Progress.from_state(s))
        self._epoch.value = int(epoch)
        self._progress = merged
        self._resume = (int(epoch), _Progress.from_state(merged.to_state()))


_META = ("__key__", "__shard__", "__url__", "__index__", "__shard_size__")


def _round_robin(iterators: List[Iterator[Any]]) -> Iterator[Any]:
    """One item of each iterator in turn, dropping those that end."""
    live = list(iterators)
    while live:
        still = []
        for it in live:
            try:
                yield next(it)
            except StopIteration:
                continue
            still.append(it)
        live = still


def _shuffled(samples: Iterable[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """Shuffle buffer: fills ``size`` samples, then emits a random one per sample read."""
    buf: List[Any] = []
    for s in samples:
        if len(buf) < size:
            buf.append(s)
            continue
        i = rng.randrange(size)
        out, buf[i] = buf[i], s
        yield out
    rng.shuffle(buf)
    yield from buf


# ---- get-batch ---------------------------------------------------------------------------------

class BatchDataset(IterableDataset):
    """Iterable dataset that reads objects — or members of shards — a batch at a time, with one
    get-batch request (``GET /v1/ml/moss``) per batch instead of one GET per object.

    Args:
        bucket: a ``Bucket`` or a URI such as ``"ais://train"`` (then ``client`` or a default
            ``Client()`` is used).
        prefix / names / template: which items — at most one: every object whose name starts
            with ``prefix`` (listed once, here; the default is the whole bucket), an explicit
            list, or a brace template (no listing). ``names`` may also hold ``(shard, member)``
            pairs: members of shards, each read on its own without reading the shard.
        batch_size: items per request, and per yielded batch.
        shuffle: shuffle the item order each epoch with ``random.Random(f"{seed}/{epoch}")``,
            the same on every rank, before the split (as ``ShardDataset`` does with shards).
        seed: base of the shuffle.
        drop_last: drop each worker's last batch when it is short.
        rank, world_size: this process's place in data-parallel training; by default from
            ``torch.distributed`` when its process group is initialized, else 0 and 1.
        decode: ``decode(data: bytes) -> Any`` applied to each item in the worker.
        with_name: items are ``(key, value)`` (the key as selected: a name or a pair).
        batched: yield one list per request — use ``DataLoader(ds, batch_size=None)``, with a
            ``collate_fn`` if you want tensors. ``False`` yields the items one by one, for
            ``DataLoader(ds, batch_size=batch_size)``, which then rebuilds the same batches.
        continue_on_error: leave items that cannot be read out of their batch (with a
            warning) instead of failing with ``ObjectNotFound`` & co.
        output_format: the archive format on the wire (``.tar``, ``.tgz``, ``.zip``).
        client: the client for a bucket given as a URI.
        global_order: one sample order for the whole job, independent of the number of ranks
            and workers (see below), so a job resumes on another topology where it stopped.

    **Global order** (``global_order=True``). The epoch's item order is cut into global steps
    of ``world_size × batch_size`` items; at step ``t`` rank ``r`` gets the ``r``-th
    ``batch_size`` slice of step ``t``, and DataLoader worker ``w`` of ``W`` reads the steps
    ``t ≡ w (mod W)``, so the loader hands a rank its batches in step order. The order depends
    only on ``seed`` and the epoch: after ``n`` steps the job has consumed exactly the first
    ``position(n)`` items, whatever its size. Store ``state_dict(steps=n)`` in the checkpoint
    and pass it to ``load_state_dict`` of a dataset built with any ``world_size`` and workers:
    the rest of the epoch follows in the same global order. With ``drop_last`` a short last
    step is dropped on every rank (ranks stay in step, as DDP needs); without it the ranks of
    the last step get what is left (some possibly nothing).

    **Splitting.** For epoch ``e`` the item list is (optionally) shuffled, rank ``r`` of
    ``R`` takes ``order[r::R]``, DataLoader worker ``w`` of ``W`` takes ``mine[w::W]`` and
    cuts it into batches of ``batch_size``: every item is read exactly once per epoch, by one
    (rank, worker). Nothing is padded; ranks may differ by one item, and each worker may end
    with one short batch (``drop_last`` drops it).

    **Epochs.** Call ``set_epoch(e)`` before each epoch's ``iter(loader)``; it reaches
    persistent workers (as with ``ShardDataset``).

    Each batch is in memory whole once its request is answered (as a batch has to be), one
    batch per worker at a time.
    """

    def __init__(self, bucket: BucketLike, *, prefix: Optional[str] = None,
                 names: Optional[Iterable[Key]] = None, template: Optional[str] = None,
                 batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 decode: Optional[Callable[[bytes], Any]] = None, with_name: bool = False,
                 batched: bool = True, continue_on_error: bool = False, output_format: str = ".tar",
                 client: Optional[Client] = None, global_order: bool = False):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.bucket = _resolve_bucket(bucket, client)
        self.keys: List[Key] = [k if isinstance(k, str) else (str(k[0]), str(k[1]))
                                for k in _select_names(self.bucket, prefix, names, template)]
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.decode = decode
        self.with_name = with_name
        self.batched = batched
        self.continue_on_error = continue_on_error
        self.output_format = output_format
        self.global_order = global_order
        self._epoch = _SharedEpoch(0)
        self._start: Optional[Tuple[int, int]] = None  # (epoch, position) from load_state_dict

    def __repr__(self) -> str:
        return (f"BatchDataset({self.bucket!r}, {len(self.keys)} items, batch_size {self.batch_size}, "
                f"rank {self.rank}/{self.world_size}, epoch {self.epoch})")

    @property
    def epoch(self) -> int:
        return self._epoch.value

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration reads (its order of items)."""
        self._epoch.value = int(epoch)

    def epoch_order(self, epoch: Optional[int] = None) -> List[Key]:
        """All items in the order of ``epoch`` (default: the current one), before the split."""
        return _epoch_order(self.keys, self.shuffle, self.seed, self.epoch if epoch is None else epoch)

    # ---- global order: positions and resume ----

    def _start_of(self, epoch: int) -> int:
        return self._start[1] if self._start is not None and self._start[0] == epoch else 0

    def position(self, steps: int) -> int:
        """Items of the current epoch's order consumed by the whole job after ``steps`` global
        steps of this iteration (counted from the loaded position, if any)."""
        if not self.global_order:
            raise ValueError("position() needs global_order=True")
        end = self._start_of(self.epoch) + steps * self.batch_size * self.world_size
        return min(end, len(self.keys))

    def state_dict(self, steps: int = 0) -> Dict[str, Any]:
        """Where the job is after ``steps`` global steps of this epoch (``global_order=True``):
        a small JSON-able dict for the training checkpoint, valid for any topology."""
        return {"version": 1, "epoch": self.epoch, "position": self.position(steps),
                "seed": self.seed, "shuffle": self.shuffle, "items": len(self.keys),
                "fingerprint": zlib.crc32(repr(self.keys).encode())}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes the state's epoch at its position (call it before the first
        ``iter(loader)``); later epochs are whole."""
        if not self.global_order:
            raise ValueError("load_state_dict needs global_order=True")
        if state.get("version") != 1:
            raise ValueError(f"unknown BatchDataset state version {state.get('version')!r}")
        if (state["items"], state["fingerprint"]) != (len(self.keys), zlib.crc32(repr(self.keys).encode())):
            raise ValueError("the state belongs to a different list of items")
        if (state["seed"], state["shuffle"]) != (self.seed, self.shuffle):
            raise ValueError("the state was taken with a different seed or shuffle setting")
        self._epoch.value = int(state["epoch"])
        self._start = (int(state["epoch"]), int(state["position"]))

    def global_steps(self, epoch: Optional[int] = None) -> List[List[Key]]:
        """This rank's batch of every global step left in ``epoch`` (``global_order=True``)."""
        e = self.epoch if epoch is None else epoch
        order = self.epoch_order(e)[self._start_of(e):]
        step_size = self.batch_size * self.world_size
        steps = []
        for at in range(0, len(order), step_size):
            step = order[at:at + step_size]
            if len(step) < step_size and self.drop_last:
                break
            steps.append(step[self.rank * self.batch_size:(self.rank + 1) * self.batch_size])
        return steps

    def assigned_batches(self, worker: int = 0, num_workers: int = 1,
                         epoch: Optional[int] = None) -> List[List[Key]]:
        """The batches (one request each) that DataLoader worker ``worker`` of ``num_workers``
        on this rank reads in ``epoch``, in order."""
        if self.global_order:
            return [b for b in self.global_steps(epoch)[worker::num_workers] if b]
        mine = _share(self.epoch_order(epoch), self.rank, self.world_size, worker, num_workers)
        batches = [mine[i:i + self.batch_size] for i in range(0, len(mine), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def __iter__(self) -> Iterator[Any]:
        worker, num_workers = _worker()
        for keys in self.assigned_batches(worker, num_workers, self.epoch):
            got = _fetch_batch(self.bucket, keys, continue_on_error=self.continue_on_error,
                               output_format=self.output_format)
            missing = [key for key, data in got if data is None]
            if missing:
                warnings.warn(f"{self.bucket!r}: {len(missing)} of {len(keys)} items could not be read "
                              f"and are left out of their batch: {missing[:5]}", stacklevel=2)
            values = [self._value(key, data) for key, data in got if data is not None]
            if not self.batched:
                yield from values
            elif values:
                yield values

    def _value(self, key: Key, data: bytes) -> Any:
        value = self.decode(data) if self.decode is not None else data
        return (key, value) if self.with_name else value


class Mix(IterableDataset):
    """Weighted mixing of iterable datasets: ``Mix([(ds_a, 0.7), (ds_b, 0.3)],
    samples_per_epoch=100_000)``.

    Each epoch yields exactly ``samples_per_epoch`` samples in all (over every rank and
    DataLoader worker). Which source each sample comes from is one global sequence, drawn
    with ``random.Random(f"{seed}/{epoch}/mix")`` by the weights (normalised), and split across
    ranks and workers like shards are, so the proportions hold over the whole job whatever its
    size; each (rank, worker) takes its samples from its own part of each source (the sources
    split themselves: ``ShardDataset``, ``BatchDataset`` or any iterable dataset that does; a
    ``ShardDataset`` needs at least as many shards as ranks × workers). A source that runs out
    within an epoch starts over (it is upsampled). A dict sample gets
    ``"__mix__"``: the index of its source. ``set_epoch`` reaches the sources too."""

    def __init__(self, sources: Sequence[Tuple[Any, float]], *, samples_per_epoch: int, seed: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None):
        if not sources:
            raise ValueError("Mix needs at least one (dataset, weight)")
        weights = [float(w) for _, w in sources]
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"Mix weights must be >= 0 with a positive sum, not {weights}")
        if samples_per_epoch <= 0:
            raise ValueError("samples_per_epoch must be positive")
        self.sources = [ds for ds, _ in sources]
        self.weights = [w / sum(weights) for w in weights]
        self.samples_per_epoch = int(samples_per_epoch)
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self._epoch = _SharedEpoch(0)

    def __repr__(self) -> str:
        parts = ", ".join(f"{w:.3f}" for w in self.weights)
        return f"Mix({len(self.sources)} sources, weights [{parts}], {self.samples_per_epoch} per epoch)"

    @property
    def epoch(self) -> int:
        return self._epoch.value

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch of the next iteration, here and in every source that has epochs."""
        self._epoch.value = int(epoch)
        for ds in self.sources:
            if hasattr(ds, "set_epoch"):
                ds.set_epoch(int(epoch))

    def choices(self, epoch: Optional[int] = None) -> List[int]:
        """The source of every sample of ``epoch`` (default: the current one), before the split."""
        e = self.epoch if epoch is None else epoch
        rng = random.Random(f"{self.seed}/{e}/mix")
        return rng.choices(range(len(self.sources)), weights=self.weights, k=self.samples_per_epoch)

    def __iter__(self) -> Iterator[Any]:
        rank, world_size = _rank_and_world(self.rank, self.world_size)
        worker, num_workers = _worker()
        mine = _share(self.choices(), rank, world_size, worker, num_workers)
        iters: List[Optional[Iterator[Any]]] = [None] * len(self.sources)
        for src in mine:
            sample = self._next(iters, src)
            if isinstance(sample, dict):
                sample["__mix__"] = src
            yield sample

    def _next(self, iters: List[Optional[Iterator[Any]]], src: int) -> Any:
        for fresh in (False, True):
            if iters[src] is None or fresh:
                iters[src] = iter(self.sources[src])
            try:
                return next(iters[src])
            except StopIteration:
                continue
        raise ValueError(f"Mix source {src} ({self.sources[src]!r}) yields no samples here")

"""Rendezvous (highest-random-weight) placement, bit-compatible with AIStore and the servers.

``digest(s) = XXH64(utf8(s), seed=1103515245)``; a node's score for an object is
``xoshiro256_mix(node.id_digest ^ digest(uname))`` and the highest-scoring active node owns it.
Targets with unequal capacity weights (the map's ``weight``, default 100) use weighted
rendezvous: the largest ``weight / -ln(u)`` wins, ``u`` the score mapped to (0, 1) — as the
servers compute it (``core/src/hrw.rs``); with equal weights placement is AIStore's.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

import xxhash

HRW_SEED = 1103515245
"""AIStore's MLCG32: the XXH64 seed of every placement digest."""

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_INACTIVE = (1 << 2) | (1 << 3)  # maintenance, decommission
DEFAULT_WEIGHT = 100
"""A target's placement weight when the map states none."""
MAX_COUNTED = 100_000
"""Items of a get-batch whose owners are counted to pick its target (as the proxy does)."""


def digest(name: str) -> int:
    """64-bit placement digest of a name (object uname, node id or mountpath)."""
    return xxhash.xxh64_intdigest(name.encode("utf-8"), seed=HRW_SEED)


def xoshiro256_mix(x: int) -> int:
    """AIStore's ``xoshiro256.Hash``: a keyed 64-bit mixer."""
    z = (x + _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    z = ((z ^ (z >> 31)) + _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    z = ((z ^ (z >> 31)) * 5) & _M64
    z = ((z << 7) | (z >> 57)) & _M64
    return (z * 9) & _M64


def uname(bucket: str, obj: str, provider: str = "ais", ns_uuid: str = "", ns_name: str = "") -> str:
    """Placement name of an object: ``provider/@uuid#ns/bucket/object``."""
    return f"{provider}/@{ns_uuid}#{ns_name}/{bucket}/{obj}"


def pick(object_digest: int, node_digests: Iterable[int]) -> Optional[int]:
    """Index of the highest-scoring candidate digest (first one wins exact ties), or None."""
    best_i, best = None, -1
    for i, d in enumerate(node_digests):
        s = xoshiro256_mix(d ^ object_digest)
        if s > best:
            best_i, best = i, s
    return best_i


def weighted_key(score: int, weight: int) -> float:
    """Weighted rendezvous key: ``weight / -ln(u)``, ``u`` = the score's top 52 bits in (0, 1)
    (exact in a float, never 0 or 1)."""
    u = ((score >> 12) + 0.5) * (1.0 / (1 << 52))
    return max(weight, 1) / -math.log(u)


def pick_weighted(object_digest: int, candidates: Sequence[Tuple[int, int]]) -> Optional[int]:
    """``pick`` over ``(digest, weight)`` candidates: plain HRW when all weights are equal,
    weighted rendezvous otherwise (first one wins exact ties)."""
    if len({w for _, w in candidates}) <= 1:
        return pick(object_digest, (d for d, _ in candidates))
    best_i, best = None, -1.0
    for i, (d, w) in enumerate(candidates):
        k = weighted_key(xoshiro256_mix(d ^ object_digest), w)
        if k > best:
            best_i, best = i, k
    return best_i


def _targets(smap: Mapping[str, Any]) -> Tuple[List[Mapping[str, Any]], List[Tuple[int, int]]]:
    """The active targets of a map in daemon-id order, and their (id digest, weight)."""
    tmap = smap.get("tmap") or {}
    nodes = [tmap[k] for k in sorted(tmap) if not int(tmap[k].get("flags") or 0) & _INACTIVE]
    return nodes, [(int(n.get("id_digest") or digest(n["daemon_id"])), int(n.get("weight") or DEFAULT_WEIGHT))
                   for n in nodes]


def owner(smap: Mapping[str, Any], object_uname: str) -> Optional[Mapping[str, Any]]:
    """The target (Snode dict from a cluster map) that owns ``object_uname``, or None.

    Targets in maintenance or being decommissioned are skipped; candidates are taken in
    daemon-id order, as the servers do.
    """
    nodes, candidates = _targets(smap)
    i = pick_weighted(digest(object_uname), candidates)
    return None if i is None else nodes[i]


def designated(smap: Mapping[str, Any], unames: Sequence[str]) -> Optional[Mapping[str, Any]]:
    """The target that should assemble a get-batch of the objects ``unames``: the one owning
    the most of them, as the proxy picks it (``/v1/ml/moss``). A tie (or no names) is broken
    by HRW of ``moss/<first uname>`` among the tied targets (the proxy breaks it at random), so
    the same batch always goes to the same target and different batches spread. None when
    the map has no active target."""
    nodes, candidates = _targets(smap)
    if not nodes:
        return None
    digests = [d for d, _ in candidates]
    counts = [0] * len(nodes)
    for un in unames[:MAX_COUNTED]:
        counts[pick_weighted(digest(un), candidates)] += 1  # type: ignore[index]
    top = max(counts)
    tied = [i for i, c in enumerate(counts) if c == top]
    if len(tied) == 1:
        return nodes[tied[0]]
    key = digest(f"moss/{unames[0] if unames else ''}")
    return nodes[tied[pick(key, (digests[i] for i in tied))]]  # type: ignore[index]

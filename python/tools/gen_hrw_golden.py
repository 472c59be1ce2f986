#!/usr/bin/env python3
"""Generate core/testdata/hrw_golden.json from the aistore Python SDK's own HRW code.

Everything that is hashed or selected here goes through the installed `aistore`
package (pinned: aistore==2.0.0):

  * aistore.sdk.utils.get_digest(name)       -> xxhash.xxh64(name.encode("utf-8"),
                                                seed=aistore.sdk.const.XX_HASH_SEED).intdigest()
                                                (XXH64, NOT XXH3; seed 1103515245 = MLCG32)
  * aistore.sdk.utils.xoshiro256_hash(seed)  -> the splitmix64-x2 / xoshiro256** mixer
  * aistore.sdk.types.Smap.get_target_for_object(uname)
                                             -> the function used by
                                                Object.get_reader(direct=True)
                                                (aistore/sdk/obj/object_client.py)
  * Object.uname (Client(...).bucket(...).object(...).uname) builds the unames.

The Smap is built with the SDK's own pydantic models (Smap / Snode / NetInfo), with
each Snode.id_digest = get_digest(daemon_id), i.e. what an AIS proxy puts into the
"id_digest" field of the Smap JSON (Go: xxhash.Checksum64S(id, MLCG32)).

Mountpath placement has no SDK function; it mirrors Go's fs.Hrw using the same two
SDK primitives: argmax over mountpaths of xoshiro256_hash(get_digest(mpath) ^ get_digest(uname)).

Usage (from the repo root):
    .venv/bin/python python/tools/gen_hrw_golden.py [output_path]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from aistore.sdk import Client
from aistore.sdk.const import XX_HASH_SEED
from aistore.sdk.namespace import Namespace
from aistore.sdk.types import NetInfo, Smap, Snode
from aistore.sdk.utils import get_digest, xoshiro256_hash
from aistore.version import __version__ as AISTORE_SDK_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "core" / "testdata" / "hrw_golden.json"

U64_MAX = (1 << 64) - 1

# Snode.flags bits that make the SDK (and Go) skip a target: 1<<2 maintenance, 1<<3 decommission.
FLAG_MAINT = 1 << 2

FORMAT = """\
hrw_golden.json - HRW (rendezvous) placement vectors produced by the aistore Python SDK @SDK@.
All 64-bit values are JSON unsigned integers (0..2^64-1); parse them as u64.
digest(s)  = XXH64(utf8(s), seed=1103515245)  [aistore.sdk.utils.get_digest -> xxhash.xxh64(...).intdigest()]
mix(x)     = aistore.sdk.utils.xoshiro256_hash(x)  (see top-level "xoshiro256_vectors")
score(node, uname) = mix(node_digest XOR digest(uname))
winner     = the node with the maximum score, skipping targets whose flags & 0b1100 != 0
             (maintenance/decommission). Ties never occur in this file (checked at generation time).
Top-level keys:
  sdk_version, xxhash_seed: provenance / constants.
  xxhash64_vectors: [{"input": str, "digest": u64}] - XXH64 with the seed above over utf-8 bytes.
  xoshiro256_vectors: [{"input": u64, "output": u64}] - the mixer alone.
  node_sets: {set_name: {"kind": "targets"|"mountpaths", "nodes": [{"id": str, "digest": u64, "flags": int}]}}
     kind=targets: computed with Smap.get_target_for_object (the SDK's direct-mode target selection);
                   node digest = Snode.id_digest = digest(daemon_id).
     kind=mountpaths: same math, node digest = digest(mountpath string) (Go fs.Hrw: PathDigest).
  objects: [{"provider", "namespace" ({"uuid","name"} or null), "bucket", "object",
             "uname", "digest": u64, "winners": {set_name: winning node id}}]
     uname = provider + "/@" + ns.uuid + "#" + ns.name + "/" + bucket + "/" + object  (SDK Object.uname;
             with no namespace the middle part is "@#").
  sample_scores: for the first 5 objects, full per-node score tables for the 3-target set
     {"uname", "set", "scores": {node_id: u64}} to help debugging.
""".replace("@SDK@", AISTORE_SDK_VERSION)


# ---------------------------------------------------------------------------
# node sets
# ---------------------------------------------------------------------------

TARGET_SETS = {
    "t1_single": [("t1ABCxyz", 0)],
    "t3": [("t1ABCxyz", 0), ("t2DEFuvw", 0), ("t3GHIrst", 0)],
    # Same ids as "t3" but t2 is in maintenance mode -> must never win.
    "t3_t2_maint": [("t1ABCxyz", 0), ("t2DEFuvw", FLAG_MAINT), ("t3GHIrst", 0)],
    "t10": [
        ("QmZxkTfA", 0),
        ("bRtYwPoL", 0),
        ("x9Ke2VdN", 0),
        ("hUjMnB7c", 0),
        ("TgFrEd4s", 0),
        ("Lp0oIkJu", 0),
        ("zZ8yXwVq", 0),
        ("NmKl3PoI", 0),
        ("aSdF6gHj", 0),
        ("Wq1eR5tY", 0),
    ],
}

MOUNTPATH_SETS = {
    "mp4": ["/data/mp1", "/data/mp2", "/data/mp3", "/data/mp4"],
    "mp8": [f"/ais/disk{i}" for i in range(1, 9)],
}


def make_smap(nodes) -> Smap:
    """Build an Smap with the SDK's own pydantic models (as decoded from a proxy's JSON)."""
    tmap = {}
    for i, (tid, flags) in enumerate(nodes):
        port = str(9100 + i)
        tmap[tid] = Snode(
            daemon_id=tid,
            daemon_type="target",
            public_net=NetInfo(
                node_hostname="127.0.0.1",
                daemon_port=port,
                direct_url=f"http://127.0.0.1:{port}",
            ),
            flags=flags,
            id_digest=get_digest(tid),
        )
    proxy = Snode(
        daemon_id="pPRIMARY",
        daemon_type="proxy",
        public_net=NetInfo(
            node_hostname="127.0.0.1",
            daemon_port="9080",
            direct_url="http://127.0.0.1:9080",
        ),
        id_digest=get_digest("pPRIMARY"),
    )
    # Round-trip through JSON to make sure the model accepts what we would put on the wire.
    return Smap.model_validate_json(
        Smap(tmap=tmap, pmap={"pPRIMARY": proxy}, proxy_si=proxy, version=1).model_dump_json()
    )


# ---------------------------------------------------------------------------
# object names
# ---------------------------------------------------------------------------


def object_specs():
    """(provider, Namespace|None, bucket, object) tuples; deterministic."""
    specs = []
    for i in range(1, 101):
        specs.append(("ais", None, "imagenet", f"train/{i:04d}.jpg"))
    for i in range(20):
        specs.append(("ais", None, "ds", f"shards/shard-{i:06d}.tar"))
    unicode_objs = [
        "данные/файл.txt",
        "日本語/テスト画像.png",
        "emoji/🚀🔥.bin",
        "mixed/ñandú-über-straße.csv",
        "中文/路径/对象",
        "عربي/ملف.json",
        "greek/αβγδε.dat",
        "combining/e\u0301te\u0301.txt",
        "hangul/한국어.txt",
        "math/∑∫√∞.txt",
    ]
    for o in unicode_objs:
        specs.append(("ais", None, "unicode-bck", o))
    long_objs = [
        "a" * 255,
        "deep/" * 60 + "leaf.bin",
        "x" * 1024,
        "/".join(f"dir{i}" for i in range(100)) + "/file.txt",
        "long-" + "0123456789" * 50,
    ]
    for o in long_objs:
        specs.append(("ais", None, "long", o))
    special = [
        "with space.txt",
        "percent%20encoded",
        "question?mark",
        "hash#sign",
        "plus+sign",
        "amp&and=eq",
        "trailing/slash/",
        "double//slash",
        ".hidden",
        "..dots..",
        "quote'\"",
        "tab\tchar",
        "",  # empty object name (uname ends with "/")
        "a",
        "0",
    ]
    for o in special:
        specs.append(("ais", None, "special", o))
    prod = Namespace(uuid="", name="prod")
    for o in ["a.txt", "2024/01/01/app.log", "2024/01/02/app.log", "b.txt", "c.txt"]:
        specs.append(("aws", prod, "logs", o))
    remote_ais = Namespace(uuid="Bp8BWRgo", name="ns1")
    for o in ["obj1", "obj2", "dir/obj3", "img/0001.jpg", "img/0002.jpg"]:
        specs.append(("ais", remote_ais, "bucket", o))
    for o in ["x", "y/z", "model.safetensors", "ckpt/step-100.pt", "data.parquet"]:
        specs.append(("gcp", None, "gbucket", o))
    for o in ["k1", "k2", "path/to/k3", "k4.gz", "k5"]:
        specs.append(("azure", None, "container", o))
    for i in range(20):
        specs.append(("ais", None, "bench", f"obj-{i}"))
    return specs


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)

    # No request is made: Client/bucket/object are pure factories.
    client = Client("http://127.0.0.1:1")

    smaps = {name: make_smap(nodes) for name, nodes in TARGET_SETS.items()}

    node_sets = {}
    for name, nodes in TARGET_SETS.items():
        node_sets[name] = {
            "kind": "targets",
            "nodes": [
                {"id": tid, "digest": smaps[name].tmap[tid].id_digest, "flags": flags}
                for tid, flags in nodes
            ],
        }
    for name, mpaths in MOUNTPATH_SETS.items():
        node_sets[name] = {
            "kind": "mountpaths",
            "nodes": [{"id": mp, "digest": get_digest(mp), "flags": 0} for mp in mpaths],
        }

    objects = []
    sample_scores = []
    seen = set()
    for provider, ns, bck, obj in object_specs():
        uname = client.bucket(bck, provider=provider, namespace=ns).object(obj).uname
        assert uname not in seen, uname
        seen.add(uname)
        digest = get_digest(uname)
        winners = {}
        for name, nodes in TARGET_SETS.items():
            chosen = smaps[name].get_target_for_object(uname).daemon_id
            # cross-check with the raw primitives and make sure there is no tie
            scores = sorted(
                (xoshiro256_hash(get_digest(tid) ^ digest), tid)
                for tid, flags in nodes
                if not flags & (FLAG_MAINT | (1 << 3))
            )
            assert scores[-1][1] == chosen, (uname, name)
            assert len(scores) == 1 or scores[-1][0] != scores[-2][0], ("tie", uname, name)
            winners[name] = chosen
        for name, mpaths in MOUNTPATH_SETS.items():
            scores = sorted((xoshiro256_hash(get_digest(mp) ^ digest), mp) for mp in mpaths)
            assert scores[-1][0] != scores[-2][0], ("tie", uname, name)
            winners[name] = scores[-1][1]
        objects.append(
            {
                "provider": provider,
                "namespace": None if ns is None else {"uuid": ns.uuid, "name": ns.name},
                "bucket": bck,
                "object": obj,
                "uname": uname,
                "digest": digest,
                "winners": winners,
            }
        )
        if len(sample_scores) < 5:
            sample_scores.append(
                {
                    "uname": uname,
                    "set": "t3",
                    "scores": {
                        tid: xoshiro256_hash(get_digest(tid) ^ digest)
                        for tid, _ in TARGET_SETS["t3"]
                    },
                }
            )

    xxh_inputs = ["", "a", "abc", "t1ABCxyz", "/data/mp1", "ais/@#/imagenet/train/0001.jpg",
                  "日本語", "x" * 100]
    xxhash64_vectors = [{"input": s, "digest": get_digest(s)} for s in xxh_inputs]

    xo_inputs = [0, 1, 2, 42, 0x9E3779B97F4A7C15, 1 << 63, U64_MAX, U64_MAX - 1,
                 0xDEADBEEFCAFEBABE, 1103515245, get_digest("t1ABCxyz")]
    xoshiro256_vectors = [{"input": x, "output": xoshiro256_hash(x)} for x in xo_inputs]

    doc = {
        "format": FORMAT,
        "sdk_version": AISTORE_SDK_VERSION,
        "xxhash_seed": XX_HASH_SEED,
        "xxhash64_vectors": xxhash64_vectors,
        "xoshiro256_vectors": xoshiro256_vectors,
        "node_sets": node_sets,
        "objects": objects,
        "sample_scores": sample_scores,
    }
    tmp = out.with_suffix(".json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(tmp, out)

    counts = {name: {} for name in node_sets}
    for o in objects:
        for name, w in o["winners"].items():
            counts[name][w] = counts[name].get(w, 0) + 1
    print(f"wrote {out}: {len(objects)} objects, {len(node_sets)} node sets")
    for name, c in counts.items():
        print(f"  {name}: {dict(sorted(c.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Folds `perf script` output into one line per distinct stack (`frame;frame;... count`), the
input of flame-graph tools (inferno, speedscope, flamegraph.pl). Frames are function names
(Rust hashes and argument lists trimmed); `--top N` prints the N heaviest self frames and the
heaviest inclusive frames instead of the folded stacks.

Usage: perf script -i perf.data | benches/fold_stacks.py [--top 40] > get-16k.folded
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

HASH = re.compile(r"::h[0-9a-f]{16}$")


def frame_name(line: str) -> str:
    # "\t    55d1c0a3b2c1 tokio::runtime::task::raw::poll+0x21 (/path/gristd)"
    parts = line.strip().split(None, 1)
    if len(parts) < 2:
        return "[unknown]"
    sym = parts[1].rsplit(" (", 1)[0]
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    sym = HASH.sub("", sym)
    return sym.replace(";", ":")


def stacks(lines):
    frames: list[str] = []
    in_sample = False
    for line in lines:
        if not line.strip():
            if frames:
                yield ";".join(reversed(frames))
            frames, in_sample = [], False
        elif not line[0].isspace():
            in_sample = True
        elif in_sample:
            frames.append(frame_name(line))
    if frames:
        yield ";".join(reversed(frames))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    folded = collections.Counter(stacks(sys.stdin))
    if not args.top:
        for stack, n in sorted(folded.items()):
            print(f"{stack} {n}")
        return
    total = sum(folded.values())
    own: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    for stack, n in folded.items():
        frames = stack.split(";")
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    print(f"{total} samples\n\nself:")
    for f, n in own.most_common(args.top):
        print(f"{100 * n / total:6.2f}%  {f}")
    print("\ninclusive:")
    for f, n in incl.most_common(args.top):
        print(f"{100 * n / total:6.2f}%  {f}")


if __name__ == "__main__":
    main()

"""Brace templates naming many objects at once, as AIStore and WebDataset write them.

``shard-{0000..0099}.tar`` names 100 objects (a bound written with a leading zero pads every
number to the wider bound: ``shard-0000.tar`` ... ``shard-0099.tar``); ``{0..10..2}`` steps by 2; ``{train,val}`` lists
alternatives; several braces multiply out, left to right.
"""

from __future__ import annotations

import re
from typing import List

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(\d+))?$")


def expand_template(template: str) -> List[str]:
    """Every name the template stands for, in order. A template without braces is one name.

    Raises ``ValueError`` for an empty brace, a zero step, or an unbalanced ``{``/``}``.
    """
    m = _BRACE.search(template)
    if m is None:
        if "{" in template or "}" in template:
            raise ValueError(f"unbalanced brace in template {template!r}")
        return [template]
    head, body, tail = template[: m.start()], m.group(1), template[m.end():]
    if "{" in head or "}" in head:
        raise ValueError(f"unbalanced brace in template {template!r}")
    r = _RANGE.match(body)
    if r:
        lo_s, hi_s, step_s = r.groups()
        lo, hi, step = int(lo_s), int(hi_s), int(step_s or 1)
        if step == 0:
            raise ValueError(f"zero step in template {template!r}")
        padded = any(len(b.lstrip("-")) > 1 and b.lstrip("-").startswith("0") for b in (lo_s, hi_s))
        width = max(len(lo_s), len(hi_s)) if padded else 0
        direction = 1 if hi >= lo else -1
        parts = [f"{i:0{width}d}" if width else str(i) for i in range(lo, hi + direction, step * direction)]
    elif "," in body:
        parts = body.split(",")
    else:
        raise ValueError(f"brace {{{body}}} in template {template!r} is neither a range nor a list")
    rest = expand_template(tail)
    return [head + p + r for p in parts for r in rest]

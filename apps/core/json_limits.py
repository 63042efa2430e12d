"""JSON that cannot hurt the parser: a nesting ceiling checked on the raw bytes, before parsing.

Python's json module recurses once per `[` / `{`: a body of 100,000 brackets ends in RecursionError
(not ValueError), which a door catching ValueError turns into a 500. `json_depth_exceeds` scans the
bytes without building anything, so a hostile body is refused before a deep structure exists.
Every door parses with `json_loads_limited`, whose refusal is a ValueError like any other bad JSON.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from django.conf import settings

# A JSON string token (escapes included); removed before counting so brackets inside strings don't count.
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
# Every byte but a bracket is deleted; then `[`/`{` weigh +1 and `]`/`}` weigh -1.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_WEIGHT = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class JsonTooDeep(ValueError):
    """Nesting beyond the ceiling: a ValueError, so every `except ValueError` parse guard refuses it."""


def max_json_depth() -> int:
    """The configured ceiling (`OPENWOP_MAX_JSON_DEPTH`); 0 turns the check off."""
    return int(getattr(settings, "OPENWOP_MAX_JSON_DEPTH", 64))


def json_depth_exceeds(data: bytes | str, max_depth: int) -> bool:
    """True when brackets outside strings nest deeper than `max_depth` (0: never).

    Fast path: a body with no more opening brackets than the ceiling cannot exceed it. Unbalanced
    or malformed input is judged on its brackets alone; the parser refuses it afterwards anyway."""
    if max_depth <= 0:
        return False
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return False
    brackets = _STRING_RE.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if len(brackets) <= max_depth:
        return False
    return max(accumulate(_WEIGHT[b] for b in brackets)) > max_depth


def json_loads_limited(data: bytes | bytearray | str, *, max_depth: int | None = None) -> Any:
    """`json.loads` behind the depth ceiling. Raises ValueError (JsonTooDeep, JSONDecodeError) or
    UnicodeDecodeError, never RecursionError."""
    ceiling = max_json_depth() if max_depth is None else max_depth
    if json_depth_exceeds(data, ceiling):
        raise JsonTooDeep(f"JSON nesting deeper than {ceiling} levels.")
    try:
        return json.loads(data)
    except RecursionError:  # only reachable with the ceiling off
        raise JsonTooDeep("JSON nesting too deep to parse.") from None

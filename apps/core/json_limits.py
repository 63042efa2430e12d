"""JSON that cannot hurt the parser: a nesting ceiling checked on the raw bytes, before parsing.

Python's json module recurses once per `[` / `{`: a body of 100,000 brackets ends in RecursionError
(not ValueError), which a door catching ValueError turns into a 500. `json_depth_exceeds` scans the
bytes without building anything, so a hostile body is refused before a deep structure exists.
Every door parses with `json_loads_limited`, whose refusal is a ValueError like any other bad JSON.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # not in the DRF stubs

from apps.core.caller_input import caller_json_check

# A JSON string token (escapes included); removed before counting so brackets inside strings don't count.
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
# Every byte but a bracket is deleted; then `[`/`{` weigh +1 and `]`/`}` weigh -1.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_WEIGHT = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


# A \uD800-\uDFFF escape: legal JSON text, but a lone one decodes to a string no codec can encode
# (I-JSON, RFC 7493 §2.1, forbids it). Only a body holding one is walked to look for a lone one.
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class JsonLoneSurrogate(ValueError):
    """A string that is not Unicode (an unpaired surrogate escape): refused like malformed JSON."""


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity).")


def _finite_float(text: str) -> float:
    """1e999 parses to inf in Python, which no JSON encoder or PostgreSQL jsonb can store."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"The number {text[:40]} is out of range.")
    return value


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
    """`json.loads` behind the depth ceiling, refusing what is not interoperable JSON (I-JSON): strings
    that are not Unicode, NaN / Infinity, numbers out of float range. Raises
    ValueError (JsonTooDeep, JsonLoneSurrogate, JSONDecodeError) or UnicodeDecodeError, never
    RecursionError."""
    ceiling = max_json_depth() if max_depth is None else max_depth
    # Strict UTF-8 (I-JSON): json.loads would decode bytes with "surrogatepass", letting raw
    # surrogate bytes through, and would guess UTF-16/32.
    text = bytes(data).decode("utf-8").removeprefix("\ufeff") if isinstance(data, bytes | bytearray) else data
    if isinstance(data, str):
        text.encode("utf-8")  # a str holding a lone surrogate raises UnicodeEncodeError (a ValueError)
    if json_depth_exceeds(text, ceiling):
        raise JsonTooDeep(f"JSON nesting deeper than {ceiling} levels.")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:  # only reachable with the ceiling off
        raise JsonTooDeep("JSON nesting too deep to parse.") from None
    if _SURROGATE_ESCAPE_RE.search(text) and _has_lone_surrogate(value):
        raise JsonLoneSurrogate("JSON text holds an unpaired surrogate escape.")
    return value


_NOT_READ = object()


def request_json(request: Any) -> Any:
    """`json_loads_limited(request.body)`, parsed once per request: the request limits, the stream
    check, the JSON-RPC id of a refusal and the view all read the same body. The value is shared:
    readers must not modify it. Raises what `json_loads_limited` raises, every time."""
    parsed = getattr(request, "_openwop_json", _NOT_READ)
    if parsed is _NOT_READ:
        try:
            parsed = json_loads_limited(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            parsed = exc  # kept as is: no JSON value is an exception
        request._openwop_json = parsed
    if isinstance(parsed, Exception):
        raise parsed.with_traceback(None)
    return parsed


class LimitedJSONParser(JSONParser):
    """DRF's JSON parser on the shared loader: the REST wire refuses what the protocol doors refuse,
    including what parses but no column can hold (a NUL, a number past a double: 400, not a
    DataError; apps/core/caller_input.py)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            value = json_loads_limited(stream.read().decode(encoding))
        except (ValueError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        caller_json_check(value, field="body")
        return value

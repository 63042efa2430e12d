"""Caller strings and numbers, checked where they enter.

What the storage and the wire types cannot hold must be refused by the door that received it, as
that binding's invalid-params error, before anything stores or converts it: PostgreSQL's text and
jsonb refuse U+0000 (a DataError mid-transaction), a varchar refuses a
longer value, and a protobuf Struct (an A2A data part) or a JavaScript client holds numbers as IEEE
doubles (an int past 1.8e308 is an OverflowError in ParseDict). Checked at the door, the answer
does not depend on which database or column would have refused the value.

Every door's parse step calls `caller_json_check` on the request's parameters (or body) and
`caller_text_check` on a string it stores in a column; `ascii_digits` reads a number a caller
wrote as text. The errors are `CallerInputInvalid`, a ValidationFailed: REST's 400 envelope, and
each protocol door's invalid-params mapping.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from apps.core.errors import ValidationFailed

NUL = "\x00"
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_@$-]{0,63}")


class CallerInputInvalid(ValidationFailed):
    """A caller value no store or wire type here can hold; `field` is its path in the request."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, details={"field": field})
        self.field = field


def text_problem(value: str, *, max_length: int | None = None) -> str | None:
    """Why `value` cannot be stored as text (None when it can)."""
    if NUL in value:
        return "must not contain a NUL character (U+0000)"
    if max_length is not None and len(value) > max_length:
        return f"must be at most {max_length} characters"
    return None


def number_problem(value: int | float) -> str | None:
    """Why `value` is not a number a double holds (None when it is). bool is fine (an int)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else "must be a finite number"
    return None if abs(value) <= sys.float_info.max else "is beyond the range of a double"


def caller_text_check(value: str, *, field: str, max_length: int | None = None) -> None:
    problem = text_problem(value, max_length=max_length)
    if problem is not None:
        raise CallerInputInvalid(f"{field} {problem}.", field=field)


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    # A hostile key (NUL, 5,000 characters) is not echoed whole into the error message.
    return f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[…]"


_DOUBLE_MAX = sys.float_info.max


def _json_clean(value: Any) -> bool:
    """The common case, fast (every request on every door): no paths built, exact types only
    (json.loads makes nothing else; a bool is not an int here, and is fine anyway)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if NUL in item:
                return False
        elif kind is dict:
            if any(NUL in key for key in item if type(key) is str):
                return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is int:
            if not -_DOUBLE_MAX <= item <= _DOUBLE_MAX:
                return False
        elif kind is float and not math.isfinite(item):
            return False
    return True


def caller_json_check(value: Any, *, field: str) -> None:
    """Refuse a NUL in any string (keys too) and any number a double cannot hold, anywhere in a
    parsed JSON value. Iterative: the depth was bounded by the parser (apps/core/json_limits.py)."""
    if _json_clean(value):
        return
    stack: list[tuple[str, Any]] = [(field, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                raise CallerInputInvalid(f"{path} {text_problem(item)}.", field=path)
        elif isinstance(item, int | float):
            problem = number_problem(item)
            if problem is not None:
                raise CallerInputInvalid(f"{path} {problem}.", field=path)
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and NUL in key:
                    raise CallerInputInvalid(f"A member name in {path} {text_problem(key)}.", field=path)
                stack.append((_child(path, key), child))
        elif isinstance(item, list):
            stack.extend((_child(path, index), child) for index, child in enumerate(item))


def ascii_digits(value: str, *, max_digits: int) -> int | None:
    """`value` as a non-negative int when it is 1 to `max_digits` ASCII digits, else None.
    `str.isdigit()` accepts `²` and Arabic-Indic digits, and `int()` raises past 4,300 digits."""
    if not 0 < len(value) <= max_digits or not value.isascii() or not value.isdigit():
        return None
    return int(value)

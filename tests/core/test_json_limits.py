"""The nesting ceiling is decided on the raw bytes, agrees with the real depth, and is never fooled
by brackets inside strings (apps/core/json_limits.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.core.json_limits import JsonTooDeep, json_depth_exceeds, json_loads_limited

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('[]{}"\\ab\u00e9\U0001f600')),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(json_values, st.booleans())
def test_the_scan_agrees_with_the_parsed_depth(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only)
    real = depth(value)
    assert not json_depth_exceeds(raw.encode(), real)
    assert not json_depth_exceeds(raw, real)
    if real > 1:  # a ceiling of 0 means no ceiling
        assert json_depth_exceeds(raw.encode(), real - 1)


def test_brackets_in_strings_and_escaped_quotes_do_not_count() -> None:
    raw = json.dumps({"a": '[[[[[[[[[[{{{{{{{{\\"[[[[[[[[[', "b": ['"]]]]]]]]"']})
    assert not json_depth_exceeds(raw, 2)
    assert json_loads_limited(raw, max_depth=2)["b"] == ['"]]]]]]]]"']


@pytest.mark.parametrize("ceiling", [0, 64])
def test_a_hostile_depth_is_a_value_error_never_a_recursion_error(ceiling: int) -> None:
    hostile = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(JsonTooDeep):
        json_loads_limited(hostile, max_depth=ceiling)
    with pytest.raises(ValueError):
        json_loads_limited(b'{"a":' * 100 + b"1" + b"}" * 100, max_depth=64)
    assert json_loads_limited(b'{"a":' * 64 + b"1" + b"}" * 64, max_depth=64)


def test_unbalanced_and_non_json_bytes_are_left_to_the_parser() -> None:
    assert not json_depth_exceeds(b"]]]]]]]]]]]]", 2)
    assert json_depth_exceeds(b"[[[[", 2)
    with pytest.raises(ValueError):
        json_loads_limited(b"\xff\xfe[[[", max_depth=2)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "\\ud800"}',
        b'{"\\udc00x": 1}',
        b'["ok", ["\\ud83d"]]',
        b"NaN",
        b'{"a": Infinity}',
        b"[-Infinity]",
        b'{"n": 1e999}',
        b'{"n": -1e400}',
        b'{"a": "\xed\xa0\x80"}',
        b"\xff\xfe[\x00]\x00",
        '{"a": "\ud800"}',
    ],
)
def test_what_is_not_interoperable_json_is_refused(raw: bytes | str) -> None:
    with pytest.raises(ValueError):
        json_loads_limited(raw)


def test_paired_surrogates_big_finite_numbers_and_a_bom_are_fine() -> None:
    assert json_loads_limited(b"\xef\xbb\xbf{}") == {}
    assert json_loads_limited(b'{"a": "\\ud83d\\ude00", "n": 1e308, "i": 100000000000000000000000}') == {
        "a": "\U0001f600",
        "n": 1e308,
        "i": 10**23,
    }

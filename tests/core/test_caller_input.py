"""apps/core/caller_input.py: the one check every door's parse step runs on caller values (the
doors' answers are tested live in tests/hardening/test_caller_input_*.py)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from apps.core.caller_input import CallerInputInvalid, ascii_digits, caller_json_check, caller_text_check


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"a": [1, {"b": "x\x00y"}]}, "params.a[1].b"),
        ({"a\x00": 1}, "params"),
        ({"n": 10**309}, "params.n"),
        ([-(10**400)], "params[0]"),
        ({"f": float("inf")}, "params.f"),
        ({"x" * 100: "\x00"}, "params[…]"),  # a hostile key is not echoed into the message
    ],
)
def test_json_values_no_column_or_double_can_hold(value: Any, field: str) -> None:
    with pytest.raises(CallerInputInvalid) as refused:
        caller_json_check(value, field="params")
    assert refused.value.field == field and refused.value.details == {"field": field}
    assert refused.value.code == "validation_error" and "x" * 100 not in refused.value.message


def test_json_values_that_fit() -> None:
    big = int(sys.float_info.max)  # the largest integer a double holds exactly is still a number
    caller_json_check({"a": ["é", "", 0, -1, big, -big, 1.5, True, None, {"k": "\u202e"}]}, field="params")


def test_text_lengths_match_the_column() -> None:
    caller_text_check("m" * 512, field="messageId", max_length=512)
    with pytest.raises(CallerInputInvalid, match="at most 512"):
        caller_text_check("m" * 513, field="messageId", max_length=512)
    with pytest.raises(CallerInputInvalid, match="NUL"):
        caller_text_check("a\x00", field="nodeId")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("42", 42), ("²", None), ("٣", None), ("", None), ("-1", None), (" 1", None), ("9" * 20, None)],
)
def test_ascii_digits_only(text: str, expected: int | None) -> None:
    assert ascii_digits(text, max_digits=19) == expected

"""Tenant-bound ids and the one-segment `~HH` projection (identity.md §5, RFC 0184)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.core.errors import ValidationFailed
from apps.core.ids import (
    BOUND_ID_RE,
    OPAQUE_RE,
    mint_bound_id,
    mint_opaque,
    project_id,
    split_bound_id,
    unproject_id,
)

tenant_ids = st.from_regex(r"\A[A-Za-z0-9._~-]{1,40}\Z")
opaques = st.from_regex(r"\A[A-Za-z0-9._~-]{16,60}\Z")
SEGMENT_RE = re.compile(r"^[A-Za-z0-9._~-]*$")


@given(tenant=tenant_ids, opaque=opaques)
def test_projection_round_trips_and_is_one_path_segment(tenant: str, opaque: str) -> None:
    bound = f"{tenant}/{opaque}"
    wire = project_id(bound)
    assert "/" not in wire and "%" not in wire
    assert SEGMENT_RE.match(wire)
    assert unproject_id(wire) == bound


@given(text=st.text(min_size=1, max_size=60))
def test_projection_is_total_and_injective_over_any_text(text: str) -> None:
    assert unproject_id(project_id(text)) == text


@given(tenant=tenant_ids, opaque=opaques)
def test_percent_encoded_slash_is_accepted(tenant: str, opaque: str) -> None:
    bound = f"{tenant}/{opaque}"
    legacy = project_id(tenant) + "%2F" + project_id(opaque)
    assert unproject_id(legacy) == bound
    assert unproject_id(legacy.replace("%2F", "%2f")) == bound


def test_projection_escapes_uppercase_hex() -> None:
    assert project_id("acme/r:1~x") == "acme~2Fr~3A1~7Ex"


@pytest.mark.parametrize("wire", ["acme~2", "acme~", "acme~ZZxyz", "acme~2G", "ab%2", "~"])
def test_dangling_escape_is_validation_error(wire: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        unproject_id(wire)
    assert info.value.code == "validation_error"
    assert info.value.status == 400


@given(st.integers(min_value=22, max_value=128))
def test_minted_opaque_matches_grammar_and_never_has_tilde(length: int) -> None:
    opaque = mint_opaque(length)
    assert len(opaque) == length
    assert OPAQUE_RE.match(opaque)
    assert "~" not in opaque


def test_minted_opaque_carries_at_least_128_bits() -> None:
    # 64-symbol alphabet: 6 bits a character; the default length must reach 128 bits.
    assert len(mint_opaque()) * 6 >= 128
    with pytest.raises(ValueError, match="128 bits"):
        mint_opaque(21)


def test_minted_ids_are_distinct() -> None:
    assert len({mint_opaque() for _ in range(2000)}) == 2000


@given(tenant=st.from_regex(r"\A[A-Za-z0-9._-]{1,40}\Z"))
def test_minted_bound_id_splits_back_to_its_tenant(tenant: str) -> None:
    bound = mint_bound_id(tenant)
    assert BOUND_ID_RE.match(bound)
    got_tenant, opaque = split_bound_id(bound)
    assert got_tenant == tenant
    assert OPAQUE_RE.match(opaque)
    assert unproject_id(project_id(bound)) == bound


@pytest.mark.parametrize(
    "bad", ["no-tenant-segment-xxxxxxxx", "acme/short", "/abcdefghijklmnopq", "a b/abcdefghijklmnopq"]
)
def test_bare_or_malformed_bound_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValidationFailed):
        split_bound_id(bad)

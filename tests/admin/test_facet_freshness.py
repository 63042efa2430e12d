"""The refresh-SLA status in the facet list: fresh, due (the window ends within a week, or within
half a short window), stale (past the window, or never evaluated) — interop.md §The refresh SLA."""

from __future__ import annotations

import datetime as dt

import pytest

from apps.facets.admin import facet_freshness
from apps.facets.models import Facet

TODAY = dt.date(2026, 12, 2)


@pytest.mark.parametrize(
    ("window", "age", "expected"),
    [
        (30, 0, ("fresh", 30)),
        (30, 22, ("fresh", 8)),
        (30, 23, ("due", 7)),
        (30, 30, ("due", 0)),
        (30, 31, ("stale", -1)),
        (4, 1, ("fresh", 3)),
        (4, 2, ("due", 2)),
        (90, 83, ("due", 7)),
    ],
)
def test_freshness(window: int, age: int, expected: tuple[str, int]) -> None:
    facet = Facet(protocol="a2a", refresh_window_days=window, refreshed_at=TODAY - dt.timedelta(days=age))
    assert facet_freshness(facet, TODAY) == expected


def test_never_evaluated_is_stale() -> None:
    assert facet_freshness(Facet(protocol="mcp", refreshed_at=None), TODAY) == ("stale", None)

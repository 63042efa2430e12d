"""Markers shared by the host-event tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import connection

F = TypeVar("F", bound=Callable[..., Any])

_needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="needs PostgreSQL (row locks across connections, the append-only trigger); this run is on SQLite",
)


def postgres_only(test: F) -> F:
    """The project's `postgres_only` marker names the need; skipif skips, and `-ra` prints the reason."""
    return pytest.mark.postgres_only(_needs_postgresql(test))

"""The serving process's collector (openwop_host/gc_policy.py): what survives a full collection is
frozen, so the next one does not walk it again; a cycle among frozen objects waits for the sweep,
and the sweep collects it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from openwop_host import gc_policy


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_test_process_collects_as_python_does() -> None:
    """The suite's own process runs without the policy (tests/conftest.py), the live servers with it."""
    assert not gc_policy.installed()


@pytest.fixture
def policy() -> Iterator[None]:
    gc_policy.install(sweep_seconds=3600)
    try:
        yield
    finally:
        gc_policy.uninstall()


def test_the_survivors_of_a_full_collection_are_frozen(policy: None) -> None:
    kept = [_Node() for _ in range(1000)]
    frozen_before = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() >= frozen_before + len(kept)
    assert not any(gc.is_tracked(node) and node in gc.get_objects(generation=2) for node in kept[:5])


def test_a_frozen_cycle_waits_for_the_sweep_and_the_sweep_collects_it(policy: None) -> None:
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle: reference counting alone never frees it
    alive = weakref.ref(first)
    gc.collect()  # both survive (still referenced here): frozen
    del first, second
    gc.collect()
    assert alive() is not None, "a frozen cycle is out of the collector's walk until the sweep"

    gc_policy._state["swept_at"] -= 3600  # the sweep is due
    gc.collect()
    assert alive() is None
    assert gc.get_freeze_count() > 0  # the sweep's survivors are frozen again


def test_uninstall_gives_collections_back_to_python() -> None:
    gc_policy.install()
    gc_policy.uninstall()
    assert not gc_policy.installed()
    assert gc.get_freeze_count() == 0
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    del first, second
    gc.collect()
    assert alive() is None

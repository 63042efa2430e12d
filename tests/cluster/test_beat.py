"""Two beat processes started by mistake: each periodic job still runs once per period, and when
the beat that sends dies, the other takes over (apps/core/beat_leader.py)."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from typing import Any

from tests.cluster.clients import wait_until
from tests.cluster.conftest import REFRESH_SECONDS, cluster_lib, db_rows


def _refreshes_since(cluster: Any, since: dt.datetime) -> dict[str, list[dt.datetime]]:
    out: dict[str, list[dt.datetime]] = {}
    for protocol, at in db_rows(
        cluster, "SELECT protocol, at FROM facets_facetrefresh WHERE at > %s ORDER BY at", (since,)
    ):
        out.setdefault(protocol, []).append(at)
    return out


def _assert_once_per_period(runs: dict[str, list[dt.datetime]], *, at_least: int) -> None:
    assert set(runs) == {"a2a", "mcp"}, runs
    for protocol, times in runs.items():
        gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
        assert len(times) >= at_least, (protocol, times)
        # Two senders would put a second run inside one period (their clocks are offset).
        assert all(gap >= REFRESH_SECONDS * 0.5 for gap in gaps), (protocol, gaps)


def _now(cluster: Any) -> dt.datetime:
    return db_rows(cluster, "SELECT now()")[0][0]


def test_two_beats_run_each_periodic_job_once_per_period(cluster: Any) -> None:
    # On a fresh database the first facets.refresh also creates the facets, which evaluates each
    # once more (facet_ensure): count from after that first pass.
    wait_until(lambda: db_rows(cluster, "SELECT count(*) FROM facets_facetrefresh")[0][0] >= 4, "a first refresh")
    cluster.procs["beat2"] = cluster_lib.beat_proc(cluster.dir, "beat2")
    cluster.start_proc("beat2")
    first, second = cluster.procs["beat"], cluster.procs["beat2"]
    try:
        since = _now(cluster)
        time.sleep(REFRESH_SECONDS * 4)
        _assert_once_per_period(_refreshes_since(cluster, since), at_least=3)
        assert "stands by" in second.tail(200000), second.tail()
        assert "stands by" not in first.tail(200000) and "leads" in first.tail(200000)

        # The leader dies without a word: its session lock ends with it, the standby takes over.
        first.stop(kill=True)
        killed_at = _now(cluster)
        wait_until(lambda: "leads" in second.tail(20000), "the standby to take the lead", timeout=30)
        wait_until(
            lambda: len(_refreshes_since(cluster, killed_at).get("mcp", [])) >= 2,
            "the new leader to send facets.refresh",
            timeout=REFRESH_SECONDS * 4,
        )
        _assert_once_per_period(_refreshes_since(cluster, since), at_least=4)
    finally:
        second.stop()
        del cluster.procs["beat2"]
        if not first.alive():
            cluster.start_proc("beat")

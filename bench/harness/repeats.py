"""Repeated, interleaved points (issue 34): one row per (scenario, target, connections) whose
numbers are the medians of its repeats, with every repeat kept beside them.

A single few-second sample cannot say met or missed on a shared machine (the same commit gave
GetTask c=64 at 1.53x and 2.28x an hour apart), so every point is measured N times, the targets
taking turns (ours, peer, ours, peer, ...) so that drift in the machine hits each side alike.
"""

from __future__ import annotations

import statistics
from typing import Any

# Fields of one wrk sample kept per repeat (`<field>_runs`) and summarised by their median.
REPEATED = ("rps", "p50_ms", "p99_ms", "server_cpu_pct", "infra_cpu_pct", "generator_cpu_pct")
# Counts that add up over the repeats (a bad response in any repeat is reported).
SUMMED = ("requests", "good", "bad", "socket_errors")


def combine(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the repeats of one point: medians of REPEATED, sums of SUMMED, the largest
    RSS, the first bad response seen, and `<field>_runs` lists in the order they were measured."""
    if not samples:
        raise ValueError("no samples to combine")
    row = dict(samples[0])
    for name in REPEATED:
        runs = [s[name] for s in samples if name in s]
        if runs:
            row[f"{name}_runs"] = runs
            row[name] = round(statistics.median(runs), 2)
    for name in SUMMED:
        if name in samples[0]:
            row[name] = sum(s[name] for s in samples)
    if "server_max_rss_mb" in samples[0]:
        row["server_max_rss_mb"] = max(s["server_max_rss_mb"] for s in samples)
    row["first_bad"] = next((s["first_bad"] for s in samples if s.get("first_bad")), "")
    row["repeats"] = len(samples)
    return row


def ratio_range(ours: list[float], theirs: list[float]) -> list[float] | None:
    """Min and max of the per-repeat ratios ours[i] / theirs[i] (repeat i of each side ran
    back to back); None when a repeat of the peer completed nothing."""
    pairs = list(zip(ours, theirs, strict=False))
    if not pairs or any(b == 0 for _, b in pairs):
        return None
    each = [a / b for a, b in pairs]
    return [round(min(each), 2), round(max(each), 2)]

"""Results: the JSON of every measured point, a Markdown table with ratios and targets, PNG charts.

Ratios are always "ours / peer": throughput ours/peer (above 1 = we serve more) and p99 ours/peer
(below 1 = our tail is shorter). The negotiation and ASGI scenarios compare variants of ours,
each against the scenario's first line.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

# The targets: (scenario, peer, minimum throughput ratio, connections it applies to, p99 too).
TARGETS: list[tuple[str, str, float, tuple[int, ...], bool, str]] = [
    ("gettask", "a2a-sdk postgres", 1.5, (16, 64), True, "GetTask >= 1.5x a2a-sdk (PostgreSQL store), p99 no worse"),
    ("sendmessage", "a2a-sdk postgres", 1.0, (16, 64), True, "SendMessage >= 1.0x a2a-sdk (PostgreSQL), p99 no worse"),
    ("listpage", "a2a-sdk postgres", 1.5, (16, 64), False, "ListTasks page of 20 of 10k >= 1.5x a2a-sdk (PostgreSQL)"),
    ("card", "a2a-sdk postgres", 1.5, (16, 64), False, "public agent card >= 1.5x a2a-sdk"),
    ("mcp", "mcp-sdk MCPServer", 0.25, (16, 64), False, "MCP tools/call >= 0.25x mcp-sdk MCPServer"),
    ("gettask", "a2a-sdk memory", 1.0, (16, 64), False, "stretch: GetTask >= 1.0x a2a-sdk (in-memory store)"),
    ("sendmessage", "a2a-sdk memory", 0.5, (16, 64), False, "stretch: SendMessage >= 0.5x a2a-sdk (in-memory)"),
    ("mcp", "mcp-sdk MCPServer", 0.5, (16, 64), False, "stretch: MCP tools/call >= 0.5x mcp-sdk MCPServer"),
]
RSS_LIMIT_MB = 300.0
VARIANT_SCENARIOS = {"negotiation", "asgi"}  # variants of ours, compared with the first line


def _ours(target: str) -> bool:
    return target.startswith("ours")


def _points(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "rps" in r]


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with `vs` (what it is compared with), `rps_ratio` and `p99_ratio` filled in."""
    out = []
    for row in _points(rows):
        same = [r for r in _points(rows) if r["scenario"] == row["scenario"] and r["connections"] == row["connections"]]
        row = dict(row)
        if row["scenario"] in VARIANT_SCENARIOS:
            base = same[0]
            if base is not row and base["target"] != row["target"]:
                row["vs"] = base["target"]
                row["rps_ratio"] = _div(row["rps"], base["rps"])
                row["p99_ratio"] = _div(row["p99_ms"], base["p99_ms"])
        elif not _ours(row["target"]):
            ours = next((r for r in same if _ours(r["target"])), None)
            if ours is not None:
                row["vs"] = "ours / this"
                row["rps_ratio"] = _div(ours["rps"], row["rps"])
                row["p99_ratio"] = _div(ours["p99_ms"], row["p99_ms"])
        out.append(row)
    return out


def _div(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One verdict per (target, connections) that the run measured."""
    verdicts = []
    rated = ratios(rows)
    for scenario, peer, minimum, conns, p99_too, label in TARGETS:
        for c in conns:
            row = next(
                (r for r in rated if r["scenario"] == scenario and r["target"] == peer and r["connections"] == c), None
            )
            if row is None:
                continue
            if row.get("rps_ratio") is None:  # the peer completed nothing inside the window
                verdicts.append({"target": label, "connections": c, "rps_ratio": None, "p99_ratio": None, "met": None})
                continue
            met = row["rps_ratio"] >= minimum and (not p99_too or (row["p99_ratio"] or 99) <= 1.0)
            verdicts.append(
                {"target": label, "connections": c, "rps_ratio": row["rps_ratio"], "p99_ratio": row["p99_ratio"],
                 "met": met}
            )  # fmt: skip
    ours_rss = [r["server_max_rss_mb"] for r in _points(rows) if _ours(r["target"]) and r["connections"] == 64]
    if ours_rss:
        worst = max(ours_rss)
        verdicts.append(
            {"target": f"memory: every host process < {RSS_LIMIT_MB:.0f} MB RSS at c=64", "connections": 64,
             "max_rss_mb": worst, "met": worst < RSS_LIMIT_MB}
        )  # fmt: skip
    return verdicts


def cpu_ms_per_request(row: dict[str, Any]) -> float | None:
    """Server CPU time per good response: the cost that stays comparable on a loaded machine."""
    return round(row["server_cpu_pct"] * 10 / row["rps"], 2) if row["rps"] else None


def _verdict(met: bool | None) -> str:
    return "not measured (no response inside the window)" if met is None else "yes" if met else "**no**"


def _fmt(value: Any, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"# Bench results {meta['date']}",
        "",
        f"Command: `{meta['command']}`. Machine: {meta['machine']['cpus']} CPUs, {meta['machine']['platform']}, "
        f"Python {meta['machine']['python']}. Servers pinned to CPU {meta['server_cpus']}, wrk to CPU "
        f"{meta['generator_cpus']}; {meta['warmup']} s warm-up + {meta['seconds']} s measured per point. "
        f"Ours: {meta['ours']} with production settings (DEBUG off, PostgreSQL, Redis, Celery worker on the "
        f"same CPU). Load average at the end: {', '.join(f'{x:.2f}' for x in meta['machine']['load_avg_at_end'])} "
        "(the machine is shared; compare ratios within one run, not absolute numbers across runs).",
        "",
        "Ratios: `req/s ratio` = ours / this peer (variants: this / the first line); `p99 ratio` likewise "
        "(below 1 = shorter tail). `bad` = non-2xx or a body without the success marker, plus socket errors; "
        "bad responses are not counted as throughput. `wrk cpu` = the load generator's own CPU "
        "(% of one core): far below 100 % means wrk was not the bottleneck. `cpu ms/req` = the server processes' "
        "CPU time per good response (includes our Celery worker).",
        "",
    ]
    rated = ratios(rows)
    verdicts = targets(rows)
    if verdicts:
        lines += ["## Targets", "", "| target | c | req/s ratio | p99 ratio | met |", "|---|---|---|---|---|"]
        for v in verdicts:
            if "max_rss_mb" in v:
                lines.append(f"| {v['target']} | {v['connections']} | max {v['max_rss_mb']} MB | | "
                             f"{'yes' if v['met'] else '**no**'} |")  # fmt: skip
            else:
                lines.append(
                    f"| {v['target']} | {v['connections']} | {_fmt(v['rps_ratio'])} | {_fmt(v['p99_ratio'])} | "
                    f"{_verdict(v['met'])} |"
                )
        lines.append("")
    for scenario in dict.fromkeys(r["scenario"] for r in rated):
        lines += [
            f"## {scenario}",
            "",
            "| target | c | req/s | p50 ms | p99 ms | bad | req/s ratio | p99 ratio | server cpu % | cpu ms/req "
            "| max RSS MB | wrk cpu % |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rated if r["scenario"] == scenario):
            lines.append(
                f"| {r['target']} | {r['connections']} | {r['rps']} | {r['p50_ms']} | {r['p99_ms']} | "
                f"{r['bad'] + r['socket_errors']} | {_fmt(r.get('rps_ratio'))} | {_fmt(r.get('p99_ratio'))} | "
                f"{r['server_cpu_pct']} | {_fmt(cpu_ms_per_request(r))} | {r['server_max_rss_mb']} | "
                f"{r['generator_cpu_pct']} |"
            )
        samples = [f"{r['target']} c={r['connections']}: `{r['first_bad'][:160]}`" for r in rated
                   if r["scenario"] == scenario and r.get("first_bad")]  # fmt: skip
        if samples:
            lines += ["", "First bad response per line: " + "; ".join(samples)]
        lines.append("")
    for extra in (r for r in rows if "rps" not in r):
        lines += [f"## {extra['scenario']} ({extra['target']})", "", "```", extra.get("stdout", "").strip(), "```", ""]
    return "\n".join(lines)


def charts(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = _points(rows)
    scenarios = list(dict.fromkeys(r["scenario"] for r in points))
    if not scenarios:
        return
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(13, 3.6 * len(scenarios)), squeeze=False)
    for i, scenario in enumerate(scenarios):
        mine = [r for r in points if r["scenario"] == scenario]
        targets_ = list(dict.fromkeys(r["target"] for r in mine))
        conns = sorted({r["connections"] for r in mine})
        width = 0.8 / len(targets_)
        for j, target in enumerate(targets_):
            for k, metric in enumerate(("rps", "p99_ms")):
                values = [
                    next((r[metric] for r in mine if r["target"] == target and r["connections"] == c), 0) for c in conns
                ]
                xs = [x + j * width for x in range(len(conns))]
                axes[i][k].bar(xs, values, width, label=target)
        for k, label in enumerate(("requests/s (good only)", "p99 latency, ms")):
            ax = axes[i][k]
            ax.set_title(f"{scenario}: {label}")
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(conns))], [f"c={c}" for c in conns])
            ax.grid(axis="y", alpha=0.3)
        axes[i][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(meta: dict[str, Any], rows: list[dict[str, Any]], directory: Path, *, name: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stem = name or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H%MZ")
    path = directory / f"{stem}.json"
    doc = {"meta": meta, "rows": ratios(rows) + [r for r in rows if "rps" not in r], "targets": targets(rows)}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(meta, rows) + "\n")
    try:
        charts(rows, path.with_suffix(".png"))
    except ImportError:  # matplotlib comes with the `bench` extra (`make bench` installs it)
        print("no chart: matplotlib is not installed (pip install -e '.[bench]')")
    return path


if __name__ == "__main__":  # re-render a results JSON's table and chart: report.py bench/results/<stem>.json
    import sys

    source = Path(sys.argv[1])
    saved = json.loads(source.read_text())
    print(write(saved["meta"], saved["rows"], source.parent, name=source.stem))

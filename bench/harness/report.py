"""Results: the JSON of every measured point, a Markdown table with ratios and targets, PNG charts.

Ratios are always "ours / peer": throughput ours/peer (above 1 = we serve more) and p99 ours/peer
(below 1 = our tail is shorter). The negotiation and ASGI scenarios compare variants of ours,
each against the scenario's first line. A row's numbers are the medians of its repeats
(harness/repeats.py), so a ratio is a ratio of medians; the min-max of the per-repeat ratios is
shown beside it. `python bench/harness/report.py --readme <results.json>` regenerates the results
section of bench/README.md from a results file, so no claim there is written by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `harness` importable as the bench does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.repeats import ratio_range

# The targets: (scenario, peer, minimum throughput ratio, connections it applies to, p99 too).
# Every level a run measures is judged, c=1 included (issue 34: where we lose must show as a miss).
ALL = (1, 16, 64)
FAIRNESS = (4,)  # tenant B's clients in bench/fairness.py (B_CONNECTIONS)
TARGETS: list[tuple[str, str, float, tuple[int, ...], bool, str]] = [
    ("gettask", "a2a-sdk postgres", 1.5, ALL, True, "GetTask >= 1.5x a2a-sdk (PostgreSQL store), p99 no worse"),
    ("sendmessage", "a2a-sdk postgres", 1.0, ALL, True, "SendMessage >= 1.0x a2a-sdk (PostgreSQL), p99 no worse"),
    ("listpage", "a2a-sdk postgres", 1.5, ALL, False, "ListTasks page of 20 of 10k >= 1.5x a2a-sdk (PostgreSQL)"),
    ("card", "a2a-sdk postgres", 1.5, ALL, False, "public agent card >= 1.5x a2a-sdk"),
    ("mcp", "mcp-sdk MCPServer", 0.35, ALL, False, "MCP tools/call >= 0.35x mcp-sdk MCPServer"),
    ("gettask", "a2a-sdk memory", 1.0, ALL, False, "stretch: GetTask >= 1.0x a2a-sdk (in-memory store)"),
    ("sendmessage", "a2a-sdk memory", 0.5, ALL, False, "stretch: SendMessage >= 0.5x a2a-sdk (in-memory)"),
    ("mcp", "mcp-sdk MCPServer", 0.5, ALL, False, "stretch: MCP tools/call >= 0.5x mcp-sdk MCPServer"),
    # Issue 35: the host a newcomer starts (embedded PostgreSQL, no Redis), against the durable peer.
    ("gettask", "ours (make run default)", 1.5, ALL, False, "make run default: GetTask >= 1.5x a2a-sdk (PostgreSQL)"),
    # Issue 36 (bench/retention_load.py): the chained host against the same host without the chain.
    ("chain", "ours chained (as shipped)", 0.95, ALL, False, "hash chain: GetTask cost <= 5% (chained / no chain)"),
    # Issue 49 (bench/fairness.py): tenant B while tenant A bursts, against B alone in the same run.
    (
        "fairness-flood",
        "B while A floods GetTask (c=64, 16 keys)",
        0.67,
        FAIRNESS,
        False,
        "fairness: B's GetTask req/s while A floods GetTask (c=64, 16 keys) >= 0.67x alone",
    ),
]
# Targets on the tail alone: (scenario, target, maximum p99 ratio to the scenario's first line, levels, label).
P99_TARGETS: list[tuple[str, str, float, tuple[int, ...], str]] = [
    ("retention", "ours while retention apply runs", 1.2, ALL, "retention job: GetTask p99 <= 1.2x without"),
    (
        "fairness-flood",
        "B while A floods GetTask (c=64, 16 keys)",
        2.0,
        FAIRNESS,
        "fairness: B's GetTask p99 while A floods GetTask (c=64, 16 keys) <= 2x alone",
    ),
    (
        "fairness-streams",
        "B while A holds its stream budget",
        2.0,
        FAIRNESS,
        "fairness: B's GetTask p99 while A holds its stream budget <= 2x alone",
    ),
    (
        "fairness-list",
        "B while A lists 100k runs (filtered, c=8)",
        2.0,
        FAIRNESS,
        "fairness: B's GetTask p99 while A lists its 100k runs with filters (c=8) <= 2x alone",
    ),
]
# Targets on another measure of a row than req/s or p99, at most `maximum` times the scenario's first
# line: (scenario, target, field, maximum, levels, label). The rows carry `<field>` (a median of
# their repeats), `<field>_runs` (each repeat's) and `<field>_at_least` (the median is only a lower
# bound: something was still unfinished when the bench stopped waiting).
VALUE_TARGETS: list[tuple[str, str, str, float, tuple[int, ...], str]] = [
    (
        "fairness-runs",
        "B while A queues 2,000 runs of 2 s",
        "e2e_ms",
        3.0,
        FAIRNESS,
        "fairness: B's worker runs end to end while A queues 2,000 runs of 2 s <= 3x alone",
    ),
]
VALUE_NAMES = {"e2e_ms": "end to end"}
# A variant of ours judged against a peer of its own scenario, not against ours (its ratio is this / peer).
OURS_VARIANTS = {"ours (make run default)": "a2a-sdk postgres"}
RSS_LIMIT_MB = 300.0
# Variants of ours, compared with the scenario's first line.
VARIANT_SCENARIOS = {"negotiation", "asgi", "retention", "chain", "fairness-flood", "fairness-streams", "fairness-list"}


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
                if "rps_runs" in base and "rps_runs" in row:
                    row["rps_ratio_range"] = ratio_range(row["rps_runs"], base["rps_runs"])
                    row["p99_ratio_range"] = ratio_range(row["p99_ms_runs"], base["p99_ms_runs"])
        elif row["target"] in OURS_VARIANTS:
            peer = next((r for r in same if r["target"] == OURS_VARIANTS[row["target"]]), None)
            if peer is not None:
                row["vs"] = f"this / {peer['target']}"
                row["rps_ratio"] = _div(row["rps"], peer["rps"])
                row["p99_ratio"] = _div(row["p99_ms"], peer["p99_ms"])
                if "rps_runs" in peer and "rps_runs" in row:
                    row["rps_ratio_range"] = ratio_range(row["rps_runs"], peer["rps_runs"])
                    row["p99_ratio_range"] = ratio_range(row["p99_ms_runs"], peer["p99_ms_runs"])
        elif not _ours(row["target"]):
            ours = next((r for r in same if _ours(r["target"]) and r["target"] not in OURS_VARIANTS), None)
            if ours is not None:
                row["vs"] = "ours / this"
                row["rps_ratio"] = _div(ours["rps"], row["rps"])
                row["p99_ratio"] = _div(ours["p99_ms"], row["p99_ms"])
                if "rps_runs" in ours and "rps_runs" in row:
                    row["rps_ratio_range"] = ratio_range(ours["rps_runs"], row["rps_runs"])
                    row["p99_ratio_range"] = ratio_range(ours["p99_ms_runs"], row["p99_ms_runs"])
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
                 "rps_ratio_range": row.get("rps_ratio_range"), "p99_ratio_range": row.get("p99_ratio_range"),
                 "p99_counts": p99_too, "met": met}
            )  # fmt: skip
    for scenario, target, maximum, conns, label in P99_TARGETS:
        for c in conns:
            row = next(
                (r for r in rated if (r["scenario"], r["target"], r["connections"]) == (scenario, target, c)), None
            )
            if row is None:
                continue
            met = None if row.get("p99_ratio") is None else row["p99_ratio"] <= maximum
            verdicts.append(
                {"target": label, "connections": c, "rps_ratio": row.get("rps_ratio"),
                 "p99_ratio": row.get("p99_ratio"), "rps_ratio_range": row.get("rps_ratio_range"),
                 "p99_ratio_range": row.get("p99_ratio_range"), "p99_counts": True, "met": met}
            )  # fmt: skip
    verdicts += value_verdicts(rows)
    ours_rss = [r["server_max_rss_mb"] for r in _points(rows) if _ours(r["target"]) and r["connections"] == 64]
    if ours_rss:
        worst = max(ours_rss)
        verdicts.append(
            {"target": f"memory: every host process < {RSS_LIMIT_MB:.0f} MB RSS at c=64", "connections": 64,
             "max_rss_mb": worst, "met": worst < RSS_LIMIT_MB}
        )  # fmt: skip
    return verdicts


def value_verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """VALUE_TARGETS: each row's `field` over its scenario's first line's, a ratio of medians with the
    per-repeat range. A ratio from a lower bound (`<field>_at_least`) is a lower bound too: above the
    maximum it is a miss, at or below it says nothing (not measured); so is any ratio over a first
    line that is itself only a bound."""
    verdicts = []
    for scenario, target, name, maximum, conns, label in VALUE_TARGETS:
        for c in conns:
            same = [r for r in rows if (r.get("scenario"), r.get("connections")) == (scenario, c) and name in r]
            row = next((r for r in same if r["target"] == target), None)
            if row is None or same[0] is row:
                continue
            base = same[0]
            ratio = _div(row[name], base[name]) if row[name] is not None and base[name] is not None else None
            at_least = bool(row.get(f"{name}_at_least"))
            if ratio is None or base.get(f"{name}_at_least"):
                met = None
            else:
                met = False if ratio > maximum else None if at_least else True
            verdicts.append({
                "target": label, "connections": c, "value": VALUE_NAMES.get(name, name), "value_ratio": ratio,
                "value_ratio_range": ratio_range(row.get(f"{name}_runs", []), base.get(f"{name}_runs", [])),
                "at_least": at_least, "met": met,
            })  # fmt: skip
    return verdicts


def cpu_ms_per_request(row: dict[str, Any]) -> float | None:
    """CPU time per good response of the server's processes and of the PostgreSQL and Redis
    processes it used: the cost that stays comparable on a loaded machine (work pushed into the
    database is still work)."""
    cpu = row["server_cpu_pct"] + row.get("infra_cpu_pct", 0.0)
    return round(cpu * 10 / row["rps"], 2) if row["rps"] else None


def _verdict(met: bool | None) -> str:
    return "not measured (no response inside the window)" if met is None else "yes" if met else "**no**"


def _fmt(value: Any, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


def _with_range(value: Any, span: list[float] | None) -> str:
    """A median ratio with the min-max of its per-repeat ratios: `1.64 (1.53-2.28)`."""
    return _fmt(value) if not span else f"{value} ({span[0]}-{span[1]})"


def targets_table(verdicts: list[dict[str, Any]]) -> list[str]:
    lines = ["| target | c | req/s ratio (min-max) | p99 ratio (min-max) | met |", "|---|---|---|---|---|"]
    for v in verdicts:
        if "max_rss_mb" in v:
            lines.append(f"| {v['target']} | {v['connections']} | max {v['max_rss_mb']} MB | | "
                         f"{'yes' if v['met'] else '**no**'} |")  # fmt: skip
        elif "value_ratio" in v:
            ratio = _with_range(v["value_ratio"], v.get("value_ratio_range"))
            lines.append(f"| {v['target']} | {v['connections']} | {v['value']} {'>= ' if v['at_least'] else ''}"
                         f"{ratio} | | {_verdict(v['met'])} |")  # fmt: skip
        else:
            p99 = _with_range(v["p99_ratio"], v.get("p99_ratio_range"))
            lines.append(
                f"| {v['target']} | {v['connections']} | {_with_range(v['rps_ratio'], v.get('rps_ratio_range'))} | "
                f"{p99 if v.get('p99_counts', True) else p99 + ' (not a target)'} | {_verdict(v['met'])} |"
            )
    return lines


def _back_ends(meta: dict[str, Any]) -> str:
    pg, redis = meta.get("postgres"), meta.get("redis")
    if not pg:
        return ""
    text = "PostgreSQL " + ", ".join(f"{k} {v}" for k, v in pg.items())
    if redis:
        text += f"; Redis {redis.get('version')}, persistence {redis.get('persistence')}"
    return text + "."


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
        "CPU time per good response (includes our Celery worker) plus the PostgreSQL and Redis processes' CPU "
        "in the same window (`pg+redis cpu %`).",
        "",
        f"Each point: {meta.get('repeats', 1)} repeats, the targets taking turns; every number is the median "
        "of its repeats and every ratio a ratio of medians, with the min-max of the per-repeat ratios in "
        f"brackets. {_back_ends(meta)}",
        "",
    ]
    if meta.get("list_counts"):
        lines += [f"ListTasks listing sizes (each server's own count): {meta['list_counts']}.", ""]
    rated = ratios(rows)
    verdicts = targets(rows)
    if verdicts:
        lines += ["## Targets", "", *targets_table(verdicts), ""]
    for scenario in dict.fromkeys(r["scenario"] for r in rated):
        lines += [
            f"## {scenario}",
            "",
            "| target | c | req/s | req/s each repeat | p50 ms | p99 ms | bad | req/s ratio | p99 ratio "
            "| server cpu % | pg+redis cpu % | cpu ms/req | max RSS MB | wrk cpu % |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rated if r["scenario"] == scenario):
            lines.append(
                f"| {r['target']} | {r['connections']} | {r['rps']} | {' / '.join(map(str, r.get('rps_runs', [])))} "
                f"| {r['p50_ms']} | {r['p99_ms']} | {r['bad'] + r['socket_errors']} "
                f"| {_with_range(r.get('rps_ratio'), r.get('rps_ratio_range'))} "
                f"| {_with_range(r.get('p99_ratio'), r.get('p99_ratio_range'))} | {r['server_cpu_pct']} "
                f"| {_fmt(r.get('infra_cpu_pct'))} | {_fmt(cpu_ms_per_request(r))} | {r['server_max_rss_mb']} "
                f"| {r['generator_cpu_pct']} |"
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


README_BEGIN = "<!-- results: generated by bench/harness/report.py --readme; do not edit by hand -->"
README_END = "<!-- results: end -->"


def readme_section(meta: dict[str, Any], rows: list[dict[str, Any]], source: str) -> str:
    """The headline of bench/README.md, from one results file: every target met or not, every miss
    in bold, the generator's CPU as measured."""
    verdicts = targets(rows)
    missed = [v for v in verdicts if v["met"] is False]
    wrk = [r["generator_cpu_pct"] for r in _points(rows)]
    lines = [
        README_BEGIN,
        f"Latest results: `{source}` ({meta['date']}, `{meta['command']}`, {meta.get('repeats', 1)} interleaved "
        f"repeats per point, medians). {_back_ends(meta)}",
        "",
        *targets_table(verdicts),
        "",
        f"**{len(missed)} of {len(verdicts)} targets missed.**" if missed else f"All {len(verdicts)} targets met.",
        f"The load generator used {min(wrk, default=0)}-{max(wrk, default=0)} % of its core.",
    ]
    if meta.get("list_counts"):
        lines.append(f"ListTasks listing sizes, as each server counts them: {meta['list_counts']}.")
    return "\n".join([*lines, README_END])


def readme_update(readme: Path, results: Path) -> None:
    saved = json.loads(results.read_text())
    section = readme_section(saved["meta"], saved["rows"], f"results/{results.name}")
    text = readme.read_text()
    if README_BEGIN in text and README_END in text:
        head, rest = text.split(README_BEGIN, 1)
        text = head + section + rest.split(README_END, 1)[1]
    else:
        title, _, body = text.partition("\n")
        text = f"{title}\n\n{section}\n{body}"
    readme.write_text(text)


if __name__ == "__main__":
    # report.py bench/results/<stem>.json: re-render its table and chart;
    # report.py --readme bench/results/<stem>.json: regenerate bench/README.md's results section.
    if sys.argv[1] == "--readme":
        source = Path(sys.argv[2])
        readme_update(Path(__file__).resolve().parents[1] / "README.md", source)
        print(f"bench/README.md: results section from {source}")
    else:
        source = Path(sys.argv[1])
        saved = json.loads(source.read_text())
        print(write(saved["meta"], saved["rows"], source.parent, name=source.stem))

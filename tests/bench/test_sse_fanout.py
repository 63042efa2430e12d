"""The SSE fan-out bench's client side (no timing asserts): a chunked SSE stream as the host frames
it is de-chunked and parsed into events whatever the split of the bytes, and the delay summary
counts every missing (subscriber, event) pair as an error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import sse_fanout  # noqa: E402
from sse_fanout import ChunkDecoder, SseParser, percentile, summarize  # noqa: E402

from apps.core.sse import SseEvent, format_event  # noqa: E402


def _chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def _stream() -> tuple[bytes, list[bytes]]:
    """What the host sends for one run: the open comment, two ticks, the terminal event (built with
    the host's own formatter, so a change of framing breaks this test rather than the bench)."""
    events = [
        b": stream open\n\n",
        format_event(SseEvent(id=1, event=sse_fanout.MEASURED_TYPE, data={"sequence": 1, "text": "a\u00e9"})),
        format_event(SseEvent(id=2, event=sse_fanout.MEASURED_TYPE, data={"sequence": 2})),
        format_event(SseEvent(id=3, event="run.completed", data={"sequence": 3}, terminal=True)),
    ]
    return _chunked(events), events


def test_chunked_sse_parses_the_same_at_every_split() -> None:
    wire, events = _stream()
    expected = [
        ("1", sse_fanout.MEASURED_TYPE, {"sequence": 1, "text": "a\u00e9"}),
        ("2", sse_fanout.MEASURED_TYPE, {"sequence": 2}),
        ("3", "run.completed", {"sequence": 3}),
    ]
    for step in (1, 2, 3, 7, len(wire)):
        chunks, sse, got = ChunkDecoder(), SseParser(), []
        body = b""
        for i in range(0, len(wire), step):
            part = chunks.feed(wire[i : i + step])
            body += part
            got.extend((eid, ev, json.loads(data)) for eid, ev, data in sse.feed(part))
        assert body == b"".join(events), step
        assert got == expected, step
        assert chunks.done, step


def test_comments_and_multiline_data() -> None:
    parser = SseParser()
    out = list(parser.feed(b": hi\r\n\r\nid: 7\r\nevent: x\r\ndata: one\r\ndata: two\r\n\r\ndata: partial"))
    assert out == [("7", "x", "one\ntwo")]
    assert list(parser.feed(b"\n\n")) == [("", "message", "partial")]


def test_summarize_delays_and_missing_events() -> None:
    commits = {1: 100.000, 2: 100.100}
    stamps = {1: 99.998, 2: 100.098}
    receipts = [
        {1: 100.010, 2: 100.130},  # 10 ms and 30 ms
        {1: 100.020},  # 20 ms, event 2 missing
        {},  # never reported: both missing
    ]
    out = summarize(commits, stamps, receipts)
    assert out["events"] == 2
    assert out["subscribers_complete"] == 1
    assert out["missing_events"] == 3
    assert out["p50_ms"] == 20.0
    assert out["max_ms"] == 30.0
    assert out["stamp_max_ms"] == 32.0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([5.0], 99) == 5.0

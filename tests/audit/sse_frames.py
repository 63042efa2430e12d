"""A minimal Server-Sent Events reader over an httpx streaming response, for black-box tests."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

# A guard against hanging, not a timing assertion: a frame that never comes fails the test after
# this long instead of blocking it forever (heartbeats keep the socket itself alive).
GIVE_UP_SECONDS = 60.0

T = TypeVar("T")


@dataclass(frozen=True)
class Frame:
    event: str | None
    id: str | None  # None when the frame carries no `id:` line
    data: dict[str, Any]

    @property
    def event_id(self) -> str:
        return str(self.data["eventId"])


class FrameReader:
    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.iter_lines()

    def next_frame(self, give_up_at: float | None = None) -> Frame:
        """The next frame with data; comments (heartbeats) are skipped."""
        give_up_at = give_up_at or time.monotonic() + GIVE_UP_SECONDS
        fields: dict[str, str] = {}
        data: list[str] = []
        for line in self._lines:
            if time.monotonic() > give_up_at:
                raise AssertionError("the expected frame never arrived")
            if line == "":
                if data:
                    return Frame(event=fields.get("event"), id=fields.get("id"), data=json.loads("\n".join(data)))
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            else:
                fields[name] = value
        raise AssertionError("the stream ended")

    def read_until(self, event_id: str) -> list[Frame]:
        """Every frame up to and including the one carrying `event_id`."""
        give_up_at = time.monotonic() + GIVE_UP_SECONDS
        frames: list[Frame] = []
        while True:
            frames.append(self.next_frame(give_up_at))
            if frames[-1].event_id == event_id:
                return frames


@contextmanager
def open_host_events(http: httpx.Client, api_key: str, *, last_event_id: str | None = None) -> Iterator[FrameReader]:
    """Subscribe; on return the server has fixed the subscription's position (the headers arrived)."""
    headers = {"Authorization": f"Bearer {api_key}", "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    with http.stream("GET", "/host/events", headers=headers) as response:
        assert response.status_code == 200, response.read()[:300]
        assert response.headers["Content-Type"].startswith("text/event-stream")
        yield FrameReader(response)


def ids_of(frames: list[Frame], predicate: Callable[[Frame], bool] = lambda f: True) -> list[str]:
    return [f.event_id for f in frames if predicate(f)]


class Drain(Generic[T]):
    """Consumes a blocking iterator (the openwop-client SSE generator) on a thread, so the test can
    wait for an item with a give-up deadline; `close()` ends it on the consumer thread."""

    def __init__(self, items: Iterator[T]) -> None:
        self._items = items
        self._queue: queue.Queue[T] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._items:
                self._queue.put(item)
                if self._stop.is_set():
                    break
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def until(self, matches: Callable[[T], bool]) -> list[T]:
        give_up_at = time.monotonic() + GIVE_UP_SECONDS
        seen: list[T] = []
        while True:
            try:
                seen.append(self._queue.get(timeout=max(0.0, give_up_at - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"the expected item never arrived (got {seen!r})") from None
            if matches(seen[-1]):
                return seen

    def close(self, wake: Callable[[], object]) -> None:
        """Stop after the next item, which `wake` causes, and wait for the connection to close."""
        self._stop.set()
        if self._thread.is_alive():
            wake()
            self._thread.join(GIVE_UP_SECONDS)


def get_refused(http: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    """`GET /host/events` that must be refused; a 200 fails at once instead of reading forever."""
    with http.stream("GET", "/host/events", headers=headers) as response:
        assert response.status_code != 200, "the stream was opened"
        response.read()
    return response

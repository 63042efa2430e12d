"""The serving process's cyclic garbage collector: what lives long stays out of its walk.

`install()` (openwop_host/asgi.py, when the server imports the application) freezes everything
built so far (`gc.freeze`: modules, settings, URL patterns) and, after every full collection, what
survived it. Without the second part each full collection walks every object the process keeps:
with 1,000 open event streams about 200,000 of them (a connection's protocol, transport, tasks and
sink), 110-180 ms with the event loop stopped, seen by a `gc.callbacks` probe on the bench host
(bench/README.md, session 15): one event late by that much for every subscriber, and every request
in flight waiting. Frozen, they are walked no more; the next full collection walks only what the
process kept since the last one.

What a frozen object leaves behind when it dies is still freed by reference counting at once; only
a reference cycle among frozen objects would wait. So every `sweep_seconds` one full collection
first unfreezes everything, collects it all (one full pause, as before, but once in that time
instead of whenever the young survivors reach a quarter of the old), and freezes the survivors
again.
"""

from __future__ import annotations

import gc
import time
from typing import Any

SWEEP_SECONDS = 600.0
_OLDEST = len(gc.get_threshold()) - 1  # the generation a full collection collects

_state: dict[str, float] = {"sweep_seconds": SWEEP_SECONDS, "swept_at": 0.0}


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if info.get("generation") != _OLDEST:
        return
    if phase == "start":
        if time.monotonic() - _state["swept_at"] >= _state["sweep_seconds"]:
            gc.unfreeze()  # into the oldest generation: this collection walks everything once
            _state["swept_at"] = time.monotonic()
    elif phase == "stop":
        gc.freeze()


def install(*, sweep_seconds: float = SWEEP_SECONDS) -> None:
    """Freeze what exists now and, from now on, what survives each full collection."""
    _state["sweep_seconds"], _state["swept_at"] = sweep_seconds, time.monotonic()
    gc.freeze()
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def uninstall() -> None:
    """Collections as Python makes them again, everything unfrozen (the test suite's default)."""
    if _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)
    gc.unfreeze()


def installed() -> bool:
    return _on_collection in gc.callbacks

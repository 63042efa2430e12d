"""`grpc_serve [--bind ADDR] [--port N]`: the A2A gRPC binding (apps/a2a/grpc_server.py).

Serves on OPENWOP_GRPC_BIND:OPENWOP_GRPC_PORT (the options override them; port 0 picks a free one
and says which), with TLS when OPENWOP_GRPC_TLS_CERT and OPENWOP_GRPC_TLS_KEY name PEM files.
SIGTERM / SIGINT stop it gracefully: open streams get a few seconds to end.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.a2a.grpc_server import grpc_server_build
from apps.core.metrics import metrics_serve

STOP_GRACE_SECONDS = 5.0


def _tls_files() -> tuple[bytes, bytes] | None:
    cert, key = settings.OPENWOP_GRPC_TLS_CERT, settings.OPENWOP_GRPC_TLS_KEY
    if not cert and not key:
        return None
    if not (cert and key):
        raise CommandError("Set both OPENWOP_GRPC_TLS_CERT and OPENWOP_GRPC_TLS_KEY, or neither.")
    try:
        return Path(cert).read_bytes(), Path(key).read_bytes()
    except OSError as exc:
        raise CommandError(f"Cannot read the gRPC TLS files: {exc.strerror}") from None


class Command(BaseCommand):
    help = "Serve the A2A 1.0 gRPC binding."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default=None, help="address to bind (default OPENWOP_GRPC_BIND)")
        parser.add_argument("--port", type=int, default=None, help="port (default OPENWOP_GRPC_PORT; 0: any free)")

    def handle(self, *args: Any, **options: Any) -> None:
        bind = options["bind"] or settings.OPENWOP_GRPC_BIND
        port = settings.OPENWOP_GRPC_PORT if options["port"] is None else options["port"]
        asyncio.run(self._serve(bind, port, _tls_files()))

    async def _serve(self, bind: str, port: int, tls: tuple[bytes, bytes] | None) -> None:
        server, bound = grpc_server_build(bind=bind, port=port, tls=tls)
        if not bound:
            raise CommandError(f"Cannot bind {bind}:{port}.")
        await server.start()
        if settings.OPENWOP_METRICS_PORT:  # its RPCs' counters, for a scraper of this pod (Helm)
            metrics_serve(settings.OPENWOP_METRICS_PORT)
        scheme = "grpcs" if tls else "grpc"
        self.stdout.write(f"A2A gRPC serving on {scheme}://{bind}:{bound}", ending="\n")
        self.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        serving = asyncio.ensure_future(server.wait_for_termination())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        await server.stop(STOP_GRACE_SECONDS)
        stopping.cancel()
        serving.cancel()

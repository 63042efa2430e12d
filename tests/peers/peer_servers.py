"""Real peers on loopback for the host-as-client tests: ASGI apps (a2a-sdk, mcp SDK) served over
HTTPS by uvicorn with a trustme certificate, each wrapped so the test can read, at the peer, every
request it received (method, path, headers, body)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
import uvicorn

from tests.live import free_port


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Recorder:
    """ASGI middleware that keeps a copy of every HTTP request before the app sees it."""

    app: Any
    seen: list[Seen] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.seen.append(Seen(scope["method"], scope["path"], headers, body))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


@dataclass
class Peer:
    name: str
    port: int
    recorder: Recorder

    @property
    def origin(self) -> str:
        return f"https://{self.name}:{self.port}"

    @property
    def seen(self) -> list[Seen]:
        return self.recorder.seen


@contextmanager
def https_asgi_peer(ca: trustme.CA, name: str, app: Any, tmp: Path, *, port: int | None = None) -> Iterator[Peer]:
    """Serve `app` on 127.0.0.1 over TLS with a certificate for `name` (which the fake DNS maps)."""
    port = port or free_port()
    pem = tmp / f"{name}-{port}.pem"
    ca.issue_cert(name).private_key_and_cert_chain_pem.write_to_path(str(pem))
    recorder = Recorder(app)
    config = uvicorn.Config(
        recorder,
        host="127.0.0.1",
        port=port,
        ssl_certfile=str(pem),
        ssl_keyfile=str(pem),
        log_level="warning",
        lifespan="auto",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"peer {name} did not start")
        time.sleep(0.02)
    try:
        yield Peer(name=name, port=port, recorder=recorder)
    finally:
        server.should_exit = True
        thread.join(timeout=10)

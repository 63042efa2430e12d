"""A loopback forwarder that adds `Authorization: Bearer <key>` to every request it relays.

Why: `@modelcontextprotocol/conformance server --url` has no option to send an Authorization
header, and the mount (rightly) refuses anonymous callers. Everything else — Host, Origin, the MCP
headers, the body, the status and the streamed response — passes through unchanged, so the
suite's DNS-rebinding and header checks still judge the host itself. Used only by
scripts/mcp-conformance.sh; never part of the served application.

    python scripts/mcp_bearer_proxy.py --listen-port P --upstream http://127.0.0.1:Q --key-file F
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: str, key: str) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = [tuple(line.split(":", 1)) for line in lines[1:] if ":" in line]
            headers = [(name.strip(), value.strip()) for name, value in headers]
            length = next((int(v) for n, v in headers if n.lower() == "content-length"), 0)
            body = await reader.readexactly(length) if length else b""
            forwarded = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP | {"authorization"}]
            forwarded.append(("Authorization", f"Bearer {key}"))
            async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
                request = client.build_request(method, upstream + target, headers=forwarded, content=body)
                response = await client.send(request, stream=True)
                writer.write(f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n".encode("latin-1"))
                for name, value in response.headers.multi_items():
                    if name.lower() not in HOP_BY_HOP:
                        writer.write(f"{name}: {value}\r\n".encode("latin-1"))
                writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
                async for chunk in response.aiter_raw():
                    writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                await response.aclose()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--key-file", required=True)
    args = parser.parse_args()
    key = Path(args.key_file).read_text().strip()
    server = await asyncio.start_server(
        lambda r, w: relay(r, w, args.upstream.rstrip("/"), key), "127.0.0.1", args.listen_port
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())

"""The README's snippets run as printed against a live host, and print what the README says.

A runnable snippet is a fenced block right after `<!-- snippet: NAME -->` (python or sh); what it
prints is the `text` block right after `<!-- prints: NAME -->`, line for line, where `...` stands
for any run of characters (ids, ports). Each snippet runs as a reader runs it: its own process, in
a folder holding `var/demo-api-key` (the demo tenant's key, as `make setup` writes it), with `PORT`
naming the web server. The host is started as tests/live.py starts the processes `make run`
starts (uvicorn with its flags, a Celery worker, `grpc_serve`), advertising its own URLs (the card
names this web port and this gRPC port, as `make run PORT= GRPC_PORT=` makes it), on the test's
database with the demo tenant seeded. A snippet that changes and breaks, or prints something else,
fails here.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.tenants.models import Tenant
from apps.tenants.services import api_key_create
from tests.live import ROOT, LiveProcess, start_grpc, start_web

README = ROOT / "README.md"
README_MAX_LINES = 300  # the five-minute page: everything else is in docs/
SNIPPET = re.compile(r"<!-- snippet: (?P<name>[\w-]+) -->\n```(?P<lang>\w+)\n(?P<code>.*?)^```", re.S | re.M)
PRINTS = re.compile(r"<!-- prints: (?P<name>[\w-]+) -->\n```text\n(?P<out>.*?)^```", re.S | re.M)
SNIPPET_TIMEOUT = 180  # a snippet waits for runs the worker executes; generous under a loaded machine


@dataclass(frozen=True)
class Snippet:
    name: str
    lang: str
    code: str
    expected: str


def snippets_of(text: str) -> dict[str, Snippet]:
    """The runnable snippets of a Markdown text, by name, each with the output it shows."""
    printed = {m["name"]: m["out"] for m in PRINTS.finditer(text)}
    found: dict[str, Snippet] = {}
    for match in SNIPPET.finditer(text):
        name = match["name"]
        assert name not in found, f"two snippets are named {name!r}"
        assert name in printed, f"snippet {name!r} shows no `<!-- prints: {name} -->` block"
        found[name] = Snippet(name=name, lang=match["lang"], code=match["code"], expected=printed[name])
    assert set(printed) <= set(found), f"output shown for no snippet: {sorted(set(printed) - set(found))}"
    return found


def output_matches(expected: str, actual: str) -> bool:
    """Every line as shown, `...` matching any run of characters; no line more or fewer."""
    want, got = expected.rstrip("\n").split("\n"), actual.rstrip("\n").split("\n")
    if len(want) != len(got):
        return False
    patterns = [re.compile(".*?".join(re.escape(part) for part in line.split("...")) + r"\Z") for line in want]
    return all(pattern.match(line) for pattern, line in zip(patterns, got, strict=True))


SNIPPETS = snippets_of(README.read_text())


def test_the_readme_is_a_five_minute_page_whose_snippets_cover_every_door() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}: the rest goes to docs/"
    code = "\n".join(snippet.code for snippet in SNIPPETS.values())
    assert {"a2a", "mcp", "rest", "grpc"} <= set(SNIPPETS), sorted(SNIPPETS)
    # A2A picks its skill explicitly (the default skill may change), streams, and resumes a task.
    assert '"openwop": {"skillId"' in SNIPPETS["a2a"].code and "streaming=True" in SNIPPETS["a2a"].code
    assert "task_id=task_id" in SNIPPETS["a2a"].code
    assert "io.modelcontextprotocol/tasks" in SNIPPETS["mcp"].code and "Bearer" in SNIPPETS["mcp"].code
    assert '"resumeValue"' in SNIPPETS["rest"].code and 'supported_protocol_bindings=["GRPC"]' in code
    assert ":8000" not in code, "snippets take the port from PORT"


def test_output_matching_is_line_for_line() -> None:
    shown = "echo: TASK_STATE_COMPLETED {'text': 'hello'}\nid: key-...\n"
    assert output_matches(shown, "echo: TASK_STATE_COMPLETED {'text': 'hello'}\nid: key-3f2a\n")
    assert not output_matches(shown, "echo: TASK_STATE_FAILED {'text': 'hello'}\nid: key-3f2a\n")
    assert not output_matches(shown, "echo: TASK_STATE_COMPLETED {'text': 'hello'}\n")  # a line missing
    assert not output_matches(shown, "echo: TASK_STATE_COMPLETED {'text': 'hello'}\nid: key-1\nmore\n")
    assert not output_matches("a ... b", "a x\ny b")  # `...` never spans lines
    assert not output_matches("tenant: demo", "tenant: demo2")  # no prefix match


@pytest.fixture(scope="module")
def _snippet_host(_live_env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """(base URL) of uvicorn and grpc_serve started as `make run` starts them, the card naming both."""
    env, var_dir = _live_env
    grpc: LiveProcess
    grpc, grpc_address = start_grpc(env, var_dir)
    web, base_url = start_web(
        {**env, "OPENWOP_GRPC_ENABLED": "1", "OPENWOP_GRPC_URL": grpc_address}, var_dir, own_public_url=True
    )
    yield base_url
    web.stop()
    grpc.stop()


@pytest.fixture
def checkout(_snippet_host: str, live_worker: LiveProcess, tmp_path: Path) -> Path:
    """A folder laid out as the checkout is after `make setup`: the demo tenant seeded, its key in
    var/demo-api-key."""
    call_command("seed_demo", stdout=io.StringIO())
    _, raw = api_key_create(tenant=Tenant.objects.get(slug="demo"), label="make run demo key")
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "demo-api-key").write_text(raw + "\n")
    return tmp_path


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_readme_snippet_runs_as_printed(name: str, checkout: Path, _snippet_host: str) -> None:
    snippet = SNIPPETS[name]
    if snippet.lang == "python":
        path = checkout / "hello.py"
        path.write_text(snippet.code)
        command = [sys.executable, str(path)]
    else:
        assert snippet.lang == "sh", f"snippet {name!r}: no runner for {snippet.lang!r}"
        command = ["bash", "-euo", "pipefail", "-c", snippet.code]
    env = {**os.environ, "PORT": _snippet_host.rsplit(":", 1)[1]}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # a reader's shell has none
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=SNIPPET_TIMEOUT)
    assert done.returncode == 0, f"README snippet {name!r} failed:\n{done.stdout}\n{done.stderr}"
    assert output_matches(snippet.expected, done.stdout), (
        f"README snippet {name!r} printed\n{done.stdout}\nbut the README shows\n{snippet.expected}"
    )

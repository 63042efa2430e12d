"""A newcomer's first hour (issue 19): a fresh clone, with no spec folder beside it and no variables
set, runs `make setup` (what `make run` does before it starts the servers), then the management
commands the README and `make run` print, exactly as written, and they work.

The clone is the checkout's files (tracked and untracked, minus what .gitignore ignores) copied into
a temporary folder. Installing is already done: its `.venv` is a bare venv whose site-packages
point at the running interpreter's (so nothing is downloaded and the shared venv is not touched).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A printed management command: `.venv/bin/python manage.py ...` (README) or `$(BIN)/python ...` (Makefile).
PRINTED = re.compile(r"(?:\.venv/bin|\$\(BIN\))/python manage\.py [^`)\n\"]+")
SIBLING = "shared"  # the folder beside the checkout that tests once read the schemas from
BESIDE_THE_CHECKOUT = re.compile(rf"\.\./{SIBLING}|/ \"{SIBLING}\"|\"{SIBLING}/|parents\[3\]")
PLACEHOLDERS = {" [--kind user|agent]": "", "<slug>": "newcomer", "<name>": "newcomer"}


def _clone(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    )  # fmt: skip
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest / ".venv")], check=True)
    site = next((dest / ".venv/lib").glob("python*/site-packages"))
    (site / "reuse_installed.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    (dest / ".venv/.installed-stamp").touch()  # installed: newer than the copied pyproject.toml


def _clean_env(home: Path) -> dict[str, str]:
    """No variables set: only what a login shell has (no DJANGO_*, DATABASE_URL, REDIS_URL, ...)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


def _printed_commands() -> list[str]:
    """The README's code spans and the lines `make run` echoes that are management commands."""
    readme = re.findall(r"`(\.venv/bin/python manage\.py [^`]+)`", (ROOT / "README.md").read_text())
    echoed = [
        match
        for line in (ROOT / "Makefile").read_text().splitlines()
        if line.lstrip().startswith("@echo")
        for match in PRINTED.findall(line)
    ]
    commands: list[str] = []
    for printed in readme + echoed:
        command = printed.strip().replace("$(BIN)", ".venv/bin")
        for placeholder, value in PLACEHOLDERS.items():
            command = command.replace(placeholder, value)
        if command not in commands:
            commands.append(command)
    return commands


def test_dotenv_is_git_ignored() -> None:
    assert subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT).returncode == 0


def test_no_test_reads_beside_the_checkout() -> None:
    offending = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path != Path(__file__).resolve() and BESIDE_THE_CHECKOUT.search(path.read_text())
    ]
    assert offending == []
    assert (ROOT / "spec/README.md").is_file() and "CC BY 4.0" in (ROOT / "spec/README.md").read_text()


@pytest.mark.timeout(900)  # dozens of commands, each starting Django (and the embedded PostgreSQL) afresh
def test_fresh_clone_make_setup_then_the_printed_commands(embedded_tmp: Path) -> None:
    tmp_path = embedded_tmp
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("make and git are needed to play a fresh clone")
    clone = tmp_path / "openwop-host"
    clone.mkdir()
    _clone(clone)
    assert not (clone.parent / "shared").exists() and not (clone / ".env").exists()
    env = _clean_env(tmp_path / "home")

    def sh(command: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            shlex.split(command), cwd=clone, env={**env, **extra}, capture_output=True, text=True, timeout=300
        )

    # Before setup there is no .env: the checkout is production and refuses a missing secret.
    refused = sh(".venv/bin/python manage.py check")
    assert refused.returncode != 0 and "DJANGO_SECRET_KEY is required" in refused.stderr

    setup = sh("make setup")
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    dotenv = (clone / ".env").read_text()
    assert "DJANGO_DEBUG=1" in dotenv and re.search(r"^DJANGO_SECRET_KEY=\S{40,}$", dotenv, re.M)
    assert stat.S_IMODE((clone / ".env").stat().st_mode) == 0o600
    assert (clone / "var/demo-api-key").read_text().strip()
    again = sh("make setup")  # a restart keeps the secret (sessions and signed tokens survive it)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (clone / ".env").read_text() == dotenv

    commands = _printed_commands()
    names = {command.split()[2] for command in commands}
    assert {"create_api_key", "createsuperuser", "console_member_create"} <= names, commands
    for command in commands:
        extra: dict[str, str] = {}
        if command.endswith("createsuperuser"):
            # No terminal here, so Django's documented non-interactive form of the same command.
            command += " --noinput --username admin --email admin@example.invalid"
            extra = {"DJANGO_SUPERUSER_PASSWORD": "a-long-newcomer-password-1"}
        if " console_member_create " in command:
            extra = {"OPENWOP_CONSOLE_PASSWORD": "a-long-newcomer-password-2"}  # the README's way, not argv
        result = sh(command, **extra)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        if " create_api_key " in command:
            assert len(result.stdout.split()) == 1, "the key alone on stdout"

    made = sh(
        '.venv/bin/python manage.py shell -c "from django.contrib.auth import get_user_model as g;'
        " print(sorted(g().objects.filter(username__in=['admin', 'newcomer']).values_list('username', flat=True)))\""
    )
    assert made.returncode == 0, made.stderr[-2000:]
    assert made.stdout.strip().splitlines()[-1] == "['admin', 'newcomer']"

    # Real environment variables still win over .env: production without a secret still refuses.
    prod = sh(".venv/bin/python manage.py check", DJANGO_DEBUG="0", DJANGO_SECRET_KEY="")
    assert prod.returncode != 0 and "DJANGO_SECRET_KEY is required" in prod.stderr

    # The spec the tests validate against travels with the clone.
    spec_tests = sh(".venv/bin/python -m pytest -q -p no:cacheprovider -n 0 tests/core/test_vendor_codes.py")
    assert spec_tests.returncode == 0, spec_tests.stdout[-3000:]
    assert " passed" in spec_tests.stdout and "skipped" not in spec_tests.stdout

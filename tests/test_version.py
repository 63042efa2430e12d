"""Releases have numbers: one value, printed everywhere the host names itself, and the release it
upgrades from named in deploy/upgrade-from (a commit of this repository's history)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from django.test import Client
from packaging.version import Version

from openwop_host import __version__

ROOT = Path(__file__).resolve().parent.parent


def _release_headings() -> list[str]:
    return re.findall(r"^## (\S+)\s*$", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)


def test_one_number_in_every_file_that_carries_it() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__
    chart = (ROOT / "deploy/helm/openwop-host/Chart.yaml").read_text()
    assert re.search(r'^appVersion: "([^"]+)"', chart, flags=re.MULTILINE).group(1) == __version__  # type: ignore[union-attr]
    assert _release_headings()[0] == __version__


def test_every_release_has_an_upgrading_note() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert sections
    for section in sections:
        assert "### Upgrading" in section, section.splitlines()[0]


def test_upgrade_from_names_an_older_release_of_this_history() -> None:
    upgrade_from = tomllib.loads((ROOT / "deploy/upgrade-from").read_text())
    assert Version(upgrade_from["version"]) < Version(__version__)
    assert upgrade_from["version"] in _release_headings()
    assert re.fullmatch(r"[0-9a-f]{40}", upgrade_from["commit"])
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{upgrade_from['commit']}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0 and (ROOT / ".git").exists():
        shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True)
        if shallow.stdout.strip() == b"true":
            pytest.skip("a shallow clone: the release to upgrade from is not in its history")
    assert found.returncode == 0, f"commit {upgrade_from['commit']} is not in this repository's history"


@pytest.mark.django_db
def test_the_doors_print_the_release_number() -> None:
    discovery = Client().get("/.well-known/openwop").json()
    assert discovery["implementation"]["version"] == __version__
    assert Client().get("/.well-known/agent-card.json").json()["version"] == __version__
    from apps.mcp.projection import SERVER_VERSION

    assert __version__ == SERVER_VERSION

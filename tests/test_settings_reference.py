"""The configuration reference (docs/reference/configuration.md) names every environment variable
the settings read, and is what scripts/settings_reference.py generates from them today.

The variables are found here a second way, by a plain text search of settings.py for every call
that reads one, so a read the generator's parser missed fails as surely as a stale page.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap

from tests.live import ROOT

_spec = importlib.util.spec_from_file_location("settings_reference", ROOT / "scripts" / "settings_reference.py")
assert _spec is not None and _spec.loader is not None
reference = importlib.util.module_from_spec(_spec)
sys.modules["settings_reference"] = reference  # dataclasses look their module up by name
_spec.loader.exec_module(reference)

SETTINGS = ROOT / "openwop_host" / "settings.py"
PAGE = ROOT / "docs" / "reference" / "configuration.md"
# env.str("X", ...), environ.Env().str(...), env.db(...); os.environ.get("X"), os.environ["X"]; os.getenv("X")
READ = re.compile(
    r"""(?:\benv|Env\(\))\.\w+\(\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|os\.environ(?:\.get\(|\[)\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|os\.getenv\(\s*["']([A-Z][A-Z0-9_]*)["']"""
)


def _rows(page: str) -> set[str]:
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", page, flags=re.M))


def test_every_variable_the_settings_read_has_a_row() -> None:
    read = {next(g for g in match.groups() if g) for match in READ.finditer(SETTINGS.read_text())}
    assert len(read) > 60, sorted(read)  # the search itself still finds the settings' reads
    missing = read - _rows(PAGE.read_text())
    assert not missing, f"{PAGE.relative_to(ROOT)} lacks {sorted(missing)}: run `make docs-reference`"


def test_the_page_is_what_the_generator_writes_now() -> None:
    assert PAGE.read_text() == reference.reference_markdown(ROOT), "stale: run `make docs-reference`"
    done = subprocess.run(
        [sys.executable, "scripts/settings_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_every_row_says_what_it_does_and_its_default() -> None:
    for variable in reference.settings_variables(SETTINGS.read_text()):
        assert variable.default, variable.name
        assert reference.NOTES.get(variable.name) or variable.comment, f"{variable.name}: no meaning and no comment"


def test_a_new_setting_comes_with_its_comment_default_and_setting() -> None:
    source = textwrap.dedent(
        """
        import environ
        env = environ.Env()
        # How long a widget waits (apps/widgets.py), in seconds.
        OPENWOP_WIDGET_WAIT_SECONDS = env.float("OPENWOP_WIDGET_WAIT_SECONDS", default=2 * 60.0)
        _depth = env.int("OPENWOP_WIDGET_DEPTH", default=3)  # levels of nesting
        WIDGETS = {"depth": _depth}
        if env.bool("OPENWOP_WIDGET_LOUD", default=False):
            WIDGET_VOLUME = 11
        """
    )
    sources = {"apps/widgets.py": "from django.conf import settings\nsettings.OPENWOP_WIDGET_WAIT_SECONDS\n"}
    found = {v.name: v for v in reference.settings_variables(source, sources)}
    assert list(found) == ["OPENWOP_WIDGET_WAIT_SECONDS", "OPENWOP_WIDGET_DEPTH", "OPENWOP_WIDGET_LOUD"]
    wait = found["OPENWOP_WIDGET_WAIT_SECONDS"]
    assert (wait.kind, wait.default, wait.settings) == ("float", "`120`", ["OPENWOP_WIDGET_WAIT_SECONDS"])
    assert wait.comment == "How long a widget waits (apps/widgets.py), in seconds."
    assert wait.readers == ["`apps/widgets.py`"]
    depth = found["OPENWOP_WIDGET_DEPTH"]
    assert (depth.default, depth.comment, depth.settings) == ("`3`", "levels of nesting", ["WIDGETS"])
    loud = found["OPENWOP_WIDGET_LOUD"]
    assert (loud.default, loud.settings) == ("`0` (off)", ["WIDGET_VOLUME"])

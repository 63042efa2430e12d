"""The lock files (requirements/README.md) pin what pyproject.toml asks for, each with its hashes,
one version per package across the four, and every install reads them: a pyproject edit without
`make lock` fails here, not on a fresh clone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = {  # lock file -> the extras of pyproject.toml it covers
    "main": (),
    "test": ("test",),
    "bench": ("test", "bench"),
    "chart": ("test", "chart"),
    "docs": ("test", "docs"),
}
ENTRY = re.compile(r"^(?P<requirement>[A-Za-z0-9][^\s\\]*(?: ; [^\\]+?)?)\s*\\?$")


def parse_lock(text: str) -> dict[str, tuple[str, int]]:
    """name -> (pinned version, number of hashes) of the entries that apply to this interpreter."""
    pins: dict[str, tuple[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("    --hash=sha256:") and current is not None:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
            continue
        match = ENTRY.match(line)
        if not match:
            continue
        requirement = Requirement(match["requirement"])
        current = None
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        (spec,) = requirement.specifier  # every entry is one `==`
        assert spec.operator == "==", line
        current = canonicalize_name(requirement.name)
        pins[current] = (spec.version, 0)
    return pins


def _declared(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in extras:
        names += project["optional-dependencies"][extra]
    return [Requirement(name) for name in names]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_a_lock_pins_what_pyproject_asks_with_hashes(lock: str) -> None:
    pins = parse_lock((ROOT / "requirements" / f"{lock}.lock").read_text())
    environment = default_environment()
    for requirement in _declared(LOCKS[lock]):
        if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock}.lock has no {name}: run make lock"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock}.lock pins {name}=={version}, pyproject.toml asks {requirement.specifier}: run make lock"
        )
    assert "setuptools" in pins  # the build backend: installs build the project without isolation
    assert all(hashes for _, hashes in pins.values()), [name for name, (_, h) in pins.items() if not h]


def test_one_version_per_package_across_the_locks() -> None:
    seen: dict[str, tuple[str, str]] = {}
    for lock in LOCKS:
        for name, (version, _) in parse_lock((ROOT / "requirements" / f"{lock}.lock").read_text()).items():
            first = seen.setdefault(name, (lock, version))
            assert first[1] == version, f"{name}: {first[0]}.lock has {first[1]}, {lock}.lock {version}"


def test_the_parser_sees_a_mismatch() -> None:
    """The checks above read what they should: an unpinned or hashless entry is caught."""
    pins = parse_lock("django==5.1.0 \\\n    --hash=sha256:00\nuv==0.1 ; sys_platform == 'nowhere' \\\n")
    assert pins == {"django": ("5.1.0", 1)}
    assert not Requirement("django>=5.2,<5.3").specifier.contains(pins["django"][0])


def test_every_install_reads_a_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for lock in ("test", "bench", "chart", "docs"):
        assert f"$(PIP_LOCKED) requirements/{lock}.lock" in makefile
    assert "--require-hashes" in makefile
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "pip install --require-hashes --no-deps -r requirements/main.lock" in dockerfile
    installs = re.findall(r"pip install [^\n]*", dockerfile)
    assert all("--require-hashes" in line or "--no-deps" in line for line in installs), installs


def test_the_image_lock_holds_everything_the_host_imports() -> None:
    """docker/Dockerfile installs main.lock alone: every distribution apps/ and openwop_host import
    must be in it (a2a-sdk and mcp were test-only until 0.20.0, so the image could not start)."""
    import ast
    import sys
    from importlib.metadata import packages_distributions

    modules: set[str] = set()
    for folder in ("apps", "openwop_host"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    owners = packages_distributions()
    third_party = modules - set(sys.stdlib_module_names) - {"apps", "openwop_host"}
    pins = parse_lock((ROOT / "requirements" / "main.lock").read_text())
    missing = sorted(
        f"{module} ({', '.join(owners.get(module, ['?']))})"
        for module in third_party
        if not any(canonicalize_name(dist) in pins for dist in owners.get(module, []))
    )
    assert not missing, f"imported by the host but not in main.lock: {missing}"

"""Calls follow the floors of apps/ (pyproject.toml [tool.importlinter]): a lower app calls a higher
one only by importing it, which the layers contract refuses, so nothing may route such a call
around the contract at start-up.

- No apps/*/apps.py assigns into another app's module: no `module.attr = f`, `holder[:] = [f]`,
  `registry[key] = f`, `setattr(module, ...)` and no `holder.append(f)` on another app's names. A
  ready() only calls the extension points lower apps declare for it (`register_capability`,
  `on_events_written`, ...), each a named function of the lower app.
- No module calls through a one-slot holder (`_holder[0](...)`, `_holder["sync"](...)` on a module
  list or dict that starts empty): "go to definition" on such a call lands on a placeholder.

Both read the source (ast), so they fail on the pattern itself, before anything runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[2] / "apps"
MUTATORS = frozenset(
    {"append", "extend", "insert", "update", "setdefault", "add", "clear", "pop", "remove", "discard", "__setitem__"}
)
# The one-slot holders still read from below, each with why it is not yet an import: the OAuth
# lanes (the tenants floor) read the MCP mount path from the facets app, which sits above them.
HOLDERS_LEFT = {("oauth/selectors.py", "_mcp_paths")}


def _app_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "apps" else None


def _foreign_names(tree: ast.Module, app: str) -> dict[str, str]:
    """The names a module binds to another app's modules or objects (local imports included): name
    -> that app. `import apps.x.y` binds `apps`, resolved per attribute chain (`_owner`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            owner = _app_of(node.module)
            if node.module == "apps":  # `from apps import push`: each name is an app
                names.update({a.asname or a.name: a.name for a in node.names if a.name != app})
            elif owner is not None and owner != app:
                names.update({alias.asname or alias.name: owner for alias in node.names})
        elif isinstance(node, ast.Import):
            for alias in node.names:
                owner = _app_of(alias.name)
                if owner is not None and owner != app and alias.asname:
                    names[alias.asname] = owner
    return names


def _owner(node: ast.expr, foreign: dict[str, str], app: str) -> str | None:
    """The other app an expression's root belongs to (`m.a.b[0]` -> m's), or None."""
    chain: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        if isinstance(node, ast.Attribute):
            chain.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    if node.id == "apps" and chain:  # `import apps.x.y` then apps.x.y.attr = ...
        owner = chain[-1]
        return owner if owner != app else None
    return foreign.get(node.id)


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        yield from node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        yield node.target
    elif isinstance(node, ast.Delete):
        yield from node.targets


def _flatten(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _flatten(element)
    else:
        yield target


def start_up_assignments(source: str, app: str) -> list[str]:
    """Every place an apps.py of `app` writes into another app's module: `line: what`."""
    tree = ast.parse(source)
    foreign = _foreign_names(tree, app)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        for target in (t for top in _targets(node) for t in _flatten(top)):
            if isinstance(target, ast.Attribute | ast.Subscript) and _owner(target, foreign, app):
                found.append((node.lineno, f"{ast.unparse(target)} assigned"))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            if _owner(node.args[0], foreign, app):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(func, ast.Attribute) and func.attr in MUTATORS and _owner(func.value, foreign, app):
            found.append((node.lineno, f"{ast.unparse(func)}() on another app's object"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def _empty_container(value: ast.expr | None) -> bool:
    """`[]`, `{}`, `list()` or `dict()`."""
    if isinstance(value, ast.List):
        return not value.elts
    if isinstance(value, ast.Dict):
        return not value.keys
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "dict"):
        return not (value.args or value.keywords)
    return False


def slot_holders(source: str) -> set[str]:
    """The module-level containers, empty at import, that the module calls through by one slot."""
    tree = ast.parse(source)
    empty: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and _empty_container(node.value):
            empty.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _empty_container(node.value):
            empty.add(node.target.id)
    called: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.value if isinstance(node.func, ast.Attribute) else node.func
        if (
            isinstance(func, ast.Subscript)
            and isinstance(func.value, ast.Name)
            and func.value.id in empty
            and isinstance(func.slice, ast.Constant)
        ):
            called.add(func.value.id)
    return called


def _app_configs() -> list[Path]:
    return sorted(APPS.glob("*/apps.py"))


def _app_modules() -> Iterator[Path]:
    for path in sorted(APPS.rglob("*.py")):
        if "migrations" not in path.relative_to(APPS).parts:
            yield path


@pytest.mark.parametrize("config", _app_configs(), ids=lambda path: path.parent.name)
def test_no_app_assigns_into_another_at_start_up(config: Path) -> None:
    assert start_up_assignments(config.read_text(), config.parent.name) == []


def test_no_call_goes_through_a_one_slot_holder() -> None:
    held = {(str(path.relative_to(APPS)), name) for path in _app_modules() for name in slot_holders(path.read_text())}
    assert held == HOLDERS_LEFT


# ---------------------------------------------------------------------------------------------
# The checks themselves: each refuses the patterns apps/ used before its calls were imports.

A2A_READY = """
from django.apps import AppConfig

class A2AConfig(AppConfig):
    def ready(self):
        from apps.a2a.previews import agent_card_preview, served_card_wire
        from apps.agents import admin as agents_admin
        from apps.facets import admin as facets_admin
        from apps.a2a import previews

        previews.local = 1  # this app's own module: not a finding
        agents_admin.card_previews[:] = [agent_card_preview]
        facets_admin.served_cards[:] = [served_card_wire]
"""

PUSH_READY = """
from django.apps import AppConfig

class PushAppConfig(AppConfig):
    def ready(self):
        import apps.mcp.projection
        from apps.a2a import operations
        from apps.agents.definitions import node_checks
        from apps.push import services
        from apps.push.limits import push_backlog_check
        from apps.runs.log import on_events_written

        on_events_written(services.push_deliveries_for_events, owed_probe="")  # a declared extension point
        operations.push_services = services
        operations.push_backlog_check, x = push_backlog_check, 1
        node_checks[:] = [services.push_config_wire]
        node_checks.append(services.push_config_wire)
        setattr(operations, "push_services", services)
        apps.mcp.projection._task_ttl["sync"] = len
"""


def test_the_assignment_check_refuses_writes_into_other_apps() -> None:
    assert start_up_assignments(A2A_READY, "a2a") == [
        "12: agents_admin.card_previews[:] assigned",
        "13: facets_admin.served_cards[:] assigned",
    ]
    assert start_up_assignments(PUSH_READY, "push") == [
        "14: operations.push_services assigned",
        "15: operations.push_backlog_check assigned",
        "16: node_checks[:] assigned",
        "17: node_checks.append() on another app's object",
        "18: setattr(operations, 'push_services', services)",
        "19: apps.mcp.projection._task_ttl['sync'] assigned",
    ]


def test_the_holder_check_finds_a_call_through_one_slot() -> None:
    source = """
from typing import Any, NamedTuple
_writers: list[Any] = []
_ttl: dict[str, Any] = {}
_names = []
KNOWN: dict[str, int] = {"a": 1}

def write(**kwargs: Any) -> None:
    _writers[0].append(**kwargs)

def ttl(pk: int) -> int:
    return _ttl["sync"](pk) if _ttl else KNOWN["a"]

def names() -> list[str]:
    return [name for name in _names]
"""
    assert slot_holders(source) == {"_writers", "_ttl"}

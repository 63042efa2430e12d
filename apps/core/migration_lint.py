"""The migration rules, checked (docs/contributors/migrations.md; `manage.py migrations_lint`, run by
CI). A migration runs while the previous release serves, so it may not:

- `index-not-concurrent` build an index on an existing table inside a transaction (AddIndex, a
  unique or indexed field or constraint, unique_together, `CREATE INDEX` without CONCURRENTLY):
  writes wait for the whole build. Use AddIndexConcurrently in an `atomic = False` migration.
- `index-drop-not-concurrent` drop one without CONCURRENTLY (RemoveIndex, a field losing its index
  or uniqueness, a unique constraint removed). Use RemoveIndexConcurrently.
- `alter-column` change an existing column (AlterField that reaches the database: a type change
  rewrites the table, SET NOT NULL scans it, under ACCESS EXCLUSIVE). Add a column, backfill it,
  switch readers over, drop the old one in a later release.
- `not-null-without-db-default` add a NOT NULL column that only Django fills in (`default=`): the
  previous release inserts rows without it. Use `null=True` or a constant `db_default`.
- `constraint-validated-under-lock` add a CHECK or FOREIGN KEY constraint that is validated while
  the table is locked. Add it NOT VALID, then VALIDATE CONSTRAINT in a later migration.
- `drop-or-rename` drop or rename a table or column the previous release still reads. Contract
  only in the release after the one that stopped reading it (listed as an exception, with that
  release).
- `data-in-migrate` change rows (RunPython, or UPDATE / INSERT / DELETE / COPY in RunSQL): a
  backfill holds its locks and rows for its whole run. Register a backfill (apps/core/backfills.py).
- `table-lock` take a table lock by hand (LOCK TABLE, VACUUM FULL, CLUSTER, REINDEX without
  CONCURRENTLY).
- `irreversible` be one-way without saying so: every operation reverses, or the migration is listed
  as one-way with what to do instead (`instead`).

Statements on a table created by the same migration are exempt (nobody reads it yet). The accepted
exceptions, each with its reason, are in `deploy/migration-exceptions.toml`; an exception that no
longer matches a finding is itself an error (the list stays true).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models
from django.db.migrations import operations as ops
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.migration import Migration
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

RULES = (
    "index-not-concurrent", "index-drop-not-concurrent", "alter-column", "not-null-without-db-default",
    "constraint-validated-under-lock", "drop-or-rename", "data-in-migrate", "table-lock", "irreversible",
)  # fmt: skip
EXCEPTIONS_FILE = Path(settings.BASE_DIR) / "deploy" / "migration-exceptions.toml"

_CREATE_TABLE = re.compile(r'\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"?(\w+)"?', re.I)
_CREATE_INDEX = re.compile(
    r'\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?:"?\w+"?\s+)?ON\s+(?:ONLY\s+)?"?(\w+)"?',
    re.I,
)
_DROP_INDEX = re.compile(r"\bDROP\s+INDEX\s+(?!CONCURRENTLY)", re.I)
_ALTER_TABLE = re.compile(r'\bALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?"?(\w+)"?(.*?)(?:;|$)', re.I | re.S)
_DML = re.compile(
    r'^\s*(?:WITH\b.*?\)\s*)?(UPDATE|INSERT\s+INTO|DELETE\s+FROM|COPY)\s+(?:ONLY\s+)?"?(\w+)"?', re.I | re.S
)
_TABLE_LOCK = re.compile(
    r"^\s*(LOCK\s+(?:TABLE\s+)?\w|VACUUM\s+FULL|CLUSTER\b|REINDEX\s+(?!.*CONCURRENTLY))", re.I | re.S
)
_DROP_RENAME = re.compile(r"^\s*DROP\s+TABLE\b", re.I)
_STATEMENTS = re.compile(r";\s*(?=(?:[^$']|\$\$[^$]*\$\$|'[^']*')*$)")  # split on semicolons outside quotes


@dataclass(frozen=True, slots=True)
class Finding:
    migration: str  # "app.name"
    rule: str
    detail: str

    def line(self) -> str:
        return f"{self.migration}: {self.rule}: {self.detail}"


@dataclass(slots=True)
class Exception_:
    migration: str
    rules: tuple[str, ...]
    reason: str
    instead: str = ""
    used: set[str] = field(default_factory=set)


@dataclass(slots=True)
class LintResult:
    findings: list[Finding]  # not excepted: errors
    excepted: list[Finding]
    problems: list[str]  # the exceptions file's own: stale, unknown rule, missing reason

    @property
    def ok(self) -> bool:
        return not self.findings and not self.problems


def exceptions_load(path: Path = EXCEPTIONS_FILE) -> tuple[list[Exception_], list[str]]:
    data = tomllib.loads(path.read_text()) if path.exists() else {}
    found: list[Exception_] = []
    problems: list[str] = []
    for entry in data.get("exception", []):
        name = str(entry.get("migration", ""))
        rules = tuple(entry.get("rules", ()))
        unknown = [rule for rule in rules if rule not in RULES]
        if unknown:
            problems.append(f"{path.name}: {name}: unknown rule(s) {', '.join(unknown)}")
        if not str(entry.get("reason", "")).strip():
            problems.append(f"{path.name}: {name}: an exception needs its reason")
        if "irreversible" in rules and not str(entry.get("instead", "")).strip():
            problems.append(f"{path.name}: {name}: a one-way migration says what to do instead (instead = ...)")
        found.append(Exception_(migration=name, rules=rules, reason=str(entry.get("reason", "")),
                                instead=str(entry.get("instead", ""))))  # fmt: skip
    return found, problems


def project_migrations(loader: MigrationLoader) -> Iterator[tuple[Migration, ProjectState]]:
    """Every migration of the graph in apply order, with the state just before it (models only),
    for the apps of this project (apps.*): Django's own are not ours to judge."""
    ours = {config.label for config in _app_configs() if config.name.startswith("apps.")}
    state = ProjectState(real_apps=loader.unmigrated_apps)
    plan = loader.graph.forwards_plan_all() if hasattr(loader.graph, "forwards_plan_all") else _full_plan(loader)
    for key in plan:
        migration = loader.graph.nodes[key]
        before = state.clone() if migration.app_label in ours else None
        for operation in migration.operations:
            operation.state_forwards(migration.app_label, state)
        if before is not None:
            yield migration, before


def _full_plan(loader: MigrationLoader) -> list[tuple[str, str]]:
    plan: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for leaf in sorted(loader.graph.leaf_nodes()):
        for key in loader.graph.forwards_plan(leaf):
            if key not in seen:
                seen.add(key)
                plan.append(key)
    return plan


def _app_configs() -> Iterable[Any]:
    from django.apps import apps

    return apps.get_app_configs()


def lint(loader: MigrationLoader | None = None, *, exceptions_path: Path = EXCEPTIONS_FILE) -> LintResult:
    loader = loader or MigrationLoader(None, ignore_no_migrations=True)
    exceptions, problems = exceptions_load(exceptions_path)
    by_migration = {entry.migration: entry for entry in exceptions}
    findings: list[Finding] = []
    excepted: list[Finding] = []
    for migration, state in project_migrations(loader):
        for finding in migration_findings(migration, state):
            entry = by_migration.get(finding.migration)
            if entry is not None and finding.rule in entry.rules:
                entry.used.add(finding.rule)
                excepted.append(finding)
            else:
                findings.append(finding)
    known = {f"{m.app_label}.{m.name}" for m, _ in project_migrations(loader)}
    for entry in exceptions:
        if entry.migration not in known:
            problems.append(f"exception for {entry.migration}: no such migration")
            continue
        for rule in set(entry.rules) - entry.used:
            problems.append(f"exception for {entry.migration}: it no longer breaks {rule} (remove it)")
    return LintResult(findings=findings, excepted=excepted, problems=problems)


def migration_findings(migration: Migration, state: ProjectState) -> list[Finding]:
    """What `migration` breaks, given the state before it (models only)."""
    label = f"{migration.app_label}.{migration.name}"
    new_tables = _tables_created(migration, state)
    found: list[Finding] = []
    for operation in migration.operations:
        for rule, detail in _operation_findings(migration, operation, state, new_tables):
            found.append(Finding(label, rule, detail))
        operation.state_forwards(migration.app_label, state)  # the next operation sees this one's state
    return found


def _tables_created(migration: Migration, state: ProjectState) -> set[str]:
    tables: set[str] = set()
    for operation in _database_operations(migration.operations):
        if isinstance(operation, ops.CreateModel):
            tables.add(_table_of(migration.app_label, operation.name, operation.options))
        elif isinstance(operation, ops.RunSQL):
            tables |= {match.lower() for match in _CREATE_TABLE.findall(_sql_text(operation.sql))}
        elif isinstance(operation, ops.RunPython) and hasattr(operation.code, "sql_statements"):
            tables |= {match.lower() for match in _CREATE_TABLE.findall(";".join(operation.code.sql_statements))}
    return tables


def _database_operations(operations: Iterable[Operation]) -> Iterator[Operation]:
    for operation in operations:
        if isinstance(operation, ops.SeparateDatabaseAndState):
            yield from _database_operations(operation.database_operations)
        else:
            yield operation


def _table_of(app_label: str, model_name: str, options: dict[str, Any]) -> str:
    return str(options.get("db_table") or f"{app_label}_{model_name.lower()}").lower()


def _model_table(state: ProjectState, app_label: str, model_name: str) -> str:
    model = state.models.get((app_label, model_name.lower()))
    return _table_of(app_label, model_name, model.options if model is not None else {})


def _operation_findings(migration: Migration, operation: Operation, state: ProjectState,
                        new_tables: set[str]) -> Iterator[tuple[str, str]]:  # fmt: skip
    app = migration.app_label
    if not operation.reversible:
        yield "irreversible", f"{type(operation).__name__} has no reverse"
    if isinstance(operation, ops.SeparateDatabaseAndState):
        for inner in operation.database_operations:
            yield from _operation_findings(migration, inner, state, new_tables)
        return
    table = _model_table(state, app, operation.model_name) if hasattr(operation, "model_name") else None
    fresh = table in new_tables
    if isinstance(operation, ops.RunPython):
        statements = getattr(operation.code, "sql_statements", None)  # apps.core.append_only.on_postgresql
        if statements is not None:
            yield from _sql_findings(";\n".join(statements), new_tables)
        else:
            yield "data-in-migrate", "RunPython runs inside migrate: a post-deploy backfill instead"
    elif isinstance(operation, ops.RunSQL):
        yield from _sql_findings(_sql_text(operation.sql), new_tables)
    elif isinstance(operation, (ops.RemoveField, ops.RenameField)):
        yield "drop-or-rename", f"{type(operation).__name__} {operation.model_name}.{operation.name}"
    elif isinstance(operation, (ops.DeleteModel, ops.RenameModel, ops.AlterModelTable)):
        named = getattr(operation, "name", getattr(operation, "old_name", ""))
        yield "drop-or-rename", f"{type(operation).__name__} {named}"
    elif fresh:
        return  # the rest only matter on a table someone else already uses
    elif isinstance(operation, ops.AddIndex) and not isinstance(operation, _concurrent_operations()):
        yield "index-not-concurrent", f"AddIndex {operation.index.name} on {table}: AddIndexConcurrently"
    elif isinstance(operation, ops.RemoveIndex) and not isinstance(operation, _concurrent_operations()):
        yield "index-drop-not-concurrent", f"RemoveIndex {operation.name} on {table}: RemoveIndexConcurrently"
    elif isinstance(operation, (ops.AlterUniqueTogether, ops.AlterIndexTogether)):
        yield "index-not-concurrent", f"{type(operation).__name__} on {table}"
    elif isinstance(operation, ops.AddConstraint):
        constraint = operation.constraint
        if isinstance(constraint, models.UniqueConstraint):
            yield "index-not-concurrent", f"UniqueConstraint {constraint.name} on {table} builds its index under lock"
        else:
            yield "constraint-validated-under-lock", f"{type(constraint).__name__} {constraint.name} on {table}"
    elif isinstance(operation, ops.RemoveConstraint):
        removed = _constraint_named(state, app, operation.model_name, operation.name)
        if isinstance(removed, models.UniqueConstraint):
            yield "index-drop-not-concurrent", f"RemoveConstraint {operation.name} on {table} drops its index"
    elif isinstance(operation, ops.AddField):
        yield from _add_field_findings(operation, table)
    elif isinstance(operation, ops.AlterField):
        yield from _alter_field_findings(state, app, operation, table)


def _concurrent_operations() -> tuple[type, ...]:
    from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently

    return (AddIndexConcurrently, RemoveIndexConcurrently)


def _constraint_named(state: ProjectState, app: str, model_name: str, name: str) -> Any:
    model = state.models.get((app, model_name.lower()))
    return next((c for c in (model.options.get("constraints", []) if model else []) if c.name == name), None)


def _add_field_findings(operation: ops.AddField, table: str | None) -> Iterator[tuple[str, str]]:
    column = operation.field
    where = f"{operation.model_name}.{operation.name} on {table}"
    if column.many_to_many:
        return  # a table of its own
    if not column.null and column.db_default is models.NOT_PROVIDED and not column.primary_key:
        yield "not-null-without-db-default", f"AddField {where}: null=True or a constant db_default"
    if column.unique or getattr(column, "db_index", False):
        yield "index-not-concurrent", f"AddField {where} indexes under lock: db_index=False + AddIndexConcurrently"
    if column.is_relation and getattr(column, "db_constraint", False):
        yield "constraint-validated-under-lock", f"AddField {where}: its foreign key is validated under lock"


def _alter_field_findings(state: ProjectState, app: str, operation: ops.AlterField,
                          table: str | None) -> Iterator[tuple[str, str]]:  # fmt: skip
    model = state.models.get((app, operation.model_name.lower()))
    old = model.fields.get(operation.name) if model is not None else None
    if old is None:
        return
    before, after = old, operation.field
    _, old_path, old_args, old_kwargs = before.deconstruct()
    _, new_path, new_args, new_kwargs = after.deconstruct()
    for attr in before.non_db_attrs:  # help text, choices, a Python default: nothing reaches the database
        old_kwargs.pop(attr, None)
        new_kwargs.pop(attr, None)
    if (old_path, old_args, old_kwargs) == (new_path, new_args, new_kwargs):
        return
    where = f"{operation.model_name}.{operation.name} on {table}"
    old_indexed = old_kwargs.get("unique") or old_kwargs.get("db_index", getattr(before, "db_index", False))
    new_indexed = new_kwargs.get("unique") or new_kwargs.get("db_index", getattr(after, "db_index", False))
    if new_indexed and not old_indexed:
        yield "index-not-concurrent", f"AlterField {where} adds an index under lock"
    if old_indexed and not new_indexed:
        yield "index-drop-not-concurrent", f"AlterField {where} drops an index under lock"
    changed = sorted(
        key for key in set(old_kwargs) | set(new_kwargs)
        if key not in ("unique", "db_index") and old_kwargs.get(key) != new_kwargs.get(key)
    )  # fmt: skip
    if changed or old_path != new_path:
        yield "alter-column", f"AlterField {where} changes {', '.join(changed) or new_path}"


def _sql_text(sql: Any) -> str:
    if isinstance(sql, str):
        return sql
    if sql is ops.RunSQL.noop:
        return ""
    return ";\n".join(item if isinstance(item, str) else str(item[0]) for item in sql)


def _sql_findings(sql: str, new_tables: set[str]) -> Iterator[tuple[str, str]]:
    body = _without_function_bodies(sql)
    for match in _CREATE_INDEX.finditer(body):
        if not match.group(1) and match.group(2).lower() not in new_tables:
            yield "index-not-concurrent", f"CREATE INDEX on {match.group(2)} without CONCURRENTLY"
    if _DROP_INDEX.search(body):
        yield "index-drop-not-concurrent", "DROP INDEX without CONCURRENTLY"
    for statement in _STATEMENTS.split(body):
        if not statement.strip():
            continue
        dml = _DML.match(statement)
        if dml and dml.group(2).lower() not in new_tables:
            yield "data-in-migrate", f"{dml.group(1).split()[0].upper()} {dml.group(2)} inside migrate"
        if _TABLE_LOCK.match(statement):
            yield "table-lock", statement.strip().split("\n")[0][:80]
        if _DROP_RENAME.match(statement):
            yield "drop-or-rename", statement.strip().split("\n")[0][:80]
        for table, rest in _ALTER_TABLE.findall(statement):
            if table.lower() in new_tables:
                continue
            if re.search(r"\b(DROP\s+COLUMN|RENAME\b)", rest, re.I):
                yield "drop-or-rename", f"ALTER TABLE {table}{rest[:60]}"
            if re.search(r"\b(ALTER\s+(COLUMN\s+)?\w+\s+(SET\s+DATA\s+)?TYPE|SET\s+NOT\s+NULL)\b", rest, re.I):
                yield "alter-column", f"ALTER TABLE {table}: a type change or SET NOT NULL"
            if re.search(r"\bADD\s+(CONSTRAINT\s+\w+\s+)?(CHECK|FOREIGN\s+KEY)\b", rest, re.I) and not re.search(
                r"\bNOT\s+VALID\b", rest, re.I
            ):
                yield "constraint-validated-under-lock", f"ALTER TABLE {table}: a constraint without NOT VALID"
            if re.search(r"\bADD\s+(CONSTRAINT\s+\w+\s+)?(UNIQUE|PRIMARY\s+KEY)\b", rest, re.I) and not re.search(
                r"\bUSING\s+INDEX\b", rest, re.I
            ):
                yield "index-not-concurrent", f"ALTER TABLE {table}: a unique key built under lock (USING INDEX)"


def _without_function_bodies(sql: str) -> str:
    """A trigger function's body runs later, row by row; its UPDATEs are not this migration's."""
    return re.sub(r"\$(\w*)\$.*?\$\1\$", "$$ $$", sql, flags=re.S)

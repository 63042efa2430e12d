"""Files the host writes with a credential or tenant data: 0600, in folders 0700 (apps/core/file_modes.py,
SECURITY.md §Files on disk). Folders the host makes are made private; folders an earlier release
made 0755 are tightened; a folder an operator made (an archive's root) keeps its mode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from apps.audit.archive import FileStore
from apps.core.file_modes import private_file, private_folder
from tests.live import ROOT


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_private_folder_makes_each_level_and_tightens_only_what_is_the_hosts(tmp_path: Path) -> None:
    made = private_folder(tmp_path / "a" / "b" / "c")
    assert [_mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", made)] == [0o700] * 3

    root = tmp_path / "archive"
    root.mkdir(mode=0o750)
    root.chmod(0o750)  # the operator's choice (a group of auditors reads it)
    (root / "tenant=acme").mkdir()
    (root / "tenant=acme").chmod(0o755)  # what an earlier release made
    private_folder(root / "tenant=acme" / "2026", root=root)
    assert (_mode(root), _mode(root / "tenant=acme"), _mode(root / "tenant=acme" / "2026")) == (0o750, 0o700, 0o700)

    target = tmp_path / "elsewhere"
    target.mkdir()
    target.chmod(0o755)
    (tmp_path / "link").symlink_to(target)
    private_folder(tmp_path / "link")
    assert _mode(target) == 0o755  # a link is not followed to tighten someone else's folder

    key = tmp_path / "key"
    key.write_text("secret")
    key.chmod(0o644)
    assert _mode(private_file(key)) == 0o600


def test_an_archive_export_is_private_below_an_operators_root(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    root.mkdir()
    root.chmod(0o750)
    source = tmp_path / "records.jsonl.gz"
    source.write_bytes(b"tenant data")
    source.chmod(0o644)  # as the scratch file is written (the process's umask)
    url = FileStore(root).put("tenant=acme/records-1.jsonl.gz", source, content_type="application/gzip")
    written = root / "tenant=acme" / "records-1.jsonl.gz"
    assert url == written.as_uri() and written.read_bytes() == b"tenant data"
    assert (_mode(written), _mode(written.parent), _mode(root)) == (0o600, 0o700, 0o750)


def test_settings_make_var_the_broker_and_the_metrics_folder_private(tmp_path: Path) -> None:
    """What an earlier release left 0755 (var/, the broker's folders), and a metrics folder made by
    whoever starts the processes, are 0700 once a process of the host has started."""
    var, metrics = tmp_path / "var", tmp_path / "metrics"
    for folder in (var / "celery-broker" / "in", metrics):
        folder.mkdir(parents=True)
    for folder in (var, var / "celery-broker", var / "celery-broker" / "in", metrics):
        folder.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"], "DJANGO_DEBUG": "1", "OPENWOP_VAR_DIR": str(var),
        "OPENWOP_ENV_FILE": str(tmp_path / "absent.env"), "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        "DATABASE_URL": "postgres://unused@127.0.0.1:1/none", "DJANGO_SETTINGS_MODULE": "openwop_host.settings",
    }  # fmt: skip
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    broker = var / "celery-broker"
    folders = [var, broker / "in", broker / "processed", broker / "control", metrics]
    assert {str(f.relative_to(tmp_path)): _mode(f) for f in folders} == {
        str(f.relative_to(tmp_path)): 0o700 for f in folders
    }

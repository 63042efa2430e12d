"""Files the host writes that hold a credential or tenant data: mode 0600, in folders mode 0700.

Only the folder's owner may enter it, so what lies inside is out of every other local account's
reach whatever the files' own modes (SECURITY.md §Files on disk). Folders the host creates are
made 0700 from the start; a folder it made under an earlier release (0755) is tightened when this
user owns it. A folder an operator made (an archive root, a mounted volume) keeps its mode. Standard
library only: settings use it before Django is set up.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600


def _tighten(path: Path, mode: int) -> None:
    with contextlib.suppress(OSError):  # gone meanwhile, or a read-only file system
        info = path.lstat()
        if info.st_uid == os.geteuid() and not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
            path.chmod(mode)


def private_folder(path: Path, *, root: Path | None = None) -> Path:
    """`path` as a folder only this user may enter: each missing level created 0700, and `path`
    tightened to 0700 when this user owns it. With `root`, every level strictly below `root` is
    the host's own and tightened too, while `root` (created 0700 if missing) keeps its mode."""
    missing = [level for level in (path, *path.parents) if not level.exists()]
    for level in reversed(missing):
        with contextlib.suppress(FileExistsError):
            level.mkdir(mode=PRIVATE_FOLDER)
    levels = [path] if root is None else [level for level in (path, *path.parents) if root in level.parents]
    for level in levels:
        _tighten(level, PRIVATE_FOLDER)
    return path


def private_file(path: Path) -> Path:
    """Tighten a file the host wrote to 0600 (when this user owns it)."""
    _tighten(path, PRIVATE_FILE)
    return path

"""MkDocs hooks (mkdocs.yml `hooks:`): the repository's SECURITY.md is the site's Security page.

SECURITY.md stays at the repository's root, where GitHub and security scanners look for it; the
site renders the same file, so the two never differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config: Any) -> Files:
    # A link from SECURITY.md into docs/ is written from the repository's root; on the site the
    # page sits at the root of docs/ itself.
    text = (ROOT / "SECURITY.md").read_text().replace("](docs/", "](")
    files.append(File.generated(config, "security.md", content=text))
    return files

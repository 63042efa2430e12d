"""What the host serves as a file to download: CSV exports and their names.

- **Cells** (CWE-1236): a cell beginning with `=`, `+`, `-`, `@`, tab or carriage return is read as
  a formula by spreadsheets; such a cell gets a leading single quote (OWASP's CSV injection rule),
  which the spreadsheet shows as text. Recorded caller strings (a requested version, a tenant's
  label) reach exports, so every string cell goes through `csv_cell`.
- **Names** (RFC 6266): a download's name is built only from letters, digits, `.`, `_` and `-`;
  anything else (quotes, `<`, separators, control characters) becomes `_`. The header carries an
  ASCII `filename` for old clients and the UTF-8 name as `filename*` (RFC 8187 percent-encoding).

One writer (`csv_download`) for every CSV export, one header builder (`attachment_disposition`)
for every download.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

from django.http import StreamingHttpResponse

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NAME_UNSAFE = re.compile(r"[^\w.-]+")  # \w: letters and digits of any script, and "_"
_ASCII_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_MAX = 150


def csv_cell(value: Any) -> Any:
    """A string that a spreadsheet would run as a formula, quoted to be text; anything else as is."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """The CSV text line by line (RFC 4180 quoting by the csv module), every cell through `csv_cell`."""

    class _Line:
        def write(self, value: str) -> str:
            return value

    writer = csv.writer(_Line())
    yield writer.writerow([csv_cell(cell) for cell in header])
    for row in rows:
        yield writer.writerow([csv_cell(cell) for cell in row])


def download_name(name: str) -> str:
    """`name` with every run of unsafe characters as `_`; never empty, never a dotfile."""
    safe = _NAME_UNSAFE.sub("_", unicodedata.normalize("NFKC", name)).lstrip(".")
    return safe[:_NAME_MAX] or "download"


def attachment_disposition(name: str) -> str:
    """`Content-Disposition: attachment` naming `name` (made safe): an ASCII fallback, then the
    UTF-8 name as `filename*` (RFC 6266 §4.3). Neither can close the quotes or start a parameter."""
    safe = download_name(name)
    ascii_only = unicodedata.normalize("NFKD", safe).encode("ascii", "ignore").decode()  # é -> e, 漢 -> ""
    fallback = _ASCII_UNSAFE.sub("_", ascii_only).lstrip(".")
    return f"attachment; filename=\"{fallback or 'download'}\"; filename*=UTF-8''{quote(safe, safe='')}"


def csv_download(*, stem: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> StreamingHttpResponse:
    """A CSV export streamed as `<stem>-<UTC timestamp>.csv` (the stem may hold caller strings)."""
    response = StreamingHttpResponse(csv_lines(header, rows), content_type="text/csv; charset=utf-8")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = attachment_disposition(f"{stem}-{stamp}.csv")
    return response

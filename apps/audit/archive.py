"""Export before expiry (issue 36 item 3): a tenant's records of a time range, archived.

An export is two objects under the archive URL (`OPENWOP_ARCHIVE_URL`, or the one an operator
names): `file:///dir` or `s3://bucket/prefix` (any S3-compatible server: boto3 reads the usual
`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`). Under
`tenant=<slug>/`:

- `records-<since>-<until>-<sha>.jsonl.gz`: gzip'd JSON Lines, one record per line in (subject,
  sequence) order. A line is the record's canonical content (`apps.audit.chain.canonical_content`)
  with `sequence`, `prevDigest` and `digest` added: drop those three and write the rest back with
  sorted keys and no whitespace, and you have the bytes whose SHA-256 the digest covers, so anyone
  holding the file can walk the chain with a JSON library and SHA-256.
- `<same stem>.manifest.json`: tenant, range, count, the file's name, size and SHA-256, and per
  stream its count, first and last sequence and chain head (the last record's digest).

Both are functions of the records alone (gzip header without a name or time, names carry the
file's SHA-256), so exporting the same range twice writes the same bytes under the same names: a
retry after a failure half-way overwrites, never forks. The data file is written before the
manifest and both before the `ArchiveExport` row, so a row never names an object that was not
written. Records are read in keyset batches of short statements (no transaction held open across
the export), which never delays the partition drop that follows it in `retention apply`.

The range is by the record's `at`, as expiry is. A record carries the instant its writer took,
and commits a few milliseconds later: a range ending days ago (retention's cutoffs) is complete,
one ending this very moment may miss a record still in flight. `until` may not lie in the future.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol, cast
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.db import connection
from django.db.models import F
from django.utils import timezone

from apps.audit.chain import canonical_content
from apps.audit.chainer import chain_pending
from apps.audit.models import ArchiveExport, HostEvent
from apps.core.errors import ValidationFailed
from apps.core.file_modes import PRIVATE_FILE, private_folder
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

MANIFEST_FORMAT = "openwop-host.records-export/1"
BATCH = 5000  # records per read: each batch is one short statement
_CHUNK = 1 << 20  # bytes per read when an export is served back
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's bucket naming rules (the common subset)

_EVENTS = HostEvent._meta.db_table
# (subject_id, sequence) > (%s, %s): a row comparison the stream's unique index (tenant, subject,
# sequence, at) answers in order in each partition, so each batch starts where the last one ended without an OFFSET.
_BATCH_SQL = f"""
SELECT subject_id, sequence, subject, event_id, type, durable, at, payload, prev_digest, digest FROM {_EVENTS}
WHERE tenant_id = %s AND at < %s AND at >= %s AND (subject_id, sequence) > (%s, %s)
ORDER BY subject_id, sequence LIMIT %s
"""  # noqa: S608 (our own table name; every value is a parameter)
_BEGINNING = datetime(1, 1, 1, tzinfo=UTC)  # `since` omitted: from the first record


class ArchiveUnavailable(RuntimeError):
    """The archive refused or failed a write or read (no such bucket or directory, denied, down).
    Nothing was recorded: the export did not happen, and nothing may expire on its account."""


class ArchiveStore(Protocol):
    """Where exports go: puts a local file under a key and answers the object's URL."""

    def put(self, key: str, source: Path, *, content_type: str) -> str: ...


@dataclass(frozen=True)
class FileStore:
    root: Path

    def put(self, key: str, source: Path, *, content_type: str) -> str:
        """Move `source` in under a name of its own, then rename: a reader never sees half a file,
        and two writers of the same export (same bytes) never move each other's file away."""
        target = self.root / key
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        try:
            # Tenant data: 0600 in folders 0700 below the archive's root (apps/core/file_modes.py).
            private_folder(target.parent, root=self.root)
            shutil.move(source, partial)
            os.chmod(partial, PRIVATE_FILE)
            os.replace(partial, target)
        except OSError as exc:
            raise ArchiveUnavailable(f"Could not write {target}: {exc.strerror or exc}") from exc
        return target.as_uri()


@dataclass(frozen=True)
class S3Store:
    bucket: str
    prefix: str

    def put(self, key: str, source: Path, *, content_type: str) -> str:
        """Upload (multipart when large). No Content-Encoding: the object is the gzip file itself,
        byte for byte what the manifest's SHA-256 covers, never decompressed on the way."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = f"{self.prefix}/{key}" if self.prefix else key
        try:
            _s3_client().upload_file(str(source), self.bucket, full_key, ExtraArgs={"ContentType": content_type})
        except (Boto3Error, BotoCoreError, ClientError) as exc:  # their messages carry no credentials
            raise ArchiveUnavailable(f"Could not write s3://{self.bucket}/{full_key}: {exc}") from exc
        return f"s3://{self.bucket}/{full_key}"


def _s3_client() -> Any:
    """A client for AWS or any S3-compatible server. An explicit endpoint (AWS_ENDPOINT_URL) gets
    path-style addressing, which every S3-compatible server understands (virtual hosts need DNS).
    boto3 is imported here, not at the top: only an s3:// archive needs it, never the doors."""
    import boto3
    from botocore.config import Config

    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    config = Config(s3={"addressing_style": "path"}) if endpoint else None
    return boto3.client("s3", endpoint_url=endpoint, region_name=os.environ.get("AWS_REGION") or None, config=config)


def archive_store(url: str) -> ArchiveStore:
    """The store an archive URL names: `file:///absolute/dir` or `s3://bucket[/prefix]`. Anything
    else (another scheme, credentials or a query in the URL, a relative path) is refused."""
    parts = urlsplit(url)
    if parts.username or parts.password or parts.query or parts.fragment:
        raise _bad_url("it may carry no credentials, query or fragment")
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise _bad_url("a file URL names an absolute directory on this machine: file:///dir")
        return FileStore(Path(path))
    if parts.scheme == "s3":
        if not _BUCKET_RE.fullmatch(parts.netloc):
            raise _bad_url("s3://bucket/prefix needs a valid bucket name")
        return S3Store(bucket=parts.netloc, prefix=parts.path.strip("/"))
    raise _bad_url("the archive is file:///dir or s3://bucket/prefix")


def _bad_url(why: str) -> ValidationFailed:
    # The URL is not echoed: a refused one may hold credentials (STYLE.md habit 16).
    return ValidationFailed(f"The archive URL is not usable: {why}.", details={"field": "archiveUrl"})


def archive_url_configured() -> str:
    """OPENWOP_ARCHIVE_URL, or "" when no archive is configured (then nothing waits for an export)."""
    return settings.OPENWOP_ARCHIVE_URL


def export_range(
    *, tenant: Tenant, since: datetime | None, until: datetime, to_url: str | None = None
) -> ArchiveExport:
    """Export the tenant's records with `since <= at < until` (`since` None: from the first record)
    to `to_url` (default: the configured archive) and record the export."""
    url = to_url or archive_url_configured()
    if not url:
        raise ValidationFailed("No archive is configured (OPENWOP_ARCHIVE_URL) and none was named.")
    store = archive_store(url)
    _check_range(since, until)
    chain_pending(tenant=tenant)  # an export holds chained records only: their heads are evidence
    with tempfile.TemporaryDirectory(prefix="openwop-export-") as scratch:
        data = Path(scratch) / "records.jsonl.gz"
        written = _write_records(data, tenant=tenant, since=since, until=until)
        stem = f"tenant={tenant.slug}/records-{_stamp(since)}-{_stamp(until)}-{written.sha256[:16]}"
        file_name = f"{Path(stem).name}.jsonl.gz"
        manifest = _manifest(tenant=tenant, since=since, until=until, written=written, file=file_name)
        manifest_path = Path(scratch) / "manifest.json"
        manifest_path.write_bytes(json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n")
        file_url = store.put(f"{stem}.jsonl.gz", data, content_type="application/gzip")
        manifest_url = store.put(f"{stem}.manifest.json", manifest_path, content_type="application/json")
    export = ArchiveExport.objects.create(
        tenant=tenant,
        since=since,
        until=until,
        file_url=file_url,
        manifest_url=manifest_url,
        count=written.count,
        size=written.size,
        sha256=written.sha256,
        streams=manifest["streams"],
        exported_at=timezone.now(),
    )
    logger.info("exported %d records of tenant %s to %s", written.count, tenant.slug, file_url)
    return export


def exported_through(tenant_pk: int) -> datetime | None:
    """The instant before which every record of the tenant is in some export; None when no export
    starts from the first record.

    Coverage starts with an export from the first record (`since` empty, as `retention apply`
    makes them) and runs on through every export that starts inside it; the first gap ends it.
    It reads the exports' ranges (one row per export), never the records.
    """
    through: datetime | None = None
    ranges = (
        ArchiveExport.objects.for_tenant(tenant_pk)
        .order_by(F("since").asc(nulls_first=True), "until")
        .values_list("since", "until")
    )
    for since, until in ranges:
        if since is not None and (through is None or since > through):
            break
        through = until if through is None else max(through, until)
    return through


def archive_exports_latest(*, tenant_slug: str | None = None, limit: int = 20) -> list[ArchiveExport]:
    """The newest exports (of one tenant when a slug is given), for the auditors' page."""
    exports = ArchiveExport.unscoped_all_tenants.select_related("tenant")  # the auditors see every tenant
    if tenant_slug:
        exports = exports.filter(tenant__slug=tenant_slug)
    return list(exports.order_by("-exported_at", "-pk")[:limit])


def archive_read(url: str) -> Iterator[bytes]:
    """The bytes of an object this module wrote (a `file_url` or `manifest_url`), in chunks. The
    object is opened here, so one that is gone fails now (ArchiveUnavailable), not half-way
    through a response."""
    store = archive_store(url)  # an object's URL parses as a store rooted at the object itself
    if isinstance(store, FileStore):
        try:
            source = store.root.open("rb")
        except OSError as exc:
            raise ArchiveUnavailable(f"Could not read {store.root}: {exc.strerror or exc}") from exc
        return _file_chunks(source)
    assert isinstance(store, S3Store)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        body = _s3_client().get_object(Bucket=store.bucket, Key=store.prefix)["Body"]
    except (BotoCoreError, ClientError) as exc:
        raise ArchiveUnavailable(f"Could not read {url}: {exc}") from exc
    return _s3_chunks(body)


@dataclass(frozen=True, slots=True)
class ArchivedStream:
    """One stream's entry in one manifest read from the archive itself (not from the database)."""

    subject_id: str
    first: int
    last: int
    head: str
    manifest_url: str
    file_url: str  # the data file the manifest describes
    sha256: str  # the data file's, as the manifest says it


def archive_manifest_streams(url: str, *, tenant_slug: str) -> list[ArchivedStream]:
    """Every stream entry of every manifest under `url` for the tenant, oldest export first.
    Raises ArchiveUnavailable when the archive cannot be listed or read, or a manifest is not one
    this module wrote for that tenant."""
    entries: list[ArchivedStream] = []
    for manifest_url in _manifest_urls(archive_store(url), tenant_slug):
        try:
            manifest = json.loads(b"".join(archive_read(manifest_url)))
            if manifest.get("format") != MANIFEST_FORMAT or manifest.get("tenant") != tenant_slug:
                raise ValueError("not a records manifest of this tenant")
            file_name = manifest["file"]
            if not isinstance(file_name, str) or "/" in file_name or not file_name.endswith(".jsonl.gz"):
                raise ValueError("its file is not a data file beside it")
            file_url = f"{manifest_url.rsplit('/', 1)[0]}/{file_name}"
            entries += [
                ArchivedStream(
                    subject_id=str(stream["subjectId"]),
                    first=int(stream["firstSequence"]),
                    last=int(stream["lastSequence"]),
                    head=str(stream["head"]),
                    manifest_url=manifest_url,
                    file_url=file_url,
                    sha256=str(manifest["sha256"]),
                )
                for stream in manifest["streams"]
            ]
        except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            raise ArchiveUnavailable(f"{manifest_url} is not a usable manifest: {exc}") from exc
    return entries


def _manifest_urls(store: ArchiveStore, tenant_slug: str) -> list[str]:
    """The URLs of the tenant's manifests in the archive, in name order (names start with the range)."""
    folder = f"tenant={tenant_slug}"
    if isinstance(store, FileStore):
        if not store.root.is_dir():  # a mistyped archive must not read as an empty one
            raise ArchiveUnavailable(f"Could not list {store.root}: no such directory")
        try:
            return [path.as_uri() for path in sorted((store.root / folder).glob("*.manifest.json"))]
        except OSError as exc:
            raise ArchiveUnavailable(f"Could not list {store.root / folder}: {exc.strerror or exc}") from exc
    assert isinstance(store, S3Store)
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = f"{store.prefix}/{folder}/" if store.prefix else f"{folder}/"
    try:
        pages = _s3_client().get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix)
        keys = [obj["Key"] for page in pages for obj in page.get("Contents", [])]
    except (BotoCoreError, ClientError) as exc:
        raise ArchiveUnavailable(f"Could not list s3://{store.bucket}/{prefix}: {exc}") from exc
    return [f"s3://{store.bucket}/{key}" for key in sorted(keys) if key.endswith(".manifest.json")]


def archive_record_links(
    entry: ArchivedStream, *, wanted: set[tuple[str, int]]
) -> dict[tuple[str, int], tuple[str, str]]:
    """{(subject id, sequence): (prevDigest, digest)} of the archived records among `wanted`, read
    once from the data file `entry` names (streamed; its SHA-256 must be the manifest's, or nothing
    it holds is evidence: ArchiveUnavailable)."""
    found: dict[tuple[str, int], tuple[str, str]] = {}
    sha = hashlib.sha256()
    reader = _HashingReader(archive_read(entry.file_url), sha)
    with gzip.GzipFile(fileobj=cast(IO[bytes], reader), mode="rb") as lines:
        for line in lines:
            record = json.loads(line)
            key = (record.get("subjectId"), record.get("sequence"))
            if key in wanted:
                found[key] = (str(record.get("prevDigest", "")), str(record.get("digest", "")))
    reader.drain()
    if sha.hexdigest() != entry.sha256:
        raise ArchiveUnavailable(f"{entry.file_url} does not have the SHA-256 its manifest says")
    return found


class _HashingReader:
    """A file-like reader over chunks that hashes every byte it hands out."""

    def __init__(self, chunks: Iterator[bytes], sha: Any) -> None:
        self._chunks, self._sha, self._buffer = chunks, sha, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._buffer += chunk
        out, self._buffer = (self._buffer, b"") if size < 0 else (self._buffer[:size], self._buffer[size:])
        self._sha.update(out)
        return out

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _file_chunks(source: IO[bytes]) -> Iterator[bytes]:
    with source:
        while chunk := source.read(_CHUNK):
            yield chunk


def _s3_chunks(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(_CHUNK)
    finally:
        body.close()


def _check_range(since: datetime | None, until: datetime) -> None:
    if timezone.is_naive(until) or (since is not None and timezone.is_naive(since)):
        raise ValidationFailed("An export's range is two instants with a UTC offset.")
    if since is not None and since >= until:
        raise ValidationFailed("An export's 'since' must be before its 'until'.")
    if until > timezone.now():
        # Records are still being written before a future instant: the export could not hold them.
        raise ValidationFailed("An export's 'until' must not be in the future.")


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stamp(at: datetime | None) -> str:
    return "start" if at is None else at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


@dataclass(frozen=True)
class _Written:
    count: int
    size: int
    sha256: str
    streams: list[dict[str, Any]]  # per stream, its manifest entry


def _write_records(path: Path, *, tenant: Tenant, since: datetime | None, until: datetime) -> _Written:
    streams: dict[str, dict[str, Any]] = {}
    count = 0
    # No file name and time 0 in the gzip header: the same records make the same bytes.
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as out:
        for line, subject_id, sequence, digest in _record_lines(tenant=tenant, since=since, until=until):
            out.write(line)
            count += 1
            stream = streams.setdefault(subject_id, {"subjectId": subject_id, "count": 0, "firstSequence": sequence})
            stream.update(count=stream["count"] + 1, lastSequence=sequence, head=digest)
    with path.open("rb") as written:
        sha256 = hashlib.file_digest(written, "sha256").hexdigest()
    return _Written(count=count, size=path.stat().st_size, sha256=sha256, streams=list(streams.values()))


def _record_lines(*, tenant: Tenant, since: datetime | None, until: datetime) -> Iterator[tuple[bytes, str, int, str]]:
    """(line, subject id, sequence, digest) for each record in (subject, sequence) order."""
    after: tuple[str, int] = ("", 0)
    while True:
        with connection.cursor() as cursor:
            cursor.execute(_BATCH_SQL, [tenant.pk, until, since or _BEGINNING, *after, BATCH])
            rows = cursor.fetchall()
        for subject_id, sequence, subject, event_id, type_, durable, at, payload, prev_digest, digest in rows:
            if not digest:
                raise ValidationFailed(
                    f"Sequence {sequence} of a stream in the range is not chained yet (the chainer is behind:"
                    " manage.py audit_chain); nothing was exported.",
                    details={"field": "until"},
                )
            content = canonical_content(
                tenant=tenant.slug,
                subject_id=subject_id,
                subject=json.loads(subject),
                event_id=event_id,
                type=type_,
                durable=durable,
                at=at,
                payload=json.loads(payload),
            )
            # The canonical content with the chain's three keys spliced in before its closing brace.
            link = f',"sequence":{sequence},"prevDigest":"{prev_digest}","digest":"{digest}"}}\n'
            yield content[:-1] + link.encode(), subject_id, sequence, digest
        if len(rows) < BATCH:
            return
        after = (rows[-1][0], rows[-1][1])


def _manifest(
    *, tenant: Tenant, since: datetime | None, until: datetime, written: _Written, file: str
) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "tenant": tenant.slug,
        "since": None if since is None else _iso(since),
        "until": _iso(until),
        "count": written.count,
        "file": file,
        "bytes": written.size,
        "sha256": written.sha256,
        "streams": written.streams,
    }

"""The configuration reference (docs/reference/configuration.md), generated from the settings.

    python scripts/settings_reference.py           # write the page
    python scripts/settings_reference.py --check   # exit 1 when the page is not what this writes

Every environment variable `openwop_host/settings.py` reads (`env.str/int/bool/float/list/db(...)`,
`environ.Env().str(...)`, `os.environ.get/[...]`) is found by parsing the file (ast, never
importing it), with its type, its default as written, the setting it lands in, the comment above
it (or on its line) and the modules that read that setting (`settings.NAME` under apps/,
openwop_host/ and scripts/). NOTES below add a meaning where the settings' comment says less than
an operator needs. The variables the code reads outside the settings (os.environ in apps/ and
openwop_host/) get a table of their own. tests/test_settings_reference.py fails when a variable is
missing from the page or the page is stale.
"""

# ruff: noqa: E501 - NOTES holds one operator-facing sentence per line, as the page shows it

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "openwop_host" / "settings.py"
PAGE = ROOT / "docs" / "reference" / "configuration.md"
READER_DIRS = ("apps", "openwop_host", "scripts")

ENV_METHODS = {"str", "int", "bool", "float", "list", "tuple", "dict", "json", "url", "db", "db_url", "path"}

# Meanings written for operators (most of them the README's configuration table, moved here); a
# variable without one shows the comment settings.py gives it.
NOTES: dict[str, str] = {
    "DATABASE_URL": "e.g. `postgres://user:pass@host:5432/openwop` (psycopg 3); PostgreSQL only. Unset: an embedded PostgreSQL under `var/pg`",
    "REDIS_URL": "channels-redis layer and cache (rate counters); unset: in-memory channel layer and per-process counters",
    "CELERY_BROKER_URL": "Celery broker; default `REDIS_URL`, else `filesystem://` under `var/`",
    "DJANGO_SECRET_KEY": "required unless `DJANGO_DEBUG=1` (`make setup` generates one into `.env`): the host refuses to start without it in production",
    "DJANGO_DEBUG": "development mode, for this machine only: loopback callers only (others get 403), and `make run` refuses a non-loopback `HOST` (`make` and the development `.env` set `1`)",
    "DJANGO_ALLOWED_HOSTS": "comma-separated; with `DJANGO_DEBUG=1` loopback names only (settings refuse others)",
    "OPENWOP_PUBLIC_URL": "origin written into cards and facets (`make run`: `http://$HOST:$PORT`)",
    "OPENWOP_GRPC_ENABLED": "the deployment runs `manage.py grpc_serve`: the card (and every per-agent card, with its `tenant`) lists a `GRPC` interface after JSON-RPC and HTTP+JSON. Off, nothing advertises gRPC (`make run` and docker/ set it)",
    "OPENWOP_GRPC_URL": "the `GRPC` interface's `url` on the card (`host:port`, as gRPC clients dial it); default the host of `OPENWOP_PUBLIC_URL` and `OPENWOP_GRPC_PORT`",
    "OPENWOP_GRPC_BIND": "where `grpc_serve` listens (`--bind` overrides it)",
    "OPENWOP_GRPC_PORT": "the port `grpc_serve` listens on (`--port` overrides it; `make run` sets it from `GRPC_PORT`)",
    "OPENWOP_GRPC_TLS_CERT": "PEM certificate chain file: `grpc_serve` serves TLS (with `OPENWOP_GRPC_TLS_KEY`; both or neither). Unset: plaintext",
    "OPENWOP_GRPC_TLS_KEY": "PEM key file of `OPENWOP_GRPC_TLS_CERT`",
    "OPENWOP_CARD_KEY_GRACE_SECONDS": "how long a retired agent-card signing key stays in `/.well-known/jwks.json`, so cards signed before a rotation still verify (7 days)",
    "OPENWOP_OAUTH_METADATA_MAX_AGE_SECONDS": "a trusted issuer's metadata and JWKS are re-fetched when older than this",
    "OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS": "an unknown `kid` re-fetches an issuer's JWKS at most this often (per issuer and process)",
    "OPENWOP_OAUTH_LEEWAY_SECONDS": "clock skew tolerated on `exp`, `nbf`, `iat`",
    "OPENWOP_EGRESS_ALLOW_CIDRS": "operator allowlist relaxing the egress guard for these ranges (comma list; declared in discovery)",
    "OPENWOP_EGRESS_ALLOW_HTTP_CIDRS": "plain `http` only to addresses inside these ranges (checked at registration and at connect); every other egress rule unchanged, the address must still be allowed; declared in discovery (`allowHttpCidrs`)",
    "OPENWOP_EGRESS_CA_BUNDLE": "extra CA certificates for outbound TLS (private peers and receivers)",
    "OPENWOP_EGRESS_HOSTS_FILE": "names the egress guard takes from the hosts file (exact match; Docker `extra_hosts`, Kubernetes `hostAliases`), every address still checked; other names resolve absolute, never through a search list",
    "OPENWOP_CONFORMANCE_SEAMS": "test seams for the conformance suite",
    "OPENWOP_CONSOLE_LOGIN_FAILURES": "sign-in throttle of the console and the admin (staff): failures per username + address within the window (`0`: off)",
    "OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS": "the window of `OPENWOP_CONSOLE_LOGIN_FAILURES`",
    "OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES": "per username from every address: past that many failures one password check per delay (doubling up to the window; `0`: off)",
    "OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS": "the first delay of `OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES`",
    "OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS": "an address the username signed in from within these days is not delayed",
    "OPENWOP_STREAM_RECHECK_SECONDS": "an open stream (`/runs/{id}/events`, `/host/events`, A2A SendStreamingMessage / SubscribeToTask on every binding, the console's run stream) re-checks its credential this often, through the same cache as requests, and ends once the key is revoked, the token expired or the console user signed out or removed",
    "OPENWOP_INLINE_MAX_NODES": "instant nodes a waiting door (blocking A2A SendMessage, MCP `tools/call`) runs in the request process before handing the run to Celery; `0`: every run goes through the queue",
    "OPENWOP_A2A_CANCEL_WAIT_SECONDS": "A2A `CancelTask` of a running task waits up to this long for its worker to commit the cancel and answers `TASK_STATE_CANCELED`; past it, the task as it is (`TASK_STATE_WORKING`: the cancel is recorded and a worker finishes it)",
    "OPENWOP_METRICS_ALLOW_CIDRS": "networks (comma list) allowed to read `GET /metrics`; it replaces loopback. Everyone else gets the 404 of an unknown path",
    "OPENWOP_LOG_FORMAT": "`json`: one JSON object per log line, secrets redacted; `text`: the bare message",
    "OPENWOP_METRICS_TENANT_LABELS": "also count requests, runs and negotiations per tenant (`openwop_tenant_*`, labelled with the tenant's slug)",
    "PROMETHEUS_MULTIPROC_DIR": "a directory shared by every web process and Celery worker of a host (emptied before they start): `/metrics` then sums them all. Unset: each process reports its own",
    "DATABASE_POOL_MAX_SIZE": "a psycopg connection pool per process of this size (`0`: none); on in production, about 8 per web process and N per worker of `--concurrency N`",
    "DATABASE_POOL_TIMEOUT": "seconds a request waits for a pooled connection",
    "OPENWOP_ASYNC_POOL_MAX_SIZE": "the doors' own async pool per web process (protocol reads, group-committed `negotiation.decided` records)",
    "OPENWOP_VAR_DIR": "where the host keeps its local state (embedded PostgreSQL, demo key, broker folder, logs), mode 0700",
    "OPENWOP_ENV_FILE": "the development `.env` file settings read when it exists (real environment variables win)",
    "OPENWOP_FACETS_REFRESH_SECONDS": "the facet refresh job's period (beat)",
    "OPENWOP_CELERY_QUEUE": "the runs' Celery queue (the push queue is named after it)",
    "DJANGO_SECURE_SSL_REDIRECT": "with DEBUG off, redirect http to https (off behind a proxy that redirects, and for probes)",
    "DJANGO_SECURE_HSTS_SECONDS": "with DEBUG off, the `Strict-Transport-Security` max-age (a year)",
    "DJANGO_SECURE_HSTS_PRELOAD": "with DEBUG off, HSTS `preload` (a commitment for the whole domain: off for a host that does not own it)",
    "DJANGO_LOG_LEVEL": "the root logger's level",
    "CELERY_TASK_ALWAYS_EAGER": "run Celery tasks in the calling process (tests and experiments only: nothing is queued)",
    "PYTEST_XDIST_TESTRUNUID": "set by pytest-xdist, never by hand: the embedded PostgreSQL's test database is named after the test run",
    "OPENWOP_PUSH_SWEEP_SECONDS": "how often the push sweeper re-sends deliveries whose send was lost",
    "OPENWOP_PUSH_SWEEP_GRACE_SECONDS": "a delivery pending this long without an attempt is the sweeper's to send again",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "OTLP/HTTP collector for OpenTelemetry traces, e.g. `http://collector:4318`; unset: no tracing (nothing imported)",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "the traces endpoint itself, instead of `OTEL_EXPORTER_OTLP_ENDPOINT`",
    "OTEL_SERVICE_NAME": "the service name spans carry",
    "OPENWOP_CONSOLE_PASSWORD": "`console_member_create` takes the password from here instead of a prompt (never the command line)",
    "AWS_ENDPOINT_URL": "an S3-compatible server for an `s3://` archive (MinIO, Ceph, R2: path-style addressing)",
    "AWS_REGION": "the S3 region of an `s3://` archive",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "trust `X-Forwarded-Proto: https` from the proxy in front; never when clients reach the server directly",
}

# What sets a Django, Celery or Channels setting's behaviour, for settings no module of ours reads.
FRAMEWORK_PREFIXES = {"CELERY_": "Celery", "SECURE_": "Django", "SESSION_": "Django", "CSRF_": "Django"}
FRAMEWORK_SETTINGS = {
    "DEBUG": "Django",
    "SECRET_KEY": "Django",
    "SECRET_KEY_FALLBACKS": "Django",
    "ALLOWED_HOSTS": "Django",
    "DATABASES": "Django",
    "CACHES": "Django",
    "CHANNEL_LAYERS": "Channels",
    "LOGGING": "Django",
}


@dataclass
class Variable:
    name: str
    kind: str
    default: str
    line: int
    comment: str
    settings: list[str] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)


def _comment_block(lines: list[str], index: int) -> str:
    """The comment lines ending at `index` (0-based), joined."""
    block: list[str] = []
    while index >= 0 and lines[index].strip().startswith("#"):
        block.insert(0, lines[index].strip().lstrip("#").strip())
        index -= 1
    return " ".join(block)


def _comment_of(lines: list[str], lineno: int) -> str:
    """The comment directly above line `lineno` (1-based), else one on that line, else the comment
    heading the group of lines it belongs to (the nearest comment above with no blank line between)."""
    above = _comment_block(lines, lineno - 2)
    if above:
        return above
    line = lines[lineno - 1]
    if "  # " in line:
        return line.split("  # ", 1)[1].strip()
    index = lineno - 2
    while index >= 0 and lines[index].strip() and not lines[index].strip().startswith("#"):
        index -= 1
    return _comment_block(lines, index) if index >= 0 else ""


_SAFE = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.Pow)


def _default_text(node: ast.expr | None, *, required: bool) -> str:
    if node is None:
        return "(required)" if required else "unset"
    if all(isinstance(n, (*_SAFE, ast.operator, ast.unaryop)) for n in ast.walk(node)):
        value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})  # noqa: S307 - constants only
        if isinstance(value, bool):
            return "`1` (on)" if value else "`0` (off)"
        if value == "":
            return "empty"
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return f"`{value}`"
    if isinstance(node, ast.List) and not node.elts:
        return "empty"
    return f"`{ast.unparse(node)}`"


def _env_call(node: ast.Call) -> tuple[str, str, ast.expr | None] | None:
    """(variable, type, default) when `node` reads one environment variable."""
    func = node.func
    first = node.args[0] if node.args else None
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    default = next((k.value for k in node.keywords if k.arg == "default"), None)
    if isinstance(func, ast.Attribute) and func.attr in ENV_METHODS and func.attr != "get":
        owner = func.value
        is_env = (isinstance(owner, ast.Name) and owner.id == "env") or (
            isinstance(owner, ast.Call) and isinstance(owner.func, ast.Attribute) and owner.func.attr == "Env"
        )
        if is_env:
            return first.value, func.attr, default
    # os.environ.get("X", default) / os.getenv("X")
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("get", "getenv")
        and ast.unparse(func.value) in ("os.environ", "os")
    ):
        return first.value, "str", node.args[1] if len(node.args) > 1 else default
    return None


def _subscript_reads(tree: ast.AST) -> list[tuple[str, int]]:
    return [
        (node.slice.value, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and ast.unparse(node.value) == "os.environ"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ]


def _targets(statement: ast.stmt) -> list[str]:
    """The module-level names a statement assigns (a subscript's root name included)."""
    names: list[str] = []
    for node in ast.walk(statement):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            while isinstance(target, ast.Subscript | ast.Attribute | ast.Call):
                target = target.func if isinstance(target, ast.Call) else target.value
            if isinstance(target, ast.Name) and target.id not in names:
                names.append(target.id)
    return names


def _innermost(statement: ast.stmt, line: int) -> ast.stmt:
    """The deepest statement inside `statement` that holds `line`; for a call in an `if` test, the
    statement the test guards."""
    for node in ast.walk(statement):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or (node is statement and not isinstance(node, ast.If)):
            continue
        if isinstance(node, ast.If) and node.test.lineno <= line <= (node.test.end_lineno or line):
            return node.body[0]
        for child in [*body, *getattr(node, "orelse", [])]:
            if isinstance(child, ast.stmt) and child.lineno <= line <= (child.end_lineno or child.lineno):
                return _innermost(child, line) if child is not statement else child
    return statement


def _setting_of(module: ast.Module, index: int, line: int) -> list[str]:
    """The public settings the read on `line` of a top-level statement feeds: its own target, or
    (for a private helper name) the first later statement that uses it."""
    statement = _innermost(module.body[index], line)
    public = [n for n in _targets(statement) if not n.startswith("_")]
    if public:
        return public[:1]
    private = set(_targets(statement)) or set(_targets(module.body[index]))
    for later in module.body[index + 1 :]:
        used = {n.id for n in ast.walk(later) if isinstance(n, ast.Name)}
        if used & private:
            found = [n for n in _targets(later) if not n.startswith("_")]
            if found:
                return found[:1]
    return []


def _readers(settings: list[str], sources: dict[str, str], module: ast.Module) -> list[str]:
    """Who reads these settings: the framework, the modules naming them (`settings.NAME`, or the
    name quoted for a helper such as `push_setting("NAME")`), else the settings derived from them."""
    found: list[str] = []
    for name in settings:
        framework = FRAMEWORK_SETTINGS.get(name) or next(
            (v for k, v in FRAMEWORK_PREFIXES.items() if name.startswith(k)), None
        )
        if framework and framework not in found:
            found.append(framework)
        attribute = re.compile(rf"settings\.{name}\b")
        quoted = re.compile(rf"[\"']{name}[\"']")
        for path, text in sources.items():
            # A quoted name is a setting only in the host's code; scripts/ pass variables on by name.
            reads = attribute.search(text) or (not path.startswith("scripts/") and quoted.search(text))
            if reads and f"`{path}`" not in found:
                found.append(f"`{path}`")
    if found:
        return found
    derived: list[str] = []
    for statement in module.body:
        loads = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if loads & set(settings):
            derived += [f"`{t}`" for t in _targets(statement) if not t.startswith("_") and t not in settings]
    return ["settings " + ", ".join(dict.fromkeys(derived))] if derived else []


def _sources(root: Path) -> dict[str, str]:
    sources: dict[str, str] = {}
    for folder in READER_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if (
                relative not in ("openwop_host/settings.py", "scripts/settings_reference.py")
                and "/migrations/" not in relative
            ):
                sources[relative] = path.read_text()
    return sources


def settings_variables(source: str, sources: dict[str, str] | None = None) -> list[Variable]:
    """Every environment variable the settings source reads, in the order it reads them."""
    module = ast.parse(source)
    lines = source.splitlines()
    sources = sources if sources is not None else {}
    found: dict[str, Variable] = {}
    for index, statement in enumerate(module.body):
        calls = sorted(
            (n for n in ast.walk(statement) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
        )
        reads: list[tuple[str, str, ast.expr | None, int, bool]] = []
        for call in calls:
            read = _env_call(call)
            if read is not None:
                reads.append((*read, call.lineno, isinstance(call.func, ast.Attribute) and call.func.attr != "get"))
        reads += [(name, "str", None, line, False) for name, line in _subscript_reads(statement)]
        for name, kind, default, line, required in reads:
            if name not in found:
                found[name] = Variable(
                    name=name,
                    kind=kind,
                    default=_default_text(default, required=required),
                    line=line,
                    comment=_comment_of(lines, line),
                )
            for setting in _setting_of(module, index, line):
                if setting not in found[name].settings:
                    found[name].settings.append(setting)
    for variable in found.values():
        variable.readers = _readers(variable.settings, sources, module)
    return list(found.values())


def outside_reads(root: Path) -> dict[str, list[str]]:
    """Environment variables read by os.environ outside the settings: variable -> modules."""
    reads: dict[str, list[str]] = {}
    for folder in ("apps", "openwop_host"):
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative == "openwop_host/settings.py":
                continue
            tree = ast.parse(path.read_text())
            names = [r[0] for n in ast.walk(tree) if isinstance(n, ast.Call) and (r := _env_call(n)) is not None]
            names += [name for name, _ in _subscript_reads(tree)]
            for name in names:
                if name != "PATH" and relative not in reads.setdefault(name, []):
                    reads[name].append(relative)
    return dict(sorted(reads.items()))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference_markdown(root: Path = ROOT) -> str:
    source = (root / "openwop_host" / "settings.py").read_text()
    variables = settings_variables(source, _sources(root))
    out = [
        "# Configuration reference",
        "",
        "<!-- generated by scripts/settings_reference.py from openwop_host/settings.py: do not edit by hand;",
        "     `make docs-reference` writes it, tests/test_settings_reference.py fails when it is stale -->",
        "",
        "Everything is configured through the environment (django-environ). A development checkout also",
        "reads `.env` at its root when the file exists (`make setup` writes it; `OPENWOP_ENV_FILE` names",
        "another file); a variable set in the environment wins over the file. Production has no `.env`.",
        "",
        "`make run` takes `HOST` (127.0.0.1), `PORT` (8000) and `GRPC_PORT` (50051) and exports",
        "`OPENWOP_PUBLIC_URL=http://$HOST:$PORT` (unless set), `OPENWOP_GRPC_ENABLED=1` and",
        "`OPENWOP_GRPC_PORT`; every variable given to `make cluster` reaches every process it starts.",
        "",
        f"## Read by the settings ({len(variables)} variables)",
        "",
        "In the order `openwop_host/settings.py` reads them. *Setting* is where the value lands;",
        "*read by* the modules that use that setting.",
        "",
        "| Variable | Type | Default | What it does | Setting | Read by |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in variables:
        meaning = NOTES.get(v.name) or v.comment or "(no comment in settings.py)"
        readers = ", ".join(v.readers) or "the settings alone"
        setting = ", ".join(f"`{s}`" for s in v.settings)
        out.append(f"| `{v.name}` | {v.kind} | {_cell(v.default)} | {_cell(meaning)} | {setting} | {_cell(readers)} |")
    outside = outside_reads(root)
    out += [
        "",
        "## Read outside the settings",
        "",
        "Variables a module reads from the environment itself (a command's input, a library's own",
        "configuration).",
        "",
        "| Variable | What it does | Read by |",
        "| --- | --- | --- |",
    ]
    out += [
        f"| `{name}` | {_cell(NOTES.get(name, ''))} | {', '.join(f'`{m}`' for m in modules)} |"
        for name, modules in outside.items()
    ]
    out += [
        "",
        "The OpenTelemetry SDK reads the other `OTEL_*` variables (`OTEL_EXPORTER_OTLP_HEADERS`,",
        "`OTEL_BSP_SCHEDULE_DELAY`, ...) and boto3 the usual `AWS_*` ones (`AWS_ACCESS_KEY_ID`,",
        "`AWS_SECRET_ACCESS_KEY`, or an instance role) for an `s3://` archive.",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args()
    text = reference_markdown()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run `make docs-reference`", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

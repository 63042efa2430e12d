"""`retention show [--tenant <slug>]`, `retention set --tenant <slug> [--runs-days N|host]
[--records-days N|host] [--legal-hold on|off]`, `retention apply [--now <ISO 8601 instant>]`
(issue 36).

`show` prints the host's windows and every tenant's in force (or one tenant's). `set` changes a
tenant's policy through the admin's own audited service (`RetentionChange`, actor `cli:<os user>`,
`as <text>` beside it with `--actor <text>`); `host` puts a window back to the host's. The host's
own windows are settings (OPENWOP_RETENTION_RUNS_DAYS, OPENWOP_RETENTION_RECORDS_DAYS), so `set`
without `--tenant` is refused. `apply` runs one pass of the beat job as if it were `--now`
(default: now; never later than this host's clock) and prints what it did; a second pass at the
same instant finds nothing to do. Every refusal prints why and exits with status 2, having changed nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.core.command_args import ACTOR_HELP, REFUSED_STATUS, actor_option, instant_option
from apps.core.errors import ValidationFailed
from apps.retention.services import (
    UNCHANGED,
    Retention,
    RetentionRefused,
    host_retention,
    retention_apply,
    retention_of,
    retention_set,
    retentions_by_tenant,
)
from apps.tenants.models import Tenant


def describe(name: str, retention: Retention) -> str:
    if retention.legal_hold:
        return f"{name}: legal hold (nothing expires)"
    return f"{name}: runs {retention.runs_days} days after they end, records {retention.records_days} days"


def _days(option: str, value: str | None) -> Any:
    if value is None:
        return UNCHANGED
    if value == "host":
        return None
    try:
        return int(value)
    except ValueError:
        message = f"{option} is a number of days or `host`, not {value!r}."
        raise CommandError(message, returncode=REFUSED_STATUS) from None


class Command(BaseCommand):
    help = "Show or set how long runs and records are kept (per tenant, audited), or apply it now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["show", "set", "apply"])
        parser.add_argument("--tenant", help="the tenant's slug")
        parser.add_argument("--runs-days", help="days a run is kept once it ended; `host`: the host's")
        parser.add_argument("--records-days", help="days a record is kept; `host`: the host's")
        parser.add_argument("--legal-hold", choices=["on", "off"], help="on: nothing of the tenant expires")
        parser.add_argument("--now", help="apply: as if it were this instant (ISO 8601; UTC default)")
        parser.add_argument("--actor", help=f"set: {ACTOR_HELP}")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"] is not None:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"No tenant {options['tenant']!r}.", returncode=REFUSED_STATUS)
        action = options["action"]
        if action != "set" and any(options[o] is not None for o in ("runs_days", "records_days", "legal_hold")):
            message = f"{action} changes no policy: --runs-days, --records-days and --legal-hold are for set."
            raise CommandError(message, returncode=REFUSED_STATUS)
        if action == "show":
            self._show(tenant)
        elif action == "set":
            self._set(tenant, options)
        else:
            self._apply(tenant, options["now"])

    def _show(self, tenant: Tenant | None) -> None:
        if tenant is not None:
            self.stdout.write(describe(f"tenant {tenant.slug}", retention_of(tenant)))
            return
        self.stdout.write(describe("host", host_retention()))
        slugs = dict(Tenant.objects.values_list("pk", "slug"))
        for pk, retention in sorted(retentions_by_tenant().items(), key=lambda item: slugs[item[0]]):
            self.stdout.write(describe(f"tenant {slugs[pk]}", retention))

    def _set(self, tenant: Tenant | None, options: dict[str, Any]) -> None:
        if tenant is None:
            raise CommandError(
                "set needs --tenant: the host's windows are settings "
                "(OPENWOP_RETENTION_RUNS_DAYS, OPENWOP_RETENTION_RECORDS_DAYS).",
                returncode=REFUSED_STATUS,
            )
        hold = options["legal_hold"]
        try:
            retention_set(
                tenant=tenant,
                actor=actor_option(options["actor"]),
                runs_days=_days("--runs-days", options["runs_days"]),
                records_days=_days("--records-days", options["records_days"]),
                legal_hold=UNCHANGED if hold is None else hold == "on",
            )
        except ValidationFailed as exc:
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from exc
        self.stdout.write(describe(f"tenant {tenant.slug}", retention_of(tenant)))

    def _apply(self, tenant: Tenant | None, now: str | None) -> None:
        if tenant is not None:
            raise CommandError("apply takes no --tenant: one pass covers every tenant.", returncode=REFUSED_STATUS)
        try:
            report = retention_apply(instant_option("--now", now) if now is not None else timezone.now())
        except RetentionRefused as exc:
            raise CommandError(f"Refused: {exc}", returncode=REFUSED_STATUS) from exc
        for line in report.lines():
            self.stdout.write(line)

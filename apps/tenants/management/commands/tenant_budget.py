"""`tenant_budget show|set|clear --tenant <slug>`: a tenant's budgets, for an operator's shell (what
the Tenant admin page's budget section does; docs/operators/tenant-budgets.md).

`show` prints one budget a line: name, the limit in force (0 = unlimited), and where it comes from
(`tenant` for the tenant's own override, else the host setting). `set` overrides the budgets named
by its options (`--runs-queued 50`; `--runs-queued default` gives one back to the host default);
`clear` gives every budget back to the host defaults. A change holds on the next request in every
process. Exit 0 done, 2 refused (no such tenant, a value that is not a number of 0 or more).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.command_args import ACTOR_HELP, REFUSED_STATUS, actor_option
from apps.core.errors import ValidationFailed
from apps.tenants.budgets import BUDGET_NAMES, DEFAULT_SETTINGS, budget_default, tenant_budget
from apps.tenants.models import Tenant, TenantBudget
from apps.tenants.services import tenant_budget_clear, tenant_budget_set

logger = logging.getLogger(__name__)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


class Command(BaseCommand):
    help = "Show, set or clear a tenant's budgets (runs, requests, streams, API keys)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        show = actions.add_parser("show", help="the budgets in force and where each comes from")
        show.add_argument("--tenant", required=True, help="tenant slug")
        setting = actions.add_parser("set", help="override some budgets (N, 0 = unlimited, or 'default')")
        setting.add_argument("--tenant", required=True, help="tenant slug")
        for name in BUDGET_NAMES:
            setting.add_argument(_option(name), dest=name, metavar="N", help=f"{name} (host: {DEFAULT_SETTINGS[name]})")
        setting.add_argument("--actor", help=ACTOR_HELP)
        clear = actions.add_parser("clear", help="every budget back to the host default")
        clear.add_argument("--tenant", required=True, help="tenant slug")
        clear.add_argument("--actor", help=ACTOR_HELP)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        values: dict[str, int | None] = {}
        if action == "set":  # the arguments are checked before the database is asked anything
            values = {name: _value(name, options[name]) for name in BUDGET_NAMES if options.get(name) is not None}
            if not values:
                names = ", ".join(_option(name) for name in BUDGET_NAMES)
                raise CommandError(f"set needs at least one of {names}", returncode=REFUSED_STATUS)
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}", returncode=REFUSED_STATUS)
        if action == "set":
            actor = actor_option(options.get("actor"))
            try:
                tenant_budget_set(tenant=tenant, values=values)
            except ValidationFailed as exc:
                raise CommandError(exc.message, returncode=REFUSED_STATUS) from None
            logger.info("tenant %s budgets set by %s: %s", tenant.slug, actor, sorted(values))
        elif action == "clear":
            actor = actor_option(options.get("actor"))
            tenant_budget_clear(tenant=tenant)
            logger.info("tenant %s budgets cleared by %s", tenant.slug, actor)
        self._show(tenant)

    def _show(self, tenant: Tenant) -> None:
        row = TenantBudget.objects.filter(tenant=tenant).values(*BUDGET_NAMES).first() or {}
        budgets = tenant_budget(tenant.pk)
        for name in BUDGET_NAMES:
            own = row.get(name) is not None
            source = "tenant" if own else f"{DEFAULT_SETTINGS[name]} (host default {budget_default(name)})"
            self.stdout.write(f"{name}\t{getattr(budgets, name)}\t{source}")


def _value(name: str, raw: str) -> int | None:
    if raw.strip().lower() == "default":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise CommandError(
            f"{_option(name)} {raw!r}: a number of 0 (unlimited) or more, or 'default'", returncode=REFUSED_STATUS
        )
    return value

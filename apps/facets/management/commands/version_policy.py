"""`version_policy set|clear --tenant <slug> [--agent <agentId>] --protocol a2a|mcp [--minimum v]
[--at <ISO datetime>]`: a tenant's or an agent's floor from the command line (issue 24).

The admin's own service (`facets.services.version_policy_set` / `version_policy_clear`): the same
validation (never looser than the host floor, an agent's never looser than its tenant's), the same
audited `VersionPolicyChange` row (actor `cli:<os user>`, `as <text>` beside it with `--actor`). `set
--minimum v` sets the floor in force now; with `--at` it schedules `v` for that instant instead (the
beat job applies it) and keeps the floor in force. `clear` removes the policy, schedule included.
A refusal prints the rule it breaks and exits with status 2, changing nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.agents.models import Agent
from apps.core.command_args import ACTOR_HELP, REFUSED_STATUS, actor_option, instant_option
from apps.core.errors import ValidationFailed
from apps.facets.management.commands.facet_set import refusal
from apps.facets.models import VersionPolicy
from apps.facets.services import version_policy_clear, version_policy_get, version_policy_set
from apps.tenants.models import Tenant


def describe(policy: VersionPolicy | None, *, tenant: str, agent: str | None, protocol: str) -> str:
    where = f"{protocol} floor of tenant {tenant}" + (f", agent {agent}" if agent else "")
    if policy is None:
        return f"{where}: none of its own (the host floor applies)"
    line = f"{where}: minimum {policy.minimum_version or 'none of its own'}"
    if policy.scheduled_at is not None:
        line += f"; minimum {policy.scheduled_minimum_version} from {policy.scheduled_at.isoformat()}"
    return line


class Command(BaseCommand):
    help = "Set or clear a tenant's (or one agent's) minimum version for a2a or mcp (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["set", "clear"])
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--agent", help="an agentId of the tenant: the agent's own floor")
        parser.add_argument("--protocol", required=True, choices=["a2a", "mcp"])
        parser.add_argument("--minimum", help="the floor: the oldest version the tenant (agent) still accepts")
        parser.add_argument("--at", help="make --minimum a scheduled floor from this instant (ISO 8601; UTC default)")
        parser.add_argument("--actor", help=ACTOR_HELP)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}.", returncode=REFUSED_STATUS)
        agent: Agent | None = None
        if options["agent"] is not None:
            agent = Agent.objects.for_tenant(tenant).filter(agent_id=options["agent"]).first()
            if agent is None:
                raise CommandError(f"No agent {options['agent']!r} in tenant {tenant.slug}.", returncode=REFUSED_STATUS)
        protocol = options["protocol"]
        actor = actor_option(options["actor"])
        at = instant_option("--at", options["at"]) if options["at"] is not None else None
        current = version_policy_get(tenant=tenant, agent=agent, protocol=protocol)
        try:
            if options["action"] == "clear":
                if options["minimum"] is not None:
                    raise CommandError("clear takes no --minimum.", returncode=REFUSED_STATUS)
                if options["at"] is not None:
                    raise CommandError("clear takes no --at: it removes the whole policy.", returncode=REFUSED_STATUS)
                version_policy_clear(tenant=tenant, agent=agent, protocol=protocol, actor=actor)
                policy = None
            else:
                if options["minimum"] is None:
                    raise CommandError("set needs --minimum.", returncode=REFUSED_STATUS)
                was = current or VersionPolicy()  # a new policy: no floor, nothing scheduled
                minimum, scheduled, scheduled_at = was.minimum_version, was.scheduled_minimum_version, was.scheduled_at
                if at is None:
                    minimum = options["minimum"]
                else:
                    scheduled, scheduled_at = options["minimum"], at
                policy = version_policy_set(
                    tenant=tenant,
                    agent=agent,
                    protocol=protocol,
                    minimum=minimum,
                    scheduled_minimum=scheduled,
                    scheduled_at=scheduled_at,
                    actor=actor,
                )
        except ValidationFailed as exc:
            raise refusal(exc) from exc
        self.stdout.write(describe(policy, tenant=tenant.slug, agent=options["agent"], protocol=protocol))

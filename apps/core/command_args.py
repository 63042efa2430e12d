"""What the management commands read from their options, refused alike (exit status 2)."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import CommandError

from apps.core.actors import ActorClaimInvalid, cli_actor

REFUSED_STATUS = 2  # a refusal: the command changed nothing

# The `--actor` option of every management command that writes a change row.
ACTOR_HELP = (
    "who this change is for (a ticket, a colleague), recorded beside the operating-system user that "
    "runs the command: actor `cli:<os user> as <text>` (without it: `cli:<os user>`)"
)


def actor_option(value: str | None) -> str:
    """The command's actor (apps/core/actors.py): the operating-system user running it, with what
    `--actor` claimed beside it; a claim that cannot be recorded is refused."""
    try:
        return cli_actor(value)
    except ActorClaimInvalid as exc:
        raise CommandError(str(exc), returncode=REFUSED_STATUS) from None


def instant_option(option: str, value: str) -> dt.datetime:
    """An ISO 8601 datetime (or date) given as `option`; without an offset it is UTC."""
    try:
        instant = dt.datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"{option} {value!r} is not an ISO 8601 datetime (e.g. 2027-03-01T00:00:00Z).", returncode=REFUSED_STATUS
        ) from None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=dt.UTC)

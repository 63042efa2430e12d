"""Who made a change: the one way every audit and change row names its actor.

    admin:<username>            a staff user, in the Django admin
    console:<username>          a tenant's console user
    cli:<os user>               a management command, as the operating-system user that ran it
    cli:<os user> as <claimed>  the same, with what its `--actor` claimed: recorded beside the user
                                who ran it, never instead of them
    system:<job>                the host itself: a beat job, a default made on first use, a seed

The operating-system user is the process's effective uid as the password database names it, not
`$USER` or `$LOGNAME` (anyone can set those). A claim is free text a person typed: printable, one
line, and short enough that the whole name fits the change tables' 200-character column.

Rows written before this scheme keep what they said (`opal`, `make setup`, `system`: a bare name
was an admin username or an `--actor` claim, `system` the demo agent's seed); the change tables are
append-only and are never rewritten, so a reader takes both forms.
"""

from __future__ import annotations

import os
import pwd
import unicodedata
from typing import Literal

ActorKind = Literal["admin", "console", "cli", "system"]
ACTOR_MAX_LENGTH = 200  # the change tables' `actor` column
CLAIM_SEPARATOR = " as "


class ActorClaimInvalid(ValueError):
    """An `--actor` claim that cannot be recorded as it was typed (the message says why)."""


def actor_name(*, kind: ActorKind, name: str, claimed: str | None = None) -> str:
    """`<kind>:<name>`, and ` as <claimed>` when a command's `--actor` claimed someone."""
    actor = f"{kind}:{name}"
    return f"{actor}{CLAIM_SEPARATOR}{claimed}" if claimed else actor


def admin_actor(username: str) -> str:
    return actor_name(kind="admin", name=username)


def system_actor(job: str) -> str:
    return actor_name(kind="system", name=job)


def os_user() -> str:
    """The effective user of this process, from the password database (`uid<N>` when it has none,
    as in a container run under an arbitrary uid)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def cli_actor(claimed: str | None = None) -> str:
    """A management command's actor: the operating-system user always, `claimed` beside it.

    Raises ActorClaimInvalid for a claim with a control character or line break, or one too long
    for the column; an empty claim is no claim."""
    claim = (claimed or "").strip()
    if any(unicodedata.category(c).startswith("C") for c in claim):
        raise ActorClaimInvalid("--actor: one line of printable text (no control characters).")
    actor = actor_name(kind="cli", name=os_user(), claimed=claim or None)
    if len(actor) > ACTOR_MAX_LENGTH:
        room = ACTOR_MAX_LENGTH - len(actor_name(kind="cli", name=os_user(), claimed="x")) + 1
        raise ActorClaimInvalid(f"--actor: at most {room} characters.")
    return actor

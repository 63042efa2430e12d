"""The 401 challenge a host with an OAuth lane adds to its REST answers (identity.md §2.5).

apps/oauth builds it (apps/oauth/challenge.py) and registers it in its ready(); core's error paths
call `challenge_401` and never import the app above them.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpResponseBase

Challenge = Callable[..., None]  # (response, *, presented: bool) -> None
_challenges: list[Challenge] = []


def on_401(challenge: Challenge) -> None:
    if challenge not in _challenges:
        _challenges.append(challenge)


def challenge_401(response: HttpResponseBase, *, presented: bool) -> None:
    """Add the registered challenge to a 401 (sync: a cache miss reads the issuers)."""
    for challenge in _challenges:
        challenge(response, presented=presented)

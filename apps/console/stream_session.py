"""Does a console stream's sign-in still hold? (apps.core.stream_lease)

The console's run stream is authorized by the session when it opens; while it lasts it asks again
every `OPENWOP_STREAM_RECHECK_SECONDS`, as a new request of that session would be answered: the
session still exists and names the same user (not signed out, not flushed), the password has not
changed since (Django's session auth hash), and the user is still active and a tenant member.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.utils.crypto import constant_time_compare

from apps.console.selectors import membership_of
from apps.core.db_threads import db_connection_release
from apps.core.stream_lease import Allowed


def _session_holds(session_key: str, user_pk: Any) -> bool:
    try:
        session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        if str(session.get(SESSION_KEY)) != str(user_pk):
            return False
        user = get_user_model()._default_manager.filter(pk=user_pk).first()
        if user is None or membership_of(user) is None:
            return False
        stored = session.get(HASH_SESSION_KEY)
        return bool(stored) and constant_time_compare(stored, user.get_session_auth_hash())
    finally:
        db_connection_release()  # a waiting stream holds no connection


def console_session_check(session_key: str | None, user_pk: Any) -> Allowed:
    """`allowed()` for a console stream opened by `user_pk` in the session `session_key`."""

    async def allowed() -> bool:
        if not session_key:
            return False
        return await sync_to_async(_session_holds, thread_sensitive=False)(session_key, user_pk)

    return allowed

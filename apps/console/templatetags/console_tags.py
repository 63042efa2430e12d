"""Template filters of the console's pages."""

from __future__ import annotations

from urllib.parse import urlsplit

from django import template

from apps.core.egress import sanitize_url

register = template.Library()


@register.filter
def receiver(url: str) -> str:
    """A push receiver's URL as the console shows it: scheme, host, port and path. A query may
    carry a receiver's own token, so it shows as `?…` only; the push credential is never in the URL
    (the egress guard refuses userinfo) and never shown at all."""
    shown = sanitize_url(url)
    try:
        has_query = bool(urlsplit(str(url)).query)
    except ValueError:
        has_query = False
    return f"{shown}?…" if has_query else shown

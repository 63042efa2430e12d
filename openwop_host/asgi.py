"""ASGI entry point: a Channels ProtocolTypeRouter served by Daphne.

HTTP goes to Django (async views stream SSE); the router is where websocket routes would join.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - Django must be set up first

application = ProtocolTypeRouter({"http": django_asgi_app})

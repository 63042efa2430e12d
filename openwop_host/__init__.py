"""openwop-host. `__version__` is the release number: discovery, the A2A card, MCP's serverInfo and
the OpenAPI document print it; pyproject.toml, CHANGELOG.md and the Helm chart's appVersion carry the
same value (tests/test_version.py)."""

__version__ = "0.20.0"

from .celery import app as celery_app

__all__ = ("__version__", "celery_app")

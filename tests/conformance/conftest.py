"""The conformance tests use the MCP tests' callers (a seeded tenant, its key, a door client)."""

from tests.mcp.conftest import acme, globex, mcp_caller_for  # noqa: F401 - fixtures

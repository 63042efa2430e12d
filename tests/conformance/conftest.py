"""The conformance tests reuse the MCP tests' callers (a seeded tenant, its key, a door client) and,
for the host-as-client cases, the peer tests' HTTPS servers on loopback with their fake DNS."""

from tests.mcp.conftest import acme, globex, mcp_caller_for  # noqa: F401 - fixtures
from tests.peers.conftest import serve  # noqa: F401 - fixtures
from tests.push.conftest import ca, ca_bundle, dns  # noqa: F401 - fixtures

from django.apps import AppConfig


class PeersAppConfig(AppConfig):
    name = "apps.peers"
    label = "peers"

    def ready(self) -> None:
        from apps.core.discovery import register_capability
        from apps.peers import nodes  # noqa: F401 - registers the a2a.call and mcp.call node kinds
        from apps.peers.seams import conformance_capability

        register_capability("conformance", conformance_capability)

        from apps.facets import surfaces

        surfaces.register_surface(surfaces.MCP_CLIENT)  # the mcp.client node kind: ctx.mcp (RFC 0204)

        from apps.core.sealing import SealedField, sealed_field_register
        from apps.peers.models import PeerCredential
        from apps.peers.selectors import PEER_CREDENTIALS

        # What `reseal` and `doctor secrets` reach (apps/core/sealing.py).
        sealed_field_register(
            SealedField("peer.credential", PeerCredential, "secret_sealed", PEER_CREDENTIALS, id_field="credential_id")
        )

from django.urls import URLPattern, path

from apps.peers.api import A2AInvokeSeamApi, McpInvokeSeamApi, PeerCredentialCollectionApi, PeerCredentialDetailApi

urlpatterns: list[URLPattern] = [
    path("host/openwop-host/api/peer-credentials", PeerCredentialCollectionApi.as_view(), name="peer-credentials"),
    path(
        "host/openwop-host/api/peer-credentials/<str:credential_id>",
        PeerCredentialDetailApi.as_view(),
        name="peer-credential-detail",
    ),
    path("conformance/seams/sample/a2a/invoke", A2AInvokeSeamApi.as_view(), name="seam-a2a-invoke"),
    path("conformance/seams/sample/mcp/invoke", McpInvokeSeamApi.as_view(), name="seam-mcp-invoke"),
]

"""REST for peer credentials (`/host/openwop-host/api/peer-credentials`) and the client seams
(`/conformance/seams/sample/{a2a,mcp}/invoke`). Thin views over services and selectors.

credentialIds are opaque and name no tenant: another tenant's id and an unknown one take the same
NotFound path (STYLE.md habit 5). A secret goes in and never comes back out; PATCH may replace it
(rotation: the next call presents the new one). What the peer's agent card must prove
(`cardSignaturePolicy`, `pinnedCardKey`, a public key) is set at creation or with PATCH.
"""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import NotFound
from apps.peers.models import CardSignaturePolicy
from apps.peers.seams import SEAM_INPUTS, conformance_seams_on, seam_invoke
from apps.peers.selectors import peer_credential_doc, peer_credential_list
from apps.peers.services import UNCHANGED, peer_credential_create, peer_credential_delete, peer_credential_update
from apps.runs.api import ClosedSerializer, StrictCharField
from apps.tenants.authentication import request_subject


def _card_signature_policy_field() -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=CardSignaturePolicy.values, required=False)


def _pinned_card_key_field() -> serializers.JSONField:
    # A JWK object, its JSON text or a PEM public key; checked (public only) by the service.
    return serializers.JSONField(required=False, allow_null=True)


class PeerCredentialCollectionApi(APIView):
    class InputSerializer(ClosedSerializer):
        class Meta:
            ref_name = "CreatePeerCredentialRequest"

        url = StrictCharField(max_length=2048)
        secret = StrictCharField(max_length=4096, trim_whitespace=False)
        scheme = StrictCharField(required=False, max_length=32)
        # Field.label in the stubs; a declared field at runtime (see AgentInventoryEntrySerializer).
        label = StrictCharField(required=False, max_length=200, allow_blank=True)  # type: ignore[assignment]
        cardSignaturePolicy = _card_signature_policy_field()
        pinnedCardKey = _pinned_card_key_field()

    @extend_schema(operation_id="createPeerCredential", request=InputSerializer, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        credential = peer_credential_create(
            subject=request_subject(request),
            url=data["url"],
            secret=data["secret"],
            scheme=data.get("scheme", "Bearer"),
            label=data.get("label", ""),
            card_signature_policy=data.get("cardSignaturePolicy", CardSignaturePolicy.VERIFY_IF_PRESENT),
            pinned_card_key=data.get("pinnedCardKey"),
        )
        return Response(peer_credential_doc(credential), status=201)

    @extend_schema(operation_id="listPeerCredentials", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        credentials = peer_credential_list(tenant_slug=request_subject(request).tenant)
        return Response({"peerCredentials": [peer_credential_doc(c) for c in credentials]})


class PeerCredentialDetailApi(APIView):
    class UpdateSerializer(ClosedSerializer):
        class Meta:
            ref_name = "UpdatePeerCredentialRequest"

        cardSignaturePolicy = _card_signature_policy_field()
        pinnedCardKey = _pinned_card_key_field()  # null removes the pin
        secret = StrictCharField(required=False, max_length=4096, trim_whitespace=False)  # replaces it

    @extend_schema(operation_id="updatePeerCredential", request=UpdateSerializer, responses=OpenApiTypes.OBJECT)
    def patch(self, request: Request, credential_id: str) -> Response:
        body = self.UpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        credential = peer_credential_update(
            subject=request_subject(request),
            credential_id=credential_id,
            card_signature_policy=data.get("cardSignaturePolicy", UNCHANGED),
            pinned_card_key=data.get("pinnedCardKey", UNCHANGED),
            secret=data.get("secret", UNCHANGED),
        )
        return Response(peer_credential_doc(credential))

    @extend_schema(operation_id="deletePeerCredential", responses={204: None})
    def delete(self, request: Request, credential_id: str) -> Response:
        peer_credential_delete(subject=request_subject(request), credential_id=credential_id)
        return Response(status=204)


class _SeamApi(APIView):
    """A seam exists only while the seams are on: otherwise 404 for everyone, before authentication."""

    protocol = ""
    url_field = "peerUrl"
    fallbacks: dict[str, Any] = {}
    InputSerializer: type[serializers.Serializer]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if not conformance_seams_on():
            raise NotFound(f"No resource at {request.path}.")
        super().initial(request, *args, **kwargs)

    def post(self, request: Request) -> Response:
        # Bodies are open: the suite may send members we ignore (authenticated, peerOffersOnly, ...).
        # `version` is asked for as a workflow would (the decision table, strictly); `requestVersion`
        # (§22/§23 "used to force an unsupported one") is also sent when above the floor.
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        inputs = self.inputs_of(body.validated_data)
        answer = seam_invoke(
            subject=request_subject(request),
            protocol=self.protocol,
            inputs=inputs,
            traceparent=request.headers.get("traceparent"),
            tracestate=request.headers.get("tracestate"),
        )
        return Response(answer)

    def inputs_of(self, data: dict[str, Any]) -> dict[str, Any]:
        """The run's inputs: the peer's url and the seam's inputs, `fallbacks` for any left out or empty."""
        inputs = {"peerUrl": data[self.url_field], **{name: data.get(name) for name in SEAM_INPUTS[self.protocol]}}
        return {**inputs, **{name: copy.deepcopy(value) for name, value in self.fallbacks.items() if not inputs[name]}}


@extend_schema_view(
    post=extend_schema(operation_id="seamSampleA2AInvoke", request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
)
class A2AInvokeSeamApi(_SeamApi):
    protocol = "a2a"
    fallbacks = {"text": "conformance"}

    class InputSerializer(serializers.Serializer):
        peerUrl = StrictCharField(max_length=2048)
        version = StrictCharField(required=False, max_length=32)
        requestVersion = StrictCharField(required=False, max_length=32)
        text = StrictCharField(required=False, max_length=10_000, allow_blank=True)


@extend_schema_view(
    post=extend_schema(operation_id="seamSampleMcpInvoke", request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
)
class McpInvokeSeamApi(_SeamApi):
    protocol = "mcp"
    url_field = "serverUrl"
    fallbacks = {"arguments": {}}

    class InputSerializer(serializers.Serializer):
        serverUrl = StrictCharField(max_length=2048)
        tool = StrictCharField(required=False, max_length=256)
        arguments = serializers.DictField(required=False)
        version = StrictCharField(required=False, max_length=32)
        requestVersion = StrictCharField(required=False, max_length=32)
        elicitationAnswer = serializers.DictField(required=False)

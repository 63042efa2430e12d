"""`conformance.a2a-relay`: the node of the `conformance-purpose-relay` fixture.

security-defaults.md §Onward hops: a host advertising `purposePropagation` re-emits the
`permittedPurposes` label it received on every onward hop of the same data, narrowing and never
widening, and treats `[]` as no onward use. The relay's onward hop carries exactly the data it
received (the inbound A2A Message's text parts), so it carries exactly the label that came with
it: the same list, never a wider one, and with `[]` nothing is sent at all.

The node lives here, above both the A2A door (which keeps the inbound Message) and the peers app
(the host's A2A client), since it needs the one's record and the other's client.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from apps.a2a.selectors import task_first_message
from apps.core.ids import split_bound_id
from apps.peers.a2a_client import a2a_call
from apps.peers.nodes import binding_outbound
from apps.peers.outbound import PeerCancelled, PeerFailure
from apps.runs.nodes import CancelObserved, Completed, Failed, NodeContext, NodeKind, NodeResult, register_node_kind
from apps.tenants.models import Tenant


def inbound_label(message: dict[str, Any] | None) -> list[str] | None:
    """The `metadata.openwop.permittedPurposes` the message came with: a list of strings, or None
    when it carried none (unlabelled data). A malformed label is no label we could honour, so it
    is read as the narrowest one, `[]`."""
    metadata = (message or {}).get("metadata")
    openwop = metadata.get("openwop") if isinstance(metadata, dict) else None
    if not isinstance(openwop, dict) or "permittedPurposes" not in openwop:
        return None
    label = openwop["permittedPurposes"]
    if not isinstance(label, list) or not all(isinstance(p, str) for p in label):
        return []
    return list(label)


def inbound_text(message: dict[str, Any] | None, inputs: Any) -> str:
    """The text the relay forwards: the inbound Message's text parts, else the run's `text` input."""
    parts = (message or {}).get("parts")
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] if parts else []
    if texts:
        return "\n".join(texts)
    text = inputs.get("text") if hasattr(inputs, "get") else None
    return text if isinstance(text, str) else ""


@register_node_kind
class PurposeRelayNode(NodeKind):
    """Sends the run's inbound message text on to the A2A peer bound as `peer`, labelled as it was
    received; with `permittedPurposes: []` it sends nothing and completes `{relayed: false}`."""

    kind = "conformance.a2a-relay"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "peer": {"type": "string", "minLength": 1, "maxLength": 128},
            "timeoutMs": {"type": "integer", "minimum": 100, "maximum": 300_000},
        },
        "required": ["peer"],
        "additionalProperties": False,
    }

    def execute(self, ctx: NodeContext) -> NodeResult:
        tenant_slug, _ = split_bound_id(ctx.run_id)
        tenant_pk = Tenant.objects.filter(slug=tenant_slug).values_list("pk", flat=True).get()
        message = task_first_message(tenant_pk=tenant_pk, run_id=ctx.run_id)
        label = inbound_label(message)
        if label == []:
            return Completed(outputs={"relayed": False, "reason": "permittedPurposes is empty: no onward use"})
        try:
            outbound = binding_outbound(ctx, "a2a", str(ctx.config["peer"]))
            if isinstance(ctx.config.get("timeoutMs"), int):
                outbound = replace(outbound, timeout_seconds=ctx.config["timeoutMs"] / 1000)
            answer = a2a_call(
                outbound,
                requested=None,
                text=inbound_text(message, ctx.inputs),
                data=None,
                permitted_purposes=label,
            )
        except PeerCancelled:
            return CancelObserved()
        except PeerFailure as failure:
            return Failed(code=failure.code, message=failure.message, details=failure.details or None)
        return Completed(outputs={"relayed": True, **answer})

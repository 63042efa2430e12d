from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "apps.audit"
    label = "audit"

    def ready(self) -> None:
        from apps.audit.capabilities import host_events_capability
        from apps.audit.host_event_types import (
            HOST_TEST_TYPES,
            NEGOTIATION_DECIDED,
            Delivery,
            conformance_seams_enabled,
            register_host_event_type,
        )
        from apps.core.discovery import register_capability

        # Listed whenever A2A or MCP is served inbound (interop.md §The audit event); issue 4 emits it.
        register_host_event_type(NEGOTIATION_DECIDED, delivery=Delivery.DURABLE)
        for delivery, type_name in HOST_TEST_TYPES.items():
            register_host_event_type(type_name, delivery=delivery, advertised=conformance_seams_enabled)
        register_capability("hostEvents", host_events_capability)

        from apps.audit.group_commit import host_event_append_batched
        from apps.audit.services import host_event_append
        from apps.facets.negotiation import HostEventWriters, on_host_events

        on_host_events(HostEventWriters(append=host_event_append, append_batched=host_event_append_batched))

        from apps.audit.write_probe import record_write_probe
        from apps.core.readiness import register_write_path_probe

        register_write_path_probe(record_write_probe)  # /readyz: the record write can take its locks

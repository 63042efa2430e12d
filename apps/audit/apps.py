from typing import Any

from django.apps import AppConfig
from django.core.management.base import CommandError
from django.db.models.signals import pre_migrate

ONE_WAY = ("audit", "0010_hostevent_partitioned")  # partitions the record table: no way back


def refuse_one_way_unapply(plan: list[tuple[Any, bool]] | None = None, **_: Any) -> None:
    """Refuse a `migrate` that would unapply a one-way migration, before anything is undone:
    Django unapplies the later migrations one by one and only then finds the one it cannot
    reverse, which left the schema half way back."""
    for migration, backwards in plan or []:
        if backwards and (migration.app_label, migration.name) == ONE_WAY:
            raise CommandError(
                "audit 0010 (the partitioned record table) is one-way: migrating audit below it is refused,"
                " and nothing was undone. To go back to an earlier release, deploy its code: the schema from"
                " 0010 on serves it (docs/operators/upgrading-records.md)."
            )


class AuditConfig(AppConfig):
    name = "apps.audit"
    label = "audit"

    def ready(self) -> None:
        pre_migrate.connect(refuse_one_way_unapply, sender=self, dispatch_uid="audit-one-way-migrations")
        from apps.audit.capabilities import host_events_capability
        from apps.audit.host_event_types import (
            CHAIN_REANCHORED,
            HOST_TEST_TYPES,
            NEGOTIATION_DECIDED,
            Delivery,
            conformance_seams_enabled,
            register_host_event_type,
        )
        from apps.core.discovery import register_capability

        # Listed whenever A2A or MCP is served inbound (interop.md §The audit event); issue 4 emits it.
        register_host_event_type(NEGOTIATION_DECIDED, delivery=Delivery.DURABLE)
        register_host_event_type(CHAIN_REANCHORED, delivery=Delivery.DURABLE)
        for delivery, type_name in HOST_TEST_TYPES.items():
            register_host_event_type(type_name, delivery=delivery, advertised=conformance_seams_enabled)
        register_capability("hostEvents", host_events_capability)

        from apps.audit.write_probe import record_write_probe
        from apps.core.readiness import register_write_path_probe

        register_write_path_probe(record_write_probe)  # /readyz: the record write can take its locks

        from apps.audit.metrics import records_gauges
        from apps.core.metrics import on_scrape

        on_scrape(records_gauges)  # /metrics: the default partition's records, the chain's last passes

from django.apps import AppConfig


class A2AConfig(AppConfig):
    name = "apps.a2a"
    label = "a2a"
    verbose_name = "A2A"

    def ready(self) -> None:
        from apps.a2a import tck  # noqa: F401  registers the TCK fixture agent's node kind
        from apps.facets import surfaces

        # What discovery may advertise (capabilities.md: the record is the claim).
        surfaces.register_surface(surfaces.A2A)
        surfaces.register_surface(surfaces.A2A_STREAMING)
        surfaces.register_surface(surfaces.A2A_DURABLE_TASKS)
        surfaces.register_surface(surfaces.A2A_PUSH)  # push configs (interop.md §A2A push delivery)
        surfaces.register_surface(surfaces.A2A_AGENT_CARDS)  # tenant: R (interop.md §Per-agent cards)
        from apps.facets.servable import register_servable_versions  # this door serves A2A 1.0 only

        register_servable_versions("a2a", ["1.0"])

        from apps.a2a.refusals import a2a_refusal
        from apps.core.request_limits import register_refusal_renderer

        register_refusal_renderer("/a2a", a2a_refusal)  # limits answer in A2A's wire, never the envelope

        from apps.a2a.urls import door_urlpatterns
        from apps.core.door_request import door_routes_declare

        door_routes_declare(door_urlpatterns)  # the card and the interfaces: the door's, not Django's

        from apps.a2a.signing import card_signing_advertised
        from apps.core.discovery import register_extension

        register_extension("openwop-host.cardSigning", card_signing_advertised)  # are the cards signed

        from django.db.models import Q

        from apps.a2a.models import CardSigningKey, CardSigningKeyState
        from apps.a2a.signing import CARD_SIGNING_KEYS
        from apps.core.sealing import SealedField, sealed_field_register

        # What `reseal` and `doctor secrets` reach (apps/core/sealing.py): host-wide keys, those
        # that may still sign (a retired key never does again, so its private half is not needed).
        sealed_field_register(
            SealedField(
                "card.signing-key", CardSigningKey, "private_key_sealed", CARD_SIGNING_KEYS,
                id_field="kid", tenant_field=None, only=~Q(state=CardSigningKeyState.RETIRED),
            )
        )  # fmt: skip

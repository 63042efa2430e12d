from django.apps import AppConfig


class ConformanceConfig(AppConfig):
    """The host's conformance profile: `manage.py conformance_profile apply|clear` puts the host in
    the shape the OpenWOP conformance suite expects and takes it out again, and the purpose relay
    node its `conformance-purpose-relay` fixture runs."""

    name = "apps.conformance"
    label = "conformance"

    def ready(self) -> None:
        from apps.conformance import nodes  # noqa: F401 - registers the conformance.a2a-relay node kind
        from apps.facets import surfaces

        # The relay re-emits a received permittedPurposes label on its onward hop (nodes.py).
        surfaces.register_surface(surfaces.PURPOSE_PROPAGATION)

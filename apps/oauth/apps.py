from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "apps.oauth"
    label = "oauth"
    verbose_name = "OAuth / OIDC trusted issuers"

    def ready(self) -> None:
        from apps.core.challenges import on_401
        from apps.oauth.challenge import oauth_401_challenge

        on_401(oauth_401_challenge)

        from apps.core.sealing import SealedField, sealed_field_register
        from apps.oauth.models import TrustedIssuer
        from apps.oauth.services import OAUTH_INTROSPECTION_SECRET

        # What `reseal` and `doctor secrets` reach (apps/core/sealing.py); the ASCII of a token.
        sealed_field_register(
            SealedField(
                "oauth.introspection-secret", TrustedIssuer, "introspection_client_secret",
                OAUTH_INTROSPECTION_SECRET, id_field="issuer", text=True,
            )
        )  # fmt: skip

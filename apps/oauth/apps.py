from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "apps.oauth"
    label = "oauth"
    verbose_name = "OAuth / OIDC trusted issuers"

    def ready(self) -> None:
        from apps.core.challenges import on_401
        from apps.oauth.challenge import oauth_401_challenge

        on_401(oauth_401_challenge)

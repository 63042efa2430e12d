from django.apps import AppConfig


class PushAppConfig(AppConfig):
    name = "apps.push"
    label = "push"

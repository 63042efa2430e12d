from django.apps import AppConfig


class PushConfig(AppConfig):
    name = "apps.push"
    label = "push"

from django.apps import AppConfig


class A2AConfig(AppConfig):
    name = "apps.a2a"
    label = "a2a"

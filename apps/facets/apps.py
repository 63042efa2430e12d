from django.apps import AppConfig


class FacetsConfig(AppConfig):
    name = "apps.facets"
    label = "facets"

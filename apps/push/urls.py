from django.urls import path

from apps.push.api import WebhookCollectionApi, WebhookDeadLettersApi, WebhookDetailApi

urlpatterns = [
    path("webhooks", WebhookCollectionApi.as_view(), name="webhooks"),
    path("webhooks/<str:webhook_id>", WebhookDetailApi.as_view(), name="webhook-detail"),
    path("webhooks/<str:webhook_id>/dead-letters", WebhookDeadLettersApi.as_view(), name="webhook-dead-letters"),
]

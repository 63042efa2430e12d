from django.contrib.auth import views as auth_views
from django.urls import URLPattern, path

from apps.console import views

app_name = "console"

urlpatterns: list[URLPattern] = [
    path("", views.home, name="home"),
    path("login/", views.ConsoleLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("keys/", views.keys, name="keys"),
    path("keys/<str:prefix>/revoke", views.key_revoke, name="key-revoke"),
    path("agents/", views.agents, name="agents"),
    path("runs/", views.runs, name="runs"),
    path("runs/rows", views.runs_rows, name="runs-rows"),
    path("runs/status/<path:run_id>", views.run_status_stream, name="run-status"),
    # A run id is `<tenant>/<opaque>` (one "/", none in either part), so the suffixed route is
    # tried first and never takes a run's own page.
    path("run/<path:run_id>/interrupt", views.run_interrupt, name="run-interrupt"),
    path("run/<path:run_id>", views.run_page, name="run"),
    path("push/", views.push, name="push"),
    # Before task-push: a task id may hold "/", so its <path:> would swallow this suffix.
    path(
        "push/tasks/<path:task_id>/configs/<str:config_id>/remove", views.push_config_remove, name="push-config-remove"
    ),
    path("push/tasks/<path:task_id>", views.task_push, name="task-push"),
    path("push/webhooks/<str:webhook_id>", views.webhook, name="webhook"),
]

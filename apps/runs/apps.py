from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"

    def ready(self) -> None:
        from apps.core.discovery import register_capability
        from apps.runs import (
            nodes,  # noqa: F401 - the engine's node kinds, declared to the workflow checks as registered
            tasks,  # noqa: F401 - registers the tasks and the worker's sweeper hook
        )
        from apps.runs.capabilities import idempotency_capability, run_list_capability

        register_capability("runList", run_list_capability)
        register_capability("idempotency", idempotency_capability)

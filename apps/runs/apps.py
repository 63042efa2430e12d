from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"

    def ready(self) -> None:
        from apps.core.discovery import register_capability
        from apps.runs import tasks  # noqa: F401 - registers the tasks and the worker's sweeper hook
        from apps.runs.capabilities import idempotency_capability, run_list_capability

        register_capability("runList", run_list_capability)
        register_capability("idempotency", idempotency_capability)

        from apps.agents.definitions import node_checks
        from apps.runs.nodes import node_config_errors

        node_checks[:] = [node_config_errors]  # workflows are checked against the engine's node kinds

"""The inbound trace context moves onto the run (`Run.traceparent`/`tracestate`, runs 0004): copy
what the MCP mount recorded, then drop its stop-gap table."""

from django.db import migrations


def copy_to_runs(apps, schema_editor):
    trace_model = apps.get_model("mcp", "RunTraceContext")
    run_model = apps.get_model("runs", "Run")
    for trace in trace_model._base_manager.all().iterator():
        run_model._base_manager.filter(pk=trace.run_id, traceparent="").update(
            traceparent=trace.traceparent, tracestate=trace.tracestate
        )


class Migration(migrations.Migration):
    dependencies = [
        ("mcp", "0001_initial"),
        ("runs", "0004_run_trace_context"),
    ]

    operations = [
        migrations.RunPython(copy_to_runs, migrations.RunPython.noop),
        migrations.DeleteModel(name="RunTraceContext"),
    ]

"""The auditors group (tenants 0002) may view host events in the admin, and nothing more."""

from django.db import migrations


def grant_view(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations (post_migrate); create ours now.
    app_config = apps.get_app_config("audit")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    view = Permission.objects.get(content_type__app_label="audit", codename="view_hostevent")
    Group.objects.get_or_create(name="auditors")[0].permissions.add(view)


def revoke_view(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for group in Group.objects.filter(name="auditors"):
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="audit", codename="view_hostevent"))


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0002_hostevent_append_only_trigger"),
        ("tenants", "0002_operator_auditor_groups"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant_view, revoke_view)]

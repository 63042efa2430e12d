"""What the two staff groups may do in the admin, granted after every migrate and every flush.

`operators` tune the host: facets, agents, skill routing, tenants and their keys, console
memberships, retention windows and legal holds; they read runs, push deliveries, dead letters and
peer credentials. They never manage users, groups or permissions. `auditors` read host events
(their negotiation page checks the group itself). A data migration would grant these once, but a
permission for a model created by a later migration of another app does not exist yet when it
runs, and `flush` (every `transactional_db` test) empties both groups and grants; a `post_migrate`
handler runs after both, so the groups are always as written here. Grants are only added: a
superuser's extra grant is left alone.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Q

# group -> (app_label, codename) pairs; view-only models get only their view_ permission.
STAFF_ROLES: dict[str, tuple[tuple[str, str], ...]] = {
    "operators": (
        ("facets", "view_facet"),
        ("facets", "change_facet"),
        ("facets", "view_facetchange"),
        ("facets", "view_facetrefresh"),
        ("agents", "view_workflow"),
        ("agents", "view_agent"),
        ("agents", "change_agent"),
        ("agents", "view_agentchange"),
        ("a2a", "view_skillroute"),
        ("a2a", "add_skillroute"),
        ("a2a", "change_skillroute"),
        ("a2a", "view_taskmessage"),
        ("tenants", "view_tenant"),
        ("tenants", "add_tenant"),
        ("tenants", "change_tenant"),
        ("tenants", "view_apikey"),
        ("tenants", "add_apikey"),
        ("tenants", "change_apikey"),
        ("console", "view_tenantmembership"),
        ("console", "add_tenantmembership"),
        ("runs", "view_run"),
        ("push", "view_delivery"),
        ("push", "view_deadletter"),
        ("push", "view_pushconfig"),
        ("push", "view_webhook"),
        ("peers", "view_peercredential"),
        ("retention", "view_retentionpolicy"),
        ("retention", "add_retentionpolicy"),
        ("retention", "change_retentionpolicy"),
        ("retention", "view_retentionchange"),
    ),
    "auditors": (("audit", "view_hostevent"),),
}


def staff_roles_grant(*, using: str = DEFAULT_DB_ALIAS, apps: Any = global_apps, **_: Any) -> None:
    """Create both groups and add their grants; content types and permissions of every app named
    are created first, so the order apps are migrated in does not matter."""
    try:
        Group = apps.get_model("auth", "Group")
        Permission = apps.get_model("auth", "Permission")
    except LookupError:  # a partial migrate that has not reached auth yet
        return
    labels = {label for grants in STAFF_ROLES.values() for label, _ in grants}
    for label in sorted(labels):
        app_config = global_apps.get_app_config(label)
        create_contenttypes(app_config, verbosity=0, using=using, apps=apps)
        create_permissions(app_config, verbosity=0, using=using, apps=apps)
    for name, grants in STAFF_ROLES.items():
        group = Group.objects.using(using).get_or_create(name=name)[0]
        wanted = Q()
        for label, codename in grants:
            wanted |= Q(content_type__app_label=label, codename=codename)
        group.permissions.add(*Permission.objects.using(using).filter(wanted))

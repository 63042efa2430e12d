"""A change record's before and after, field by field, for the admin's audit pages (issue 53 item 5).

The change tables keep `before` and `after` as JSON (an object of the row's fields, or null before a
creation). The admin shows one line per field whose value differs, (field, before, after), instead
of the two documents; every value is escaped where it is written (format_html), whatever a caller
put into it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

ABSENT = object()  # a field the record's side does not have (a creation's before, a field added later)
SUMMARY_FIELDS = 4  # the changelist column names at most this many fields, then "and n more"


def _fields(side: Any) -> dict[str, Any]:
    if side is None:
        return {}
    if isinstance(side, dict):
        return side
    return {"value": side}  # a record whose side is one value, not an object of fields


def field_changes(before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    """(field, before, after) for each field whose value differs, in the order the record lists
    them (before's fields, then those only after has); ABSENT where a side lacks the field."""
    old, new = _fields(before), _fields(after)
    names = [*old, *(name for name in new if name not in old)]
    changes = []
    for name in names:
        was, now = old.get(name, ABSENT), new.get(name, ABSENT)
        if was != now:
            changes.append((name, was, now))
    return changes


def shown(value: Any) -> str:
    """A value as the diff shows it: text as itself, anything else as compact JSON."""
    if value is ABSENT:
        return "(absent)"
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def diff_table(before: Any, after: Any) -> SafeString:
    changes = field_changes(before, after)
    if not changes:
        return format_html("<p>{}</p>", "No field changed.")
    rows = format_html_join(
        "\n", '<tr class="change-diff-row" data-field="{}"><th scope="row">{}</th><td>{}</td><td>{}</td></tr>',
        ((name, name, shown(was), shown(now)) for name, was, now in changes),
    )  # fmt: skip
    return format_html(
        '<table class="change-diff"><thead><tr><th scope="col">Field</th><th scope="col">Before</th>'
        '<th scope="col">After</th></tr></thead><tbody>{}</tbody></table>',
        rows,
    )


class ChangeDiffAdminMixin:
    """Mix into the ModelAdmin of a change table with JSON `before` and `after`: its record page
    shows `difference` where the two documents were, its changelist the names of what changed.
    List `difference` in the admin's `fields` / `readonly_fields` instead of `before` and `after`."""

    diff_sides: ClassVar[tuple[str, str]] = ("before", "after")

    @admin.display(description="Difference (field, before, after)")
    def difference(self, obj: Any) -> SafeString:
        before, after = (getattr(obj, side) for side in self.diff_sides)
        return diff_table(before, after)

    @admin.display(description="Changed fields")
    def changed_fields(self, obj: Any) -> str:
        before, after = (getattr(obj, side) for side in self.diff_sides)
        names = [name for name, _, _ in field_changes(before, after)]
        if not names:
            return "none"
        more = len(names) - SUMMARY_FIELDS
        return ", ".join(names[:SUMMARY_FIELDS]) + (f" and {more} more" if more > 0 else "")

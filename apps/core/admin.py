"""The admin site itself. There is no public site at "/" (it is a 404), so the header offers no
"View site" link; the index links the host pages instead (templates/admin/index.html)."""

from __future__ import annotations

from django.contrib import admin

admin.site.site_url = None

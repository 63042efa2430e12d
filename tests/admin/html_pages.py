"""What a browser takes from a rendered page, without a browser: the links on it, and the fields a
form submits as rendered (so a test can post a form back exactly as the page offers it)."""

from __future__ import annotations

from html.parser import HTMLParser

SKIPPED_INPUTS = {"submit", "button", "image", "reset", "file"}


class _PageParser(HTMLParser):
    def __init__(self, form_id: str | None) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.links: list[str] = []
        self.fields: list[tuple[str, str]] = []
        self.form_found = False
        self._in_form = False
        self._select: tuple[str, bool, list[tuple[str, bool]]] | None = None  # name, multiple, options
        self._option: list[str] | None = None
        self._textarea: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag in ("a", "link") and "href" in a:
            self.links.append(a["href"])
        if tag == "form" and self.form_id is not None and a.get("id") == self.form_id:
            self._in_form = self.form_found = True
        if not self._in_form or "disabled" in a:
            return
        if tag == "input" and a.get("name") and a.get("type", "text") not in SKIPPED_INPUTS:
            if a.get("type") in ("checkbox", "radio"):
                if "checked" in a:
                    self.fields.append((a["name"], a.get("value", "on")))
            else:
                self.fields.append((a["name"], a.get("value", "")))
        elif tag == "select" and a.get("name"):
            self._select = (a["name"], "multiple" in a, [])
        elif tag == "option" and self._select is not None:
            self._select[2].append((a.get("value", ""), "selected" in a))
            self._option = [] if "value" not in a else None
        elif tag == "textarea" and a.get("name"):
            self._textarea = (a["name"], [])

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1].append(data)
        if self._option is not None:
            self._option.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._in_form:
            self._in_form = False
        elif tag == "option" and self._option is not None and self._select is not None:
            selected = self._select[2][-1][1]  # an option without a value submits its text
            self._select[2][-1] = ("".join(self._option).strip(), selected)
            self._option = None
        elif tag == "select" and self._select is not None:
            name, multiple, options = self._select
            chosen = [value for value, selected in options if selected]
            if not chosen and not multiple and options:
                chosen = [options[0][0]]  # what a browser submits for a select without a selection
            self.fields.extend((name, value) for value in chosen)
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            name, parts = self._textarea
            text = "".join(parts)
            # HTML drops one newline right after <textarea> (Django renders one there).
            self.fields.append((name, text[1:] if text.startswith("\n") else text))
            self._textarea = None


def page_links(html: str) -> list[str]:
    parser = _PageParser(form_id=None)
    parser.feed(html)
    return parser.links


def form_fields(html: str, form_id: str) -> list[tuple[str, str]]:
    """The (name, value) pairs the form with `form_id` submits as rendered; AssertionError when the
    page has no such form."""
    parser = _PageParser(form_id=form_id)
    parser.feed(html)
    assert parser.form_found, f"no form with id {form_id!r} on the page"
    return parser.fields

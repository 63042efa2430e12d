"""Form posts as a browser sends them to the live host: the form page fetched first (its CSRF cookie
and hidden token), then the post with that token and the page's own Origin and Referer.

The live host runs with DEBUG off, so its cookies are `Secure`; browsers send those to
http://127.0.0.1 (a potentially trustworthy origin), and `browser_client` does the same."""

from __future__ import annotations

from html.parser import HTMLParser

import httpx


class _HiddenInputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "input" and named.get("type") == "hidden" and named.get("name"):
            self.values[named["name"] or ""] = named.get("value") or ""


def browser_client(base_url: str, *, local_address: str | None = None) -> httpx.Client:
    """An httpx client sending its `Secure` cookies to the loopback host, as a browser does (httpx's
    jar, like urllib's, sends them over https only). `local_address`: the client's own address, bound
    before connecting (any of 127/8 on Linux), so one test can sign in from several addresses."""
    transport = httpx.HTTPTransport(local_address=local_address) if local_address else None
    client = httpx.Client(base_url=base_url, timeout=30, transport=transport)

    def all_cookies(request: httpx.Request) -> None:
        jar = [f"{cookie.name}={cookie.value}" for cookie in client.cookies.jar]
        if jar:
            request.headers["Cookie"] = "; ".join(jar)

    client.event_hooks["request"] = [all_cookies]
    return client


def form_post(client: httpx.Client, url: str, data: dict[str, str]) -> httpx.Response:
    """GET `url` (the form), then POST its hidden fields (the CSRF token, `next`) and `data` to it as
    the browser would; redirects not followed."""
    page = client.get(url)
    hidden = _HiddenInputs()
    hidden.feed(page.text)
    assert "csrfmiddlewaretoken" in hidden.values, f"no CSRF token on {url} ({page.status_code})"
    origin = f"{client.base_url.scheme}://{client.base_url.netloc.decode()}"
    return client.post(url, data={**hidden.values, **data}, headers={"Origin": origin, "Referer": str(page.url)})

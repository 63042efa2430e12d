"""Through HAProxy, what a client says about its address is never believed: the balancer replaces
X-Forwarded-For with the connection's source and the replicas believe it from the balancer's own
source address only. So each replica sees the real client (the sign-in throttle counts per real
address, and a spoofed header does not start a fresh count), and /metrics is refused at the
balancer whatever the client claims (docs/operators/proxies-and-balancers.md).

Each client binds its own loopback address (Linux routes all of 127/8 to lo), so one machine plays
several clients; the balancer dials the replicas from cluster.balancer_source."""

from __future__ import annotations

import http.client
import uuid
from typing import Any
from urllib.parse import urlsplit

from tests.cluster.conftest import db_rows, manage
from tests.form_posts import browser_client, form_post

PASSWORD = "cluster-console-password-1"
LIMIT = 5  # OPENWOP_CONSOLE_LOGIN_FAILURES's default, which the cluster runs with
METRICS_REFUSAL = b'{"error":"not_found","message":"No resource at /metrics."}'


def _get(url: str, path: str, *, source: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET `path` from `url` over a connection whose client address is `source`; raw, so the path
    is sent exactly as written."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(source, 0))
    try:
        connection.request("GET", path, headers={"Host": "127.0.0.1", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _console_user(cluster: Any) -> str:
    username = f"fwd-{uuid.uuid4().hex[:10]}"  # fresh: the cluster's Redis outlives its database
    manage(
        cluster, "console_member_create", "--tenant", "demo", "--username", username,
        env={"OPENWOP_CONSOLE_PASSWORD": PASSWORD},
    )  # fmt: skip
    return username


def _sign_in(cluster: Any, username: str, password: str, *, source: str, forwarded_for: str | None = None) -> int:
    client = browser_client(cluster.lb, local_address=source)
    if forwarded_for is not None:
        client.headers["X-Forwarded-For"] = forwarded_for
    try:
        return form_post(client, "/console/login/", {"username": username, "password": password}).status_code
    finally:
        client.close()


def test_a_spoofed_forwarded_for_neither_resets_the_throttle_nor_hides_the_address(cluster: Any) -> None:
    username = _console_user(cluster)
    guesser, owner = "127.77.1.5", "127.77.1.6"
    for i in range(LIMIT):  # a fresh claimed address on every guess, as the probe sent them
        spoofed = f"127.0.0.1, 198.51.100.{i + 1}"
        assert _sign_in(cluster, username, "wrong-password", source=guesser, forwarded_for=spoofed) == 200
    refused = _sign_in(cluster, username, PASSWORD, source=guesser, forwarded_for="203.0.113.77")
    assert refused == 429  # one count for the real address, whatever it claimed
    # The refusal is audited with the address the balancer saw, not 127.0.0.1 (the balancer's own
    # connection) and not a claimed one.
    rows = db_rows(cluster, "SELECT address FROM console_signinrefusal WHERE username = %s", (username,))
    assert rows == [(guesser,)]
    # Every client is not one budget: the owner, from their own address, signs in.
    assert _sign_in(cluster, username, PASSWORD, source=owner) == 302


def test_metrics_through_the_balancer_is_refused_whatever_the_client_claims(cluster: Any) -> None:
    claims = [None, {"X-Forwarded-For": "127.0.0.1"}, {"X-Forwarded-For": "127.0.0.1, 127.0.0.1"},
              {"Forwarded": "for=127.0.0.1"}]  # fmt: skip
    for path in ["/metrics", "/%6Detrics"]:  # the replicas decode the second to the first
        for headers in claims:
            status, body = _get(cluster.lb, path, source="127.0.0.1", headers=headers)
            assert (status, body) == (404, METRICS_REFUSAL), (path, headers, status, body[:200])
    # A replica itself answers a loopback caller: the refusal above is the balancer's.
    status, body = _get(cluster.web[0], "/metrics", source="127.0.0.1")
    assert status == 200 and b"openwop_sign_ins_total" in body


def test_a_replica_believes_forwarded_for_from_the_balancer_only(cluster: Any) -> None:
    """A replica's /metrics answers loopback: a claim to be 198.51.100.9 is refused when it is
    believed. It is believed from the balancer's address only, not from another local client."""
    assert cluster.balancer_source == "127.0.0.2"
    claim = {"X-Forwarded-For": "198.51.100.9"}
    for replica in cluster.web:
        assert _get(replica, "/metrics", source="127.0.0.1", headers=claim)[0] == 200  # not believed
        assert _get(replica, "/metrics", source="127.77.2.1", headers=claim)[0] == 200
        assert _get(replica, "/metrics", source=cluster.balancer_source, headers=claim)[0] == 404  # believed

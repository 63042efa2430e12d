"""The agent card at the path the `a2a` facet names (apps/a2a/card_path_urls.py): an operator who
moves `facet.agent_card_path` gets the card served there, as discovery advertises it, while the
default path keeps serving and every other path stays the 404 it was."""

from __future__ import annotations

import httpx
from a2a.client import A2ACardResolver
from asgiref.sync import sync_to_async
from google.protobuf import json_format

from apps.facets.services import facet_update
from tests.a2a.live import CARD_PATH, db_read

MOVED = "/agents/host/agent-card.json"


async def test_card_is_served_at_a_moved_facet_path(live_url: str, make_key) -> None:  # type: ignore[no-untyped-def]
    keys = {slug: await sync_to_async(make_key)(slug) for slug in ("acme", "globex")}
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{live_url}{MOVED}")).status_code == 404  # not the facet's path yet
        default = await A2ACardResolver(http, live_url).get_agent_card()

        await db_read(lambda: facet_update(protocol="a2a", changes={"agent_card_path": MOVED}, actor="test"))
        discovery = (await http.get(f"{live_url}/.well-known/openwop")).json()
        assert discovery["a2a"]["agentCardUrl"].endswith(MOVED)
        moved = await A2ACardResolver(http, live_url, agent_card_path=MOVED).get_agent_card()
        assert json_format.MessageToDict(moved) == json_format.MessageToDict(default)
        kept = await A2ACardResolver(http, live_url).get_agent_card()  # the default path still serves
        assert json_format.MessageToDict(kept) == json_format.MessageToDict(default)

        # Under /a2a (its own catch-all answers unknown paths) a moved card is served too.
        await db_read(lambda: facet_update(protocol="a2a", changes={"agent_card_path": "/a2a/card.json"}, actor="t"))
        under_a2a = await A2ACardResolver(http, live_url, agent_card_path="/a2a/card.json").get_agent_card()
        assert json_format.MessageToDict(under_a2a) == json_format.MessageToDict(default)
        assert (await http.get(f"{live_url}/a2a/other.json")).json()["error"]["status"] == "NOT_FOUND"
        await db_read(lambda: facet_update(protocol="a2a", changes={"agent_card_path": MOVED}, actor="test"))

        # The public card is one document: anonymous and every tenant's caller get the same bytes.
        bodies = {(await http.get(f"{live_url}{MOVED}")).content}
        for key in keys.values():
            bodies.add((await http.get(f"{live_url}{MOVED}", headers={"Authorization": f"Bearer {key}"})).content)
        assert len(bodies) == 1 and b'"tenant":' not in next(iter(bodies))  # no routing value

        # The catch-all takes nothing else: other unrouted paths are still plain 404s, and a
        # protocol path keeps its OpenWOP envelope.
        assert (await http.get(f"{live_url}/agents/host/other.json")).status_code == 404
        assert (await http.get(f"{live_url}{CARD_PATH}x")).status_code == 404
        assert (await http.post(f"{live_url}/host/openwop-host/nothing")).status_code == 404  # no CSRF 403
        missing = await http.get(f"{live_url}/runs/x/y/z", headers={"Authorization": f"Bearer {keys['acme']}"})
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"

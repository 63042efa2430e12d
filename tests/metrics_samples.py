"""Reading a `/metrics` scrape in tests: every sample keyed by (name, sorted labels)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples_of(text: str) -> Samples:
    """The exposition text's samples by (name, sorted label pairs)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scraped_in_process() -> Samples:
    """This process's `/metrics` as a loopback scraper sees it (Django's test client)."""
    from django.test import Client

    return samples_of(Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())

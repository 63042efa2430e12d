"""The beat job (settings.CELERY_BEAT_SCHEDULE "audit-chain-pending"): the chainer, every minute.

On a host whose every writer chains, it finds no stream behind (one read of the stream table) and
does nothing; after an upgrade from a release that did not chain, it links those records in
batches while the doors serve (apps/audit/chainer.py)."""

from __future__ import annotations

from celery import shared_task

from apps.audit.chainer import chain_pending


@shared_task(name="audit.chain_pending")
def audit_chain_pending() -> list[str]:
    """One pass of the chainer; what it did, per stream it found behind."""
    return chain_pending().lines()

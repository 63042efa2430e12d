"""Which versions each protocol's door can really serve, as the doors themselves declare.

Facet validation consults this so an operator cannot offer a version the mount would only refuse
(capabilities.md: the record is the claim). Each protocol app registers its servable versions in
its AppConfig.ready(); a protocol nothing registered for serves nothing, so every offered version
of it is refused (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable

from apps.core.protocol_versions import Protocol

_servable: dict[str, set[str]] = {}


def register_servable_versions(protocol: Protocol, versions: Iterable[str]) -> None:
    _servable.setdefault(protocol, set()).update(versions)


def unregister_servable_versions(protocol: Protocol, versions: Iterable[str]) -> None:
    _servable.get(protocol, set()).difference_update(versions)


def servable_versions(protocol: Protocol) -> frozenset[str]:
    return frozenset(_servable.get(protocol, ()))


def is_servable(protocol: Protocol, version: str) -> bool:
    return version in _servable.get(protocol, ())

"""Sealing secrets at rest: push credentials, webhook secrets, peer credentials, card signing keys,
introspection secrets.

Each caller names a purpose; the Fernet key is derived from a secret key with that label, so it is
never the signing key itself and one purpose's tokens cannot be opened as another's. A value is
sealed under `SECRET_KEY` and opened under `SECRET_KEY` or any of `SECRET_KEY_FALLBACKS`
(Django's own rotation setting, `DJANGO_SECRET_KEY_FALLBACKS`): a key can change without a value
becoming unreadable, and `manage.py reseal` re-seals every stored value under the current key so
the fallback can then go. A token no key opens raises `InvalidToken`, never a misread value.

The apps that store sealed values declare them here (`sealed_field_register`, from their
AppConfig.ready), so `reseal` and `doctor secrets` reach every one without this floor importing
them (pyproject's layers). Values that a secret only *derived* and that must now be stored before
the key changes (routing values) declare a `secret_bound_register` step the same way.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models, transaction

PUSH_CREDENTIALS = b"openwop.push.credentials.v1"

__all__ = [
    "PUSH_CREDENTIALS",
    "InvalidToken",
    "SealedField",
    "SecretBound",
    "seal",
    "unseal",
]


@functools.lru_cache(maxsize=64)
def _fernet(secret_key: str, purpose: bytes) -> Fernet:
    digest = hashlib.blake2b(secret_key.encode(), key=purpose, digest_size=32).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _keys() -> tuple[str, ...]:
    fallbacks = tuple(k for k in getattr(settings, "SECRET_KEY_FALLBACKS", ()) if k and k != settings.SECRET_KEY)
    return (settings.SECRET_KEY, *fallbacks)


@functools.lru_cache(maxsize=64)
def _opener(keys: tuple[str, ...], purpose: bytes) -> MultiFernet:
    return MultiFernet([_fernet(key, purpose) for key in keys])


def seal(plaintext: str, *, purpose: bytes) -> bytes:
    return _fernet(settings.SECRET_KEY, purpose).encrypt(plaintext.encode())


def unseal(sealed: bytes | memoryview, *, purpose: bytes) -> str:
    """The clear value, opened under SECRET_KEY or any fallback; `InvalidToken` if none opens it."""
    return _opener(_keys(), purpose).decrypt(bytes(sealed)).decode()


SealState = Literal["current", "fallback", "unopenable"]


def seal_state(sealed: bytes | memoryview, *, purpose: bytes) -> SealState:
    """Which key opens the value: the current one, a fallback only (re-seal it), or none."""
    token = bytes(sealed)
    try:
        _fernet(settings.SECRET_KEY, purpose).decrypt(token)
        return "current"
    except InvalidToken:
        pass
    fallbacks = _keys()[1:]
    if fallbacks:
        try:
            _opener(fallbacks, purpose).decrypt(token)
            return "fallback"
        except InvalidToken:
            pass
    return "unopenable"


def reseal(sealed: bytes | memoryview, *, purpose: bytes) -> bytes:
    """The same value sealed under the current key (InvalidToken if no key opens it)."""
    return seal(unseal(sealed, purpose=purpose), purpose=purpose)


# ---------------------------------------------------------------------------------------------
# What is stored sealed, declared by the apps that store it


def _manager(model: type[models.Model]) -> models.Manager[Any]:
    # A tenant-owned table's every row, through its one greppable escape hatch (STYLE.md habit 4).
    return getattr(model, "unscoped_all_tenants", None) or model._default_manager


@dataclass(frozen=True, slots=True)
class SealedField:
    """One model field holding Fernet tokens. `text`: the field is a TextField of the token's ASCII
    (else a BinaryField). `id_field` names the row to an operator (an opaque id, a kid, an issuer
    URL: never the value); `tenant_field` is the path to the owning tenant's slug, or None for
    host-wide rows; `only`, the rows whose value can still be used (a retired key's is not)."""

    kind: str
    model: type[models.Model]
    field: str
    purpose: bytes
    id_field: str
    tenant_field: str | None = "tenant__slug"
    text: bool = False
    only: models.Q | None = None

    def rows(self) -> models.QuerySet[Any]:
        rows = _manager(self.model).exclude(**{f"{self.field}__isnull": True})
        return rows if self.only is None else rows.filter(self.only)

    def token_of(self, value: Any) -> bytes:
        return value.encode("ascii") if self.text else bytes(value)

    def stored(self, token: bytes) -> Any:
        return token.decode("ascii") if self.text else token


@dataclass(frozen=True, slots=True)
class SecretBound:
    """Values derived from SECRET_KEY that must be stored before the key changes (a routing value
    peers hold). `pending()` counts those not stored yet; `store(batch)` stores up to `batch` of
    them and returns how many it stored (0: none left)."""

    kind: str
    pending: Callable[[], int]
    store: Callable[[int], int]


_SEALED: dict[str, SealedField] = {}
_BOUND: dict[str, SecretBound] = {}


def sealed_field_register(field: SealedField) -> None:
    _SEALED[field.kind] = field


def secret_bound_register(bound: SecretBound) -> None:
    _BOUND[bound.kind] = bound


def sealed_fields() -> list[SealedField]:
    return [_SEALED[kind] for kind in sorted(_SEALED)]


def secret_bound_values() -> list[SecretBound]:
    return [_BOUND[kind] for kind in sorted(_BOUND)]


@dataclass(frozen=True, slots=True)
class Unopenable:
    """A stored value no key opens: what `doctor secrets` and `reseal` name (never the value)."""

    kind: str
    tenant: str | None
    row_id: str

    def __str__(self) -> str:
        return "\t".join(_printable(part) for part in (self.kind, self.tenant or "(host)", self.row_id))


def _printable(text: str) -> str:
    # An issuer URL or an id is caller or operator text: escaped for the terminal it goes to.
    return "".join(c if c.isprintable() and c != "\t" else repr(c)[1:-1] for c in text)


def _labels(field: SealedField) -> list[str]:
    return [field.id_field, *([field.tenant_field] if field.tenant_field else [])]


def sealed_values_unopenable(*, batch: int = 500) -> Iterator[Unopenable]:
    """Every stored value that no longer opens under SECRET_KEY and its fallbacks, by kind and pk."""
    for field in sealed_fields():
        last_pk: Any = None
        while True:
            rows = field.rows().order_by("pk")
            if last_pk is not None:
                rows = rows.filter(pk__gt=last_pk)
            page = list(rows.values_list("pk", field.field, *_labels(field))[:batch])
            if not page:
                break
            for _pk, value, row_id, *tenant in page:
                if value and seal_state(field.token_of(value), purpose=field.purpose) == "unopenable":
                    yield Unopenable(field.kind, tenant[0] if tenant else None, str(row_id))
            last_pk = page[-1][0]


@dataclass
class ResealCount:
    current: int = 0
    resealed: int = 0
    unopenable: int = 0


def sealed_field_reseal(field: SealedField, *, batch: int = 200) -> tuple[ResealCount, list[Unopenable]]:
    """Re-seal under SECRET_KEY every value of `field` that only a fallback opens, `batch` rows per
    short transaction (rows are locked only while their own batch is re-sealed, so a writer waits
    at most one batch). Idempotent: a value the current key opens is left as it is."""
    count, unopenable = ResealCount(), []
    last_pk: Any = None
    while True:
        with transaction.atomic():
            rows = field.rows().order_by("pk")
            if last_pk is not None:
                rows = rows.filter(pk__gt=last_pk)
            page = list(rows.select_for_update(of=("self",)).values_list("pk", field.field, *_labels(field))[:batch])
            if not page:
                break
            changed: dict[Any, bytes] = {}
            for pk, value, row_id, *tenant in page:
                if not value:
                    continue  # nothing sealed (a wiped credential, a blank secret)
                token = field.token_of(value)
                state = seal_state(token, purpose=field.purpose)
                if state == "current":
                    count.current += 1
                elif state == "fallback":
                    changed[pk] = reseal(token, purpose=field.purpose)
                    count.resealed += 1
                else:
                    count.unopenable += 1
                    unopenable.append(Unopenable(field.kind, tenant[0] if tenant else None, str(row_id)))
            for pk, token in changed.items():
                _manager(field.model).filter(pk=pk).update(**{field.field: field.stored(token)})
            last_pk = page[-1][0]
    return count, unopenable

"""What the A2A door keeps besides the run itself: the host's skill routing and the A2A messages
of each task.

A run knows nothing of A2A. The door needs two things the run log does not hold: which workflow
an incoming message starts (a 1.0 Message cannot name one, openwop-v2 reference (i).16), and the
Messages a task's `history[]` shows (interop map `a2a.fields`: history holds only A2A Messages),
which double as the messageId de-duplication record (map row SendMessage: "messageId is the
idempotency seed").
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.db import models

from apps.agents.models import AUTHOR_ID_PATTERN, AUTHOR_ID_RE
from apps.runs.models import Run
from apps.tenants.models import TenantOwnedModel


class SkillRoute(models.Model):
    """One workflow the host's A2A interface routes to, published as one card skill.

    Host-level (not per tenant): the public card is the same for every caller. A caller whose
    tenant has no workflow of that id gets -32602 naming the skill when it invokes it.
    """

    workflow_id = models.CharField(
        max_length=128,
        unique=True,
        validators=[RegexValidator(AUTHOR_ID_RE, "A workflowId is 1-128 of [A-Za-z0-9._~:-].")],
        help_text="The workflowId a message routed to this skill starts; also the card's skills[].id.",
    )
    name = models.CharField(max_length=200)
    description = models.TextField()
    tags = models.JSONField(default=list, blank=True, help_text="skills[].tags, a list of strings.")
    position = models.PositiveSmallIntegerField(default=100, help_text="Order on the card after the default.")
    enabled = models.BooleanField(default=True, help_text="Disabled routes leave the card and refuse messages.")
    is_default = models.BooleanField(
        default=False, help_text="The skill a message naming none is routed to; listed first on the card."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-is_default", "position", "workflow_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="skill_route_one_default"
            ),
            models.CheckConstraint(
                condition=models.Q(workflow_id__regex=AUTHOR_ID_PATTERN), name="skill_route_workflow_id_grammar"
            ),
            models.CheckConstraint(
                condition=~models.Q(is_default=True, enabled=False), name="skill_route_default_enabled"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id}{' (default)' if self.is_default else ''}"


class SkillRoutePin(models.Model):
    """The host's routing choice "route only this skill": while a pin exists, the interface routes
    exactly its workflow (the card's one skill, a message naming no skill starts it, every other
    route is refused) and the routing table itself is left as it was, so unpinning restores every
    route exactly (the conformance legs need one routed skill, openwop-v2 reference (i).16; the
    reference host's equivalent is OPENWOP_A2A_WORKFLOW_ID). At most one row (`singleton`).
    Written only by `skill_route_pin` / `skill_route_unpin`, each audited in `SkillRoutePinChange`.
    """

    singleton = models.BooleanField(default=True, unique=True, editable=False)
    route = models.OneToOneField(SkillRoute, on_delete=models.PROTECT, related_name="+")
    actor = models.CharField(max_length=200, help_text="Who pinned it.")
    pinned_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "skill route pin"
        constraints = [models.CheckConstraint(condition=models.Q(singleton=True), name="skill_route_pin_singleton")]

    def __str__(self) -> str:
        return f"only {self.route.workflow_id}"


class SkillRoutePinAction(models.TextChoices):
    PIN = "pin", "pin"
    UNPIN = "unpin", "unpin"


class SkillRoutePinChangeRefused(RuntimeError):
    """An attempt to edit or delete an audit row (STYLE.md habit 6: audit tables are append-only)."""


class SkillRoutePinChange(models.Model):
    """One audited change of the routing choice: who, pin or unpin, the pinned workflow before and
    after ("": every enabled route). Append-only (trigger in migration 0005)."""

    actor = models.CharField(max_length=200, help_text="Who: the operator's username, a command, or the system.")
    action = models.CharField(max_length=8, choices=SkillRoutePinAction.choices)
    before = models.CharField(max_length=128, blank=True, default="", help_text="Pinned before ('' = none).")
    after = models.CharField(max_length=128, blank=True, default="", help_text="Pinned after ('' = none).")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.after or self.before} by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise SkillRoutePinChangeRefused("skill route pin changes are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise SkillRoutePinChangeRefused("skill route pin changes are append-only")


class TaskMessage(TenantOwnedModel):
    """One A2A Message a principal sent to a task, as ProtoJSON with taskId/contextId filled in.

    Unique per (tenant, principal, messageId): a repeated messageId from the same principal finds
    its first row and never starts or resumes anything a second time.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    principal = models.CharField(max_length=255, help_text="The sender's Subject subjectId.")
    message_id = models.CharField(max_length=512)
    document = models.JSONField(help_text="The Message as ProtoJSON (camelCase).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal", "message_id"], name="task_message_once_per_principal"
            ),
        ]
        indexes = [models.Index(fields=["run", "created_at"], name="task_message_history")]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.message_id}"


# ---------------------------------------------------------------------------------------------
# Agent card signing keys (A2A 1.0 §Agent Card signing; issue 21). Host-level: one signer for
# every card this host serves. The key table is the signer's state; the change table its audit.


class CardSigningAlgorithm(models.TextChoices):
    """JWS `alg` values the host generates keys for (RFC 8037 EdDSA over Ed25519; RFC 7518 ES256)."""

    EDDSA = "EdDSA", "Ed25519 (EdDSA)"
    ES256 = "ES256", "P-256 (ES256)"


class CardSigningKeyState(models.TextChoices):
    """generated -> active -> retired, or generated -> retired. Retired is final: a key whose
    private half may have leaked is never brought back."""

    GENERATED = "generated", "generated (not signing yet)"
    ACTIVE = "active", "active (signs every card)"
    RETIRED = "retired", "retired"


class CardSigningKey(models.Model):
    """One JWS key pair for signing agent cards. The private key is a Fernet token of its PKCS#8
    PEM (apps/a2a/signing.py, purpose `CARD_SIGNING_KEYS`); only `public_jwk` ever leaves the host.

    At most one key is active (database constraint). The JWKS (`/.well-known/jwks.json`) lists the
    active key and every retired key retired less than the grace window ago that once signed.
    """

    kid = models.CharField(max_length=64, unique=True, editable=False, help_text="RFC 7638 JWK thumbprint.")
    algorithm = models.CharField(max_length=8, choices=CardSigningAlgorithm.choices)
    state = models.CharField(max_length=16, choices=CardSigningKeyState.choices, default=CardSigningKeyState.GENERATED)
    public_jwk = models.JSONField(editable=False, help_text="kty, crv, x[, y]: the public half only.")
    private_key_sealed = models.BinaryField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True, editable=False)
    retired_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["state"], condition=models.Q(state="active"), name="card_signing_key_one_active"
            ),
            models.CheckConstraint(
                condition=~models.Q(state="active") | models.Q(activated_at__isnull=False),
                name="card_signing_key_active_has_activated_at",
            ),
            models.CheckConstraint(
                condition=~models.Q(state="retired") | models.Q(retired_at__isnull=False),
                name="card_signing_key_retired_has_retired_at",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kid} ({self.algorithm}, {self.state})"


class CardSigningKeyAction(models.TextChoices):
    GENERATE = "generate", "generate"
    ACTIVATE = "activate", "activate"
    RETIRE = "retire", "retire"


class CardSigningKeyChangeRefused(RuntimeError):
    """An attempt to edit or delete an audit row (STYLE.md habit 6: audit tables are append-only)."""


class CardSigningKeyChange(models.Model):
    """One audited change of a signing key: who, which key, the action, its state before and
    after (never key material). Append-only (trigger in migration 0004)."""

    key = models.ForeignKey(CardSigningKey, on_delete=models.PROTECT, related_name="+")
    kid = models.CharField(max_length=64)
    actor = models.CharField(max_length=200, help_text="Who: the operator's username, or the system.")
    action = models.CharField(max_length=16, choices=CardSigningKeyAction.choices)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.kid} by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise CardSigningKeyChangeRefused("card signing key changes are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise CardSigningKeyChangeRefused("card signing key changes are append-only")

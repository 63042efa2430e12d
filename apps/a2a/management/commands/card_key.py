"""`card_key generate|activate|retire|list`: agent card signing keys from the command line, for
operators who keep configuration as code (issue 32; every Kubernetes deployment).

    card_key generate --algorithm EdDSA|ES256 [--activate [--if-none-active]]
    card_key activate <kid>
    card_key retire <kid>
    card_key list

The admin's own services (apps/a2a/services.py), so the same rules and the same audited
CardSigningKeyChange rows (actor `cli:<os user>`, and `as <text>` beside it with `--actor <text>`). `generate` prints
the new kid alone on stdout. `--if-none-active` generates and activates only while no key is active
(`make setup`: idempotent, a restart keeps the key that signs). A refusal (an unknown kid, a
retired key) prints why on stderr and exits with status 2, changing nothing. No key material is
ever printed: the private half is sealed at generation. `list` prints a header line naming its
tab-separated columns, then a row per key; with no key, one line saying so and how to make one.
"""

from __future__ import annotations

import itertools
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.a2a.models import CardSigningAlgorithm, CardSigningKey
from apps.a2a.services import card_key_activate, card_key_generate, card_key_retire
from apps.a2a.signing import card_signing_key_active, card_signing_key_by_kid, card_signing_keys
from apps.core.command_args import ACTOR_HELP, actor_option
from apps.core.errors import NotFound, ValidationFailed

REFUSED_STATUS = 2


class ActionParser(CommandParser):
    """The parser of each action. For `activate <kid>` and `retire <kid>` (`takes_kid`): a kid is a
    base64url thumbprint, so one in 64 begins with "-" (one in 4,096 with "--"), which argparse
    would take for an unknown option. There every argument that is not `-h`, `--help`, `--actor`
    or its value is the kid, as if written after "--"."""

    takes_kid = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self.takes_kid and args is not None and "--" not in args:
            options: list[str] = []
            kids: list[str] = []
            words = iter(args)
            for word in words:
                if word == "--actor":
                    options += [word, *itertools.islice(words, 1)]  # and its value
                elif word in ("-h", "--help") or word.startswith("--actor="):
                    options.append(word)
                else:
                    kids.append(word)
            args = [*options, "--", *kids]
        return super().parse_known_args(args, namespace)


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


# `list` prints a header naming its columns, then one tab-separated row per key (issue 53 item 6).
LIST_COLUMNS = ("kid", "algorithm", "state", "created", "activated", "retired")
LIST_EMPTY = "no card signing keys (card_key generate --algorithm EdDSA --activate makes one that signs every card)"


class Command(BaseCommand):
    help = "Generate, activate, retire or list the agent card signing keys (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, parser_class=ActionParser)
        generate = actions.add_parser("generate", help="a new key pair (prints its kid)")
        generate.add_argument("--algorithm", required=True, choices=CardSigningAlgorithm.values)
        generate.add_argument("--activate", action="store_true", help="and make it the key that signs every card")
        generate.add_argument(
            "--if-none-active", action="store_true",
            help="with --activate: only when no key is active (idempotent setup)",
        )  # fmt: skip
        generate.add_argument("--actor", help=ACTOR_HELP)
        for name, text in (("activate", "sign every card with this key"), ("retire", "stop signing with this key")):
            action = actions.add_parser(name, help=text)
            action.takes_kid = True
            action.add_argument("kid")
            action.add_argument("--actor", help=ACTOR_HELP)
        actions.add_parser("list", help="every key: kid, algorithm, state, created, activated, retired")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            keys = list(card_signing_keys())
            if not keys:
                self.stdout.write(LIST_EMPTY)
                return
            self.stdout.write("\t".join(LIST_COLUMNS))
            for key in keys:
                self.stdout.write(self._row(key))
            return
        actor = actor_option(options.get("actor"))
        try:
            if action == "generate":
                self._generate(options, actor)
            elif action == "activate":
                key = card_key_activate(key_pk=card_signing_key_by_kid(options["kid"]).pk, actor=actor)
                self.stdout.write(f"activated {key.kid}: it signs every agent card")
            else:
                key = card_key_retire(key_pk=card_signing_key_by_kid(options["kid"]).pk, actor=actor)
                self.stdout.write(f"retired {key.kid}")
        except (ValidationFailed, NotFound) as exc:
            raise CommandError(exc.message, returncode=REFUSED_STATUS) from exc

    def _generate(self, options: dict[str, Any], actor: str) -> None:
        if options["if_none_active"]:
            if not options["activate"]:
                raise CommandError("--if-none-active goes with --activate.", returncode=REFUSED_STATUS)
            active = card_signing_key_active()
            if active is not None:
                self.stderr.write(f"a key is already active ({active.kid}): nothing generated")
                return
        key = card_key_generate(algorithm=options["algorithm"], actor=actor)
        if options["activate"]:
            key = card_key_activate(key_pk=key.pk, actor=actor)
        self.stdout.write(key.kid)

    @staticmethod
    def _row(key: CardSigningKey) -> str:
        return "\t".join(
            (key.kid, key.algorithm, key.state, _when(key.created_at), _when(key.activated_at), _when(key.retired_at))
        )

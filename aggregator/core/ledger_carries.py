"""Ledger carries: what a deleted target item's checkpoint map held, read from its ``REMOVE``
record, for the target rules' ledger items (pure: no boto3, no I/O).

A target rule (:mod:`aggregator.core.rules.targets`) keeps, on each item it writes, a map of
checkpoints: entry ``<rule token><shard token>`` (:func:`~aggregator.core.checkpoint_names.
target_token`) -> the 21-byte checkpoint of the records of that shard that the item includes.
When the item is deleted, the map goes with it, and a batch delivered again afterwards finds no
item: its deltas go to the rule's ledger (:mod:`aggregator.dynamodb.targets`), which has never
seen them. The delete is itself a stream record, a ``REMOVE`` whose ``OldImage`` holds the map
(view type ``NEW_AND_OLD_IMAGES``; a TTL delete too). The engine reads it there
(:meth:`Engine.process <aggregator.core.engine.Engine.process>`) and gives each target rule with
entries in it a :class:`~aggregator.core.deltas.LedgerCarry`: the rule's ledger item for that
item and the entries by shard token. The writer raises the ledger's checkpoints to them
(:mod:`aggregator.dynamodb.ledger_carries`), so a redelivered batch meets there the checkpoint it
met on the item.

The map is the framework's, on the application's item: an entry whose name or value is not in
the format the framework writes (or a map attribute of another type) carries nothing and is
counted (``BatchDeltas.carry_entries_ignored``). It is not dead-lettered: dead letters are for
what a rule cannot evaluate, and the map is no rule's input (no rule may read it); the record's
deltas are unaffected. Entries of rules that are not in the rule set (a dropped rule's, another
deployment's) are not this rule set's to carry and are passed over without a count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aggregator.core.checkpoint_names import CHECKPOINT_BYTES, RULE_TOKEN_CHARS, SHARD_TOKEN_CHARS
from aggregator.core.exceptions import EvaluationError
from aggregator.core.records import deserialize_value

__all__ = ["ENTRY_NAME_CHARS", "carried_entries"]

ENTRY_NAME_CHARS = RULE_TOKEN_CHARS + SHARD_TOKEN_CHARS
"""Characters of an entry's name in a target item's checkpoint map (18)."""


def carried_entries(
    raw: Any, rules_by_token: Mapping[str, str]
) -> tuple[dict[str, dict[str, bytes]], int]:
    """The entries of a checkpoint map (as an image holds it, DynamoDB JSON ``{"M": {...}}``)
    per target rule: ``({rule: {shard token: checkpoint value}}, entries ignored)``.

    Parameters
    ----------
    raw
        The map attribute's value in DynamoDB JSON (the ``OldImage``'s).
    rules_by_token
        The rule set's target rules by :func:`~aggregator.core.checkpoint_names.rule_token`.

    Returns
    -------
    tuple
        Each rule's entries keyed by the 12-character shard token that follows its rule token,
        values of :data:`~aggregator.core.checkpoint_names.CHECKPOINT_BYTES` bytes; and how many
        entries of these rules could not be read (a name of another length, a value that is not
        a 21-byte binary), plus one for a map attribute of another type. Entries of other rules
        are neither returned nor counted. Never raises.
    """
    if not isinstance(raw, Mapping) or list(raw) != ["M"] or not isinstance(raw["M"], Mapping):
        return {}, 1
    found: dict[str, dict[str, bytes]] = {}
    ignored = 0
    for name, value in raw["M"].items():
        if not isinstance(name, str):
            continue
        rule = rules_by_token.get(name[:RULE_TOKEN_CHARS])
        if rule is None:
            continue
        try:
            checkpoint = deserialize_value(value)
        except EvaluationError:
            checkpoint = None
        if (
            len(name) != ENTRY_NAME_CHARS
            or not isinstance(checkpoint, bytes)
            or len(checkpoint) != CHECKPOINT_BYTES
        ):
            ignored += 1
            continue
        found.setdefault(rule, {})[name[RULE_TOKEN_CHARS:]] = checkpoint
    return found, ignored

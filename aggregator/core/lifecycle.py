"""Rule lifecycle, the pure part: fingerprints, states and fences.

A rule's aggregates are only meaningful under one definition. The deployed rule set is recorded
in the table (:mod:`aggregator.dynamodb.manifest`), one entry per rule with its
:func:`rule_fingerprint`; a rule whose definition changed under the same name is refused at
start-up, since mixing two definitions in one aggregate is silent corruption.

States of a rule in the manifest:

``pending``
    The handler applies the rule from a *fence* per stream shard on: a sequence number after
    which the shard's records are the handler's to count (:class:`Fence`). What the table held
    before the fences is not counted until a backfill adds it.
``backfilling``
    A backfill is under way (its id is recorded); the handler behaves as for ``pending``.
``active``
    The backfill finished: the aggregates cover every item. The handler keeps honouring the
    fences for :data:`FENCE_RETENTION_SECONDS` after that (a batch delivered again from before a
    fence must still be skipped), then drops them.

Everything here is pure; the I/O lives in :mod:`aggregator.dynamodb.manifest`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from aggregator.core.records import pad_sequence_number
from aggregator.core.rules import Rule

__all__ = [
    "FENCE_RETENTION_SECONDS",
    "Fence",
    "RuleState",
    "RuleStatus",
    "fence_before",
    "rule_fingerprint",
]

RuleStatus = Literal["pending", "backfilling", "active"]

FENCE_RETENTION_SECONDS = 25 * 3600
"""How long fences are honoured after a rule became active: a batch from before a fence can be
delivered again until its records pass the event source mapping's ``MaximumRecordAgeInSeconds``
(24 hours in ``template.yaml``; a stream keeps records 24 hours, DynamoDB Developer Guide, "Change
data capture for DynamoDB Streams"), plus one hour."""


def rule_fingerprint(rule: Rule) -> str:
    """A short digest of what a rule's aggregates mean: its match, key, delta, window, source and
    TTL-delete policy (not its name, description or leaderboard flag, which do not change any
    value). 16 hex digits of SHA-256 over a canonical JSON text.

    Examples
    --------
    >>> from aggregator.core.rules import rule
    >>> rule_fingerprint(rule("a", key="X")) == rule_fingerprint(rule("b", key="X"))
    True
    >>> rule_fingerprint(rule("a", key="X")) == rule_fingerprint(rule("a", key="Y"))
    False
    """
    meaning = {
        # the conditions' reprs name their classes and fields (frozen dataclasses), so two
        # operators with the same operands differ
        "match": repr(rule.match),
        "key": rule.key.template,
        "delta": rule.delta.model_dump(mode="json"),
        "window": None if rule.window is None else rule.window.model_dump(mode="json"),
        "source": rule.source,
        "ttl_deletes": rule.ttl_deletes,
    }
    text = json.dumps(meaning, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class RuleState:
    """A rule's entry in the manifest.

    Attributes
    ----------
    name, fingerprint
        The rule and :func:`rule_fingerprint` of the definition its aggregates were built with.
    status
        ``pending``, ``backfilling`` or ``active`` (module docstring).
    registered_at
        Epoch seconds when the rule was first deployed.
    backfill_id
        The backfill that is (or was) building the rule's history, if any.
    active_since
        Epoch seconds when the backfill finished (``status == "active"``).
    unfenced
        A handler counted the rule without fences (its events named no shard: no tumbling
        windows), so no backfill of it can be exact.
    """

    name: str
    fingerprint: str
    status: RuleStatus
    registered_at: int
    backfill_id: str | None = None
    active_since: int | None = None
    unfenced: bool = False

    def fenced(self, now: float) -> bool:
        """Whether the handler must honour the rule's fences at ``now`` (epoch seconds)."""
        if self.status != "active":
            return True
        return self.active_since is None or now < self.active_since + FENCE_RETENTION_SECONDS


@dataclass(frozen=True, slots=True)
class Fence:
    """Where, in one stream shard, the handler's part of a rule begins.

    The shard's records with a sequence number greater than ``after`` are counted by the handler;
    those up to ``after`` were already in the table when the backfill's scan began, so they are
    the backfill's (:mod:`aggregator.dynamodb.backfill`).

    ``after`` is a 40-digit zero-padded sequence number; ``set_by`` is ``handler`` (the first
    batch the handler processed with the rule) or ``backfill`` (the shard's last record when the
    backfill fenced it).
    """

    rule: str
    shard_id: str
    after: str
    set_by: Literal["handler", "backfill"]

    def covers(self, sequence_number: str) -> bool:
        """Whether a record of the shard is the handler's to count."""
        return pad_sequence_number(sequence_number) > self.after


def fence_before(sequence_number: str) -> str:
    """The fence that gives the handler a record and everything after it: the record's sequence
    number minus one, 40 digits."""
    return pad_sequence_number(str(int(sequence_number) - 1))

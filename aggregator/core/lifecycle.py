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

Rules that need no backfill
---------------------------
A backfill adds what the table held before a rule's fences. When the stream holds every write
since the table was created and the handler counted the rule from the first record of every
shard, there is nothing before the fences: the rule is complete without a backfill. The proof
has two parts, both recorded in the table:

1. *Genesis* (:class:`Genesis`): the manifest names the stream that was created together with
   the table (``aggregator create-table``, ``aggregator local --create-table``, or the stack's
   own table, whose template passes its stream to the function). A stream enabled later, or
   enabled again, has another label and proves nothing.
2. *Opened with the rule*: the handler records, in each shard's fence item, where the first batch
   any handler processed in that shard began (``opened_after``). A rule whose fence, set by the
   handler, equals it in every shard the stream lists was counted from each shard's first
   processed record (:func:`counted_from_start`).

A first batch begins at the shard's first record when the event source mapping starts at
``TRIM_HORIZON`` (the template, the CDK construct and ``aggregator run`` do) and nothing has been
trimmed yet: the stream keeps records 24 hours, so the proof is only taken while the stream is
younger than :data:`GENESIS_MAX_AGE_SECONDS`. A child shard is read after its parent, from its
own first record. A rule registered while genesis holds is marked a candidate
(:attr:`RuleState.genesis`) and stays ``pending`` until the handler finds it opened with the rule
in every shard; then it turns ``active`` without a backfill. Anything less (a shard opened
before the rule was deployed, a shard that never delivered a batch, an older stream) leaves it
``pending``, as on any table with older items: ``aggregator backfill`` then settles it.

Generations
-----------
A rule's aggregates are built by one definition. Changing it means building a new *generation*
beside the one readers use (``aggregator rebuild``): generation ``g`` of rule ``R`` keeps its
aggregates under the storage name ``R@g`` (:func:`generation_name`; generation 1 is plain ``R``,
and ``@`` cannot occur in a rule name), and the manifest entry of each generation is keyed by its
storage name. Two more states serve the rebuild and the removal of rules:

``requested``
    ``aggregator rebuild`` asked for a generation with a new fingerprint. The first handler (or
    runner) that starts with that definition turns it into ``pending`` and counts it from its
    fences on; until then no handler counts it.
``retired``
    A rebuild switched readers to a newer generation; this one's aggregates stay, unchanged,
    until ``aggregator drop-rule`` deletes them. A handler with its definition is refused.
``dropping``
    ``aggregator drop-rule`` is deleting the aggregates (resumable); a handler with the
    definition is refused.

Which generation readers use is a separate pointer in the manifest (``generations``: rule name
to generation number, absent for 1), switched in the same conditional write that retires the old
generation.

Everything here is pure; the I/O lives in :mod:`aggregator.dynamodb.manifest`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from aggregator.core.records import pad_sequence_number
from aggregator.core.rules import Rule, RuleSet

__all__ = [
    "FENCE_RETENTION_SECONDS",
    "GENERATION_SEPARATOR",
    "GENESIS_MAX_AGE_SECONDS",
    "Fence",
    "Genesis",
    "RuleState",
    "RuleStatus",
    "ShardOpening",
    "changed_definitions",
    "counted_from_start",
    "fence_before",
    "generation_name",
    "generation_of",
    "generations_of",
    "index_stale",
    "live_generation",
    "resolved_rules",
    "rule_fingerprint",
    "storage_rules",
    "stream_label",
]

RuleStatus = Literal["requested", "pending", "backfilling", "active", "retired", "dropping"]

GENERATION_SEPARATOR = "@"
"""Between a rule's name and its generation number in a storage name (``delay@2``); never in a
rule name (:data:`aggregator.core.rules.model.RULE_NAME_PATTERN`)."""

FENCE_RETENTION_SECONDS = 25 * 3600
"""How long fences are honoured after a rule became active: a batch from before a fence can be
delivered again until its records pass the event source mapping's ``MaximumRecordAgeInSeconds``
(24 hours in ``template.yaml``; a stream keeps records 24 hours, DynamoDB Developer Guide, "Change
data capture for DynamoDB Streams"), plus one hour."""


GENESIS_MAX_AGE_SECONDS = 23 * 3600
"""How long after its creation a stream can prove that it holds every write of its table: a
stream keeps records 24 hours (DynamoDB Developer Guide, "Change data capture for DynamoDB
Streams"), so a shard's first record may be trimmed after that; one hour of margin."""


CLOCK_SKEW_SECONDS = 300
"""How far this machine's clock may be behind DynamoDB's when a stream's age is taken from its
label."""


def stream_label(stream_arn: str) -> str:
    """The label of a stream ARN (its creation time, ISO 8601, as DynamoDB writes it), or ``""``
    for text that is not a stream ARN.

    >>> stream_label("arn:aws:dynamodb:eu-west-1:1:table/t/stream/2026-11-27T19:56:57.181")
    '2026-11-27T19:56:57.181'
    """
    _, separator, label = stream_arn.rpartition("/stream/")
    return label if separator else ""


def _label_epoch_seconds(label: str) -> float | None:
    """A stream label as epoch seconds (labels are UTC), or ``None`` when it is not a time."""
    try:
        moment = datetime.fromisoformat(label)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Genesis:
    """The manifest's record that a stream was created together with its table, so that it holds
    every write the table ever had (module docstring, "Rules that need no backfill").

    Attributes
    ----------
    stream_label
        The label of that stream (:func:`stream_label`).
    set_by
        Who created the table with it: ``create-table`` (``aggregator create-table``, ``local
        --create-table``, :func:`aggregator.dynamodb.table.create_table`) or ``stack``.
    """

    stream_label: str
    set_by: str

    def holds(self, stream_arn: str | None, now: float) -> bool:
        """Whether the proof applies to ``stream_arn`` at ``now`` (epoch seconds): the same
        stream, created less than :data:`GENESIS_MAX_AGE_SECONDS` ago. ``stream_arn=None``
        checks the age only (the stream is checked when a rule is promoted)."""
        if stream_arn is not None and stream_label(stream_arn) != self.stream_label:
            return False
        created = _label_epoch_seconds(self.stream_label)
        if created is None:
            return False
        # the label is DynamoDB's clock, ``now`` this machine's: a few minutes either way
        return -CLOCK_SKEW_SECONDS <= now - created < GENESIS_MAX_AGE_SECONDS


@dataclass(frozen=True, slots=True)
class ShardOpening:
    """One shard's fence item as the genesis proof reads it: where the first batch any handler
    processed in the shard began (``opened_after``, a fence: the sequence number before its
    first record, 40 digits; ``None`` if no handler recorded it) and the shard's fences by rule."""

    opened_after: str | None
    fences: Mapping[str, Fence]


def counted_from_start(
    rule_name: str, shard_ids: Iterable[str], openings: Mapping[str, ShardOpening]
) -> bool:
    """Whether the handler counted ``rule_name`` from the first processed record of every shard
    in ``shard_ids`` (every shard the stream lists): each has an opening whose fence for the rule
    was set by the handler at ``opened_after``. A shard without an opening (no batch yet, or no
    record of where it began) proves nothing, so the answer is ``False``.

    >>> f = Fence("r", "s1", "0" * 40, "handler")
    >>> counted_from_start("r", ["s1"], {"s1": ShardOpening("0" * 40, {"r": f})})
    True
    >>> counted_from_start("r", ["s1", "s2"], {"s1": ShardOpening("0" * 40, {"r": f})})
    False
    """
    ids = list(shard_ids)
    if not ids:
        return False
    for shard_id in ids:
        opening = openings.get(shard_id)
        if opening is None or opening.opened_after is None:
            return False
        fence = opening.fences.get(rule_name)
        if fence is None or fence.set_by != "handler" or fence.after != opening.opened_after:
            return False
    return True


def rule_fingerprint(rule: Rule) -> str:
    """A short digest of what a rule's aggregates mean: its match, key, delta, kind (when not
    ``sum``), window, source, target and TTL-delete policy (not its name, description or leaderboard
    flag, which do not change any value), and where they are kept (``write_shards``,
    ``leaderboard_partitions``, ``leaderboard_store``, ``partitions``, when set). 16 hex digits
    of SHA-256 over a canonical JSON text.

    Examples
    --------
    >>> from aggregator.core.rules import rule
    >>> rule_fingerprint(rule("a", key="X")) == rule_fingerprint(rule("b", key="X"))
    True
    >>> rule_fingerprint(rule("a", key="X")) == rule_fingerprint(rule("a", key="Y"))
    False
    """
    meaning: dict[str, object] = {
        # the conditions' reprs name their classes and fields (frozen dataclasses), so two
        # operators with the same operands differ
        "match": repr(rule.match),
        "key": rule.key.template,
        "delta": rule.delta.model_dump(mode="json"),
        "window": None if rule.window is None else rule.window.model_dump(mode="json"),
        "source": rule.source,
        "ttl_deletes": rule.ttl_deletes,
    }
    # where the aggregates are kept: changing either needs a rebuild (only when set, so the
    # fingerprints of rules without them stay what they were)
    if rule.write_shards != 1:
        meaning["write_shards"] = rule.write_shards
    if rule.leaderboard_partitions != 1:
        meaning["leaderboard_partitions"] = rule.leaderboard_partitions
    if rule.spread != 1:
        meaning["partitions"] = rule.spread
    if rule.leaderboard_store != "index":  # top lists are built from the aggregates' records
        meaning["leaderboard_store"] = rule.leaderboard_store
    if rule.kind.name != "sum":  # what the items hold (sum rules' fingerprints stay as they were)
        meaning["kind"] = rule.kind.options()
    if rule.target is not None:  # the key alone does not say which attribute holds the sum
        meaning["target"] = rule.target.attribute
    text = json.dumps(meaning, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class RuleState:
    """A rule's entry in the manifest.

    Attributes
    ----------
    name, fingerprint
        The storage name (the rule's name, or ``<rule>@<generation>`` from the second
        generation on: :func:`generation_name`) and :func:`rule_fingerprint` of the definition
        its aggregates were built with.
    status
        ``requested``, ``pending``, ``backfilling``, ``active``, ``retired`` or ``dropping``
        (module docstring).
    registered_at
        Epoch seconds when the rule was first deployed.
    backfill_id
        The backfill that is (or was) building the rule's history, if any.
    active_since
        Epoch seconds when the backfill finished (``status == "active"``).
    unfenced
        A handler counted the rule without fences (its events named no shard: no tumbling
        windows), so no backfill of it can be exact.
    leaderboard
        Whether the generation's existing aggregates carry leaderboard index entries: the
        ``leaderboard`` flag of the definition they were written under (not part of the
        fingerprint: turning it on or off changes no value). ``None`` for entries recorded
        before the flag was. When it differs from the deployed definition's flag, the index is
        incomplete (or stale) until ``aggregator rebuild`` writes (or removes) the entries of
        the existing aggregates (:func:`index_stale`).
    handler_leaderboard
        The ``leaderboard`` flag of the definition the handler (or ``aggregator run``) last
        started with, recorded at each start where it changed: ``rebuild`` indexes the
        existing aggregates only once the handler indexes the ones it updates.
    target_attribute
        For a rule with a ``target``: the application attribute its sums are kept in, so that
        ``drop-rule`` can remove it once the rule is gone from the definitions.
    genesis
        Registered while the manifest's :class:`Genesis` held: the rule turns ``active``
        without a backfill once the handler has counted it from the start of every shard
        (:func:`counted_from_start`); ``active_since`` is then that moment.
    partitions
        How many partition key values the generation's aggregates spread over (the
        definition's :attr:`Rule.spread <aggregator.core.rules.Rule.spread>` when it was
        registered or requested; 1 for entries recorded before spread partitions): readers of
        the generation, ``drop-rule`` and the listings read these values.
    """

    name: str
    fingerprint: str
    status: RuleStatus
    registered_at: int
    backfill_id: str | None = None
    active_since: int | None = None
    unfenced: bool = False
    leaderboard: bool | None = None
    handler_leaderboard: bool | None = None
    target_attribute: str | None = None
    genesis: bool = False
    partitions: int = 1

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
    the backfill's (:mod:`aggregator.operations.backfill`).

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


def index_stale(rule: Rule, state: RuleState | None) -> bool:
    """Whether ``rule``'s leaderboard index does not match its generation's existing
    aggregates: the definition's ``leaderboard`` flag differs from the one they were written
    under (``state.leaderboard``; an unrecorded flag is taken to match)."""
    return (
        state is not None
        and state.leaderboard is not None
        and (state.leaderboard != rule.leaderboard)
    )


def fence_before(sequence_number: str) -> str:
    """The fence that gives the handler a record and everything after it: the record's sequence
    number minus one, 40 digits."""
    return pad_sequence_number(str(int(sequence_number) - 1))


def generation_name(rule_name: str, generation: int) -> str:
    """The storage name of a rule's generation: the rule's name for generation 1, else
    ``"<rule>@<generation>"``. It prefixes the generation's aggregate sort keys and is its
    leaderboard partition and manifest key.

    >>> generation_name("delay", 1), generation_name("delay", 3)
    ('delay', 'delay@3')
    """
    if generation < 1:
        raise ValueError(f"generations count from 1, got {generation}")
    return rule_name if generation == 1 else f"{rule_name}{GENERATION_SEPARATOR}{generation}"


def generation_of(storage_name: str) -> tuple[str, int]:
    """``(rule name, generation)`` of a storage name; the inverse of :func:`generation_name`.

    >>> generation_of("delay@3"), generation_of("delay")
    (('delay', 3), ('delay', 1))
    """
    name, separator, number = storage_name.partition(GENERATION_SEPARATOR)
    if separator and number.isdigit() and int(number) >= 2:
        return name, int(number)
    return storage_name, 1


def storage_rules(rules: RuleSet, storage: Mapping[str, str]) -> RuleSet:
    """``rules`` with each rule named in ``storage`` renamed to its storage name (rules not
    named keep theirs): an engine built on the result writes each generation's aggregates under
    its own sort keys and leaderboard partition. The renamed rules skip validation (their names
    hold ``@`` on purpose).

    Raises
    ------
    ValueError
        When a renamed rule is derived or the source of a derived rule (a rebuild of either is
        not supported: the derived rule reads its source's aggregates by rule name).
    """
    renamed: list[Rule] = []
    for r in rules:
        target = storage.get(r.name, r.name)
        if target != r.name and (r.is_derived or rules.derived_from(r.name)):
            raise ValueError(
                f"rule {r.name!r}: a derived rule, or the source of one, has one generation only"
            )
        renamed.append(r if target == r.name else r.model_copy(update={"name": target}))
    return RuleSet(rules=tuple(renamed), layout=rules.layout)


def generations_of(rule_name: str, states: Mapping[str, RuleState]) -> list[RuleState]:
    """Every generation of ``rule_name`` in ``states`` (keyed by storage name), oldest first."""
    family = [s for s in states.values() if generation_of(s.name)[0] == rule_name]
    return sorted(family, key=lambda s: generation_of(s.name)[1])


def live_generation(rule: Rule, states: Mapping[str, RuleState]) -> RuleState | None:
    """The generation of ``rule`` that its definition builds: the newest with its fingerprint
    that is neither ``retired`` nor ``dropping``; ``None`` when there is none (a new rule, or a
    changed definition that no rebuild asked for)."""
    fingerprint = rule_fingerprint(rule)
    live = [
        s
        for s in generations_of(rule.name, states)
        if s.fingerprint == fingerprint and s.status not in ("retired", "dropping")
    ]
    return live[-1] if live else None


def resolved_rules(rules: RuleSet, states: Mapping[str, RuleState]) -> RuleSet:
    """``rules`` named by the storage names of the generations their definitions build
    (:func:`live_generation`; rules without one keep their names): the rule set a backfill or a
    reconcile works on.

    Raises
    ------
    ValueError
        As :func:`storage_rules`.
    """
    storage = {}
    for r in rules:
        state = live_generation(r, states)
        if state is not None:
            storage[r.name] = state.name
    return storage_rules(rules, storage)


def changed_definitions(rules: RuleSet, states: Mapping[str, RuleState]) -> list[str]:
    """Rules the manifest knows whose definition no live generation was built with (changed
    without ``aggregator rebuild``): their stored aggregates mean something else."""
    return [
        r.name
        for r in rules
        if generations_of(r.name, states) and live_generation(r, states) is None
    ]

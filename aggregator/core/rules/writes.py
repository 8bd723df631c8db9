"""What the writers need to know of a rule: :class:`WriteSpec` (:attr:`Rule.write_spec`).

Every coalesced delta (:class:`~aggregator.core.engine.CoalescedDelta`) carries these facts of
its rule, whoever builds it: the engine from a batch of stream records, a backfill from its
scan, reconcile for a repair. They all build it from one spec
(:meth:`~aggregator.core.engine.CoalescedDelta.of`), so the writers see the same facts of a
rule whatever the path.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WriteSpec"]


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """The write facts of one rule.

    Attributes
    ----------
    indexed
        The rule's aggregates carry entries of the leaderboard GSI (``leaderboard: true`` with
        ``leaderboard_store: index``; :attr:`Rule.indexed`). Partials carry none.
    index_partitions
        The rule's ``leaderboard_partitions``
        (:func:`~aggregator.core.layout.leaderboard_partition`).
    write_shards
        How many partials an aggregate has when its writers write partials
        (:attr:`Rule.partial_slots`: 1 without write sharding).
    auto_shards
        ``write_shards: auto``: the writer measures the rule's writes
        (:mod:`aggregator.dynamodb.routing`).
    keeps_count
        The rule's kind keeps a count of items (``mean``): the update also ``ADD``s ``count``.
    per_value
        The rule's kind keeps one item per value (``min``, ``max``, ``distribution``): a value
        item whose count falls to zero gets a TTL (:mod:`aggregator.dynamodb.writer`).
    target_attribute
        For a rule with a ``target``: the attribute of the application's item its sums go to
        (:mod:`aggregator.dynamodb.targets`); ``None`` otherwise. Partials add to their own
        items.
    partitions, key_fields
        The rule's spread (:attr:`Rule.spread`: how many partition key values its aggregates
        spread over) and :attr:`Rule.key_fields`: with an aggregate's sort key they give the
        partition key value it is written under
        (:meth:`~aggregator.core.layout.TableLayout.aggregate_partition`). Partials keep their
        own item collections; their roll-up writes the total under its partition.
    """

    indexed: bool = False
    index_partitions: int = 1
    write_shards: int = 1
    auto_shards: bool = False
    keeps_count: bool = False
    per_value: bool = False
    target_attribute: str | None = None
    partitions: int = 1
    key_fields: int = 1

"""The text form of a batch's coalesced deltas: what the ``window`` mode keeps in the tumbling
window's ``state`` between invocations (:mod:`aggregator.runtime.processor`) and what a backfill
page record carries (:mod:`aggregator.operations.backfill`), both read back by later releases."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from aggregator.core.deltas import PARTIAL_MARK, AggregateRef, BatchDeltas, CoalescedDelta
from aggregator.core.numbers import add
from aggregator.core.rules import Bucket

__all__ = ["decode_batch", "encode_batch"]


def encode_batch(batch: BatchDeltas) -> str:
    """``batch`` as compact JSON text: ``{"v": 1, "first", "last", "deltas": {sk: [...]}}``,
    each coalesced delta a list of its fields (rule, key, display key, leaderboard flag, first
    sequence number, the parts as ``[shard, amount]`` with amounts as strings, the bucket, index
    partitions, write shards, count parts, the per-value flag, the target, the auto flag, and
    the spread and key fields when the spread is above 1).
    Amounts stay exact: they travel as the strings of their ``Decimal``."""
    deltas = {
        sk: [
            d.ref.rule,
            d.ref.key,
            d.ref.display_key,
            int(d.leaderboard),
            d.first_sequence_number,
            [[s, str(a)] for s, a in d.parts],
            _encode_bucket(d.ref.bucket),
            d.index_partitions,
            d.write_shards,
            [[s, str(c)] for s, c in d.count_parts] if d.keeps_count else None,
            int(d.per_value),
            # a target's key values: on a change to the target item (with its attribute) and on
            # a change to one of a target rule's partials (whose roll-up needs them)
            [list(d.ref.target), d.target_attribute] if d.ref.target is not None else None,
            int(d.auto_shards),
            # the spread partition's facts; a delta of a rule that is not spread ends at the
            # auto flag, as before spread partitions
            *([d.partitions, d.key_fields] if d.partitions != 1 else []),
        ]
        for sk, d in batch.deltas.items()
    }
    return json.dumps(
        {
            "v": 1,
            "first": batch.first_sequence_number,
            "last": batch.last_sequence_number,
            "deltas": deltas,
        },
        separators=(",", ":"),
    )


def decode_batch(text: str | None) -> BatchDeltas:
    """The :class:`BatchDeltas` that :func:`encode_batch` wrote (empty for ``None`` or ``""``).
    Texts of earlier releases, whose lists end sooner, decode with the later fields' defaults.

    Raises
    ------
    ValueError, KeyError, TypeError
        When ``text`` is not such a text (``json.JSONDecodeError`` is a ``ValueError``).
    """
    batch = BatchDeltas()
    if not text:
        return batch
    data = json.loads(text)
    batch.first_sequence_number = data.get("first")
    batch.last_sequence_number = data.get("last")
    for sk, (rule, key, display, leaderboard, first, parts, *rest) in data["deltas"].items():
        decoded = [(s, Decimal(a)) for s, a in parts]
        amount = Decimal(0)
        for _, a in decoded:
            amount = add(amount, a)
        bucket = _decode_bucket(rest[0] if rest else None)
        index_partitions, write_shards = (rest[1], rest[2]) if len(rest) >= 3 else (1, 1)
        # states written before kinds had neither count parts nor the per-value flag
        counted = rest[3] if len(rest) >= 4 else None
        count_parts = [(s, Decimal(c)) for s, c in counted or ()]
        count = Decimal(0)
        for _, c in count_parts:
            count = add(count, c)
        # states written before targets end at the per-value flag
        target, target_attribute = rest[5] if len(rest) >= 6 and rest[5] else (None, None)
        batch.deltas[sk] = CoalescedDelta(
            AggregateRef(
                rule,
                key,
                display,
                bucket,
                partial=sk.startswith(PARTIAL_MARK),
                target=None if target is None else tuple(target),
            ),
            amount,
            first,
            decoded,
            bool(leaderboard),
            index_partitions,
            write_shards,
            count=count,
            count_parts=count_parts,
            keeps_count=counted is not None,
            per_value=bool(rest[4]) if len(rest) >= 5 else False,
            target_attribute=target_attribute,
            # states written before write_shards: auto end at the target
            auto_shards=bool(rest[6]) if len(rest) >= 7 else False,
            # states written before spread partitions (or of a rule not spread) end at the flag
            partitions=rest[7] if len(rest) >= 9 else 1,
            key_fields=rest[8] if len(rest) >= 9 else 1,
        )
    return batch


def _encode_bucket(bucket: Bucket | None) -> list[Any] | None:
    if bucket is None:
        return None
    return [bucket.granularity, bucket.start, bucket.text, bucket.expires]


def _decode_bucket(data: list[Any] | None) -> Bucket | None:
    return None if data is None else Bucket(*data)

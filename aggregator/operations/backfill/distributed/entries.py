"""The data a distributed backfill's tasks hand on to each other, and its encoding: amounts per
aggregate (a scan's carry, a join's corrections), item entries (a digest of an item's key and
what it contributes: the scan's S entries, the collector's B entries), and the buckets that
route them to the join and reduce tasks (:mod:`aggregator.operations.backfill.distributed`)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Container, Iterable, Mapping
from decimal import Decimal

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.deltas import NO_AMOUNTS, AggregateRef, Amounts, BatchDeltas, CoalescedDelta
from aggregator.core.numbers import add
from aggregator.core.rules import RuleSet

__all__ = [
    "Contribution",
    "Entry",
    "add_contribution",
    "amounts_batch",
    "decode_amounts",
    "decode_entries",
    "encode_amounts",
    "encode_entries",
    "join_bucket",
    "reduce_bucket",
    "subtract_contribution",
]

Contribution = dict[AggregateRef, Amounts]
"""What an item's state adds to the rules' aggregates: ``{aggregate: (amount, count)}``."""
Entry = tuple[bytes, Contribution]
"""An item entry: the 16-byte digest of the item's key and a contribution."""


def join_bucket(digest: bytes, buckets: int) -> int:
    """The join task of an item (by its key's digest): ``0 .. buckets - 1``."""
    return int.from_bytes(digest[:8], "big") % buckets


def reduce_bucket(ref: AggregateRef, buckets: int) -> int:
    """The reduce task of an aggregate: the CRC-32 of its batch key modulo ``buckets``; every
    amount of one aggregate meets in one task, which applies it under one checkpoint."""
    return zlib.crc32(ref.batch_key.encode("utf-8")) % buckets


def add_contribution(total: Contribution, more: Mapping[AggregateRef, Amounts]) -> None:
    """``total += more``, aggregate by aggregate (in place)."""
    for ref, (amount, count) in more.items():
        have = total.get(ref, NO_AMOUNTS)
        total[ref] = (add(have[0], amount), add(have[1], count))


def subtract_contribution(total: Contribution, less: Mapping[AggregateRef, Amounts]) -> None:
    """``total -= less``, aggregate by aggregate (in place)."""
    add_contribution(total, {ref: (-a, -c) for ref, (a, c) in less.items()})


def amounts_batch(
    rules: RuleSet, amounts: Mapping[AggregateRef, Amounts], sequence: int
) -> BatchDeltas:
    """``amounts`` as a batch of coalesced deltas whose every sequence number is ``sequence``
    (what the exactly-once writer applies under a pseudo-shard's checkpoint)."""
    seq = str(sequence)
    batch = BatchDeltas(first_sequence_number=seq, last_sequence_number=seq)
    for ref, (amount, count) in amounts.items():
        batch.deltas[ref.batch_key] = CoalescedDelta.of(
            rules.get(ref.rule).write_spec,
            ref,
            amount,
            seq,
            [(seq, amount)],
            count=count,
            count_parts=[(seq, count)],
        )
    return batch


def encode_amounts(rules: RuleSet, amounts: Mapping[AggregateRef, Amounts]) -> bytes:
    """zlib-compressed :func:`~aggregator.core.batch_state.encode_batch` text of ``amounts``."""
    return zlib.compress(encode_batch(amounts_batch(rules, amounts, 0)).encode("utf-8"))


def decode_amounts(data: bytes) -> Contribution:
    """The amounts :func:`encode_amounts` wrote.

    Raises
    ------
    ValueError, KeyError, TypeError, zlib.error
        When ``data`` is not such a text.
    """
    batch = decode_batch(zlib.decompress(data).decode("utf-8"))
    return {d.ref: (d.amount, d.count) for d in batch.deltas.values()}


def encode_entries(rules: RuleSet, entries: Iterable[Entry]) -> bytes:
    """Item entries, in order, as zlib-compressed JSON: ``{"refs": <encode_batch text of every
    aggregate named>, "items": [[digest hex, [[ref index, amount, count], ...]], ...]}``
    (amounts as the strings of their ``Decimal``: exact)."""
    index: dict[AggregateRef, int] = {}
    items = []
    for digest, contribution in entries:
        parts = []
        for ref, (amount, count) in contribution.items():
            at = index.setdefault(ref, len(index))
            parts.append([at, str(amount), str(count)])
        items.append([digest.hex(), parts])
    refs = encode_batch(amounts_batch(rules, dict.fromkeys(index, NO_AMOUNTS), 0))
    text = json.dumps({"refs": refs, "items": items}, separators=(",", ":"))
    return zlib.compress(text.encode("utf-8"))


def decode_entries(data: bytes, wanted: Container[bytes] | None = None) -> list[Entry]:
    """The entries :func:`encode_entries` wrote, in order; with ``wanted``, only those whose
    digest is in it (the others are skipped before their amounts are decoded: a join reads many
    entries and keeps few).

    Raises
    ------
    ValueError, KeyError, TypeError, zlib.error
        When ``data`` is not such a text.
    """
    decoded = json.loads(zlib.decompress(data).decode("utf-8"))
    refs: list[AggregateRef] | None = None
    out: list[Entry] = []
    for digest_hex, parts in decoded["items"]:
        digest = bytes.fromhex(digest_hex)
        if wanted is not None and digest not in wanted:
            continue
        if refs is None:
            refs = [d.ref for d in decode_batch(decoded["refs"]).deltas.values()]
        out.append(
            (digest, {refs[at]: (Decimal(amount), Decimal(count)) for at, amount, count in parts})
        )
    return out

"""Rule lifecycle (pure): fingerprints, when fences apply, and the engine honouring them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.core.engine import Engine
from aggregator.core.lifecycle import (
    FENCE_RETENTION_SECONDS,
    Fence,
    RuleState,
    fence_before,
    rule_fingerprint,
)
from aggregator.core.records import StreamRecord, pad_sequence_number
from aggregator.core.rules import RuleSet, rule
from tests.factories import stream_record

BASE = {"name": "r", "match": {"kind": "x"}, "key": "{owner}", "delta": 1}


@pytest.mark.parametrize(
    "change",
    [
        {"name": "other"},
        {"description": "described"},
        {"leaderboard": True},
    ],
)
def test_fingerprint_ignores_what_changes_no_value(change):
    assert rule_fingerprint(rule(**{**BASE, **change})) == rule_fingerprint(rule(**BASE))


@pytest.mark.parametrize(
    "change",
    [
        {"match": {"kind": {"prefix": "x"}}},  # another operator, same operand
        {"match": {"kind": "y"}},
        {"key": "{kind}"},
        {"delta": 2},
        {"delta": {"attribute": "points"}},
        {"ttl_deletes": "retract"},
        {"window": {"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]}},
    ],
)
def test_fingerprint_changes_with_what_the_aggregates_mean(change):
    assert rule_fingerprint(rule(**{**BASE, **change})) != rule_fingerprint(rule(**BASE))


def test_fingerprint_of_a_derived_rule_names_its_source():
    a = rule("h", source="s1", key="{value}")
    b = rule("h", source="s2", key="{value}")
    assert rule_fingerprint(a) != rule_fingerprint(b)


def test_fences_apply_until_the_retention_after_activation():
    pending = RuleState("r", "f", "pending", 100)
    assert pending.fenced(10**12)
    active = RuleState("r", "f", "active", 100, "b1", active_since=1_000)
    assert active.fenced(1_000 + FENCE_RETENTION_SECONDS - 1)
    assert not active.fenced(1_000 + FENCE_RETENTION_SECONDS)


def test_fence_before_gives_the_record_to_the_handler():
    after = fence_before("000120")
    assert after == pad_sequence_number("119")
    fence = Fence("r", "s", after, "handler")
    assert fence.covers("120") and fence.covers("121") and not fence.covers("119")


def test_engine_skips_records_up_to_a_rules_fence_only_for_that_rule():
    rules = RuleSet.of(rule("a", key="A"), rule("b", key="B"))
    engine = Engine(rules)
    records = [
        StreamRecord(stream_record("INSERT", None, {"pk": f"p{i}", "sk": "x"}, seq=seq))
        for i, seq in enumerate((100, 200, 300))
    ]
    batch = engine.process(records, fences={"a": pad_sequence_number("200")})
    # a counts only the record after its fence; b, unfenced, counts all three
    assert batch.deltas["a#A"].amount == Decimal(1)
    assert [(int(s), a) for s, a in batch.deltas["a#A"].parts] == [(300, Decimal(1))]
    assert batch.deltas["b#B"].amount == Decimal(3)
    assert batch.fenced == 2

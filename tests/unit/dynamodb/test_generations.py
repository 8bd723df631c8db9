"""Rule generations, the pure part (storage names, which generation a definition builds) and
the readers' use of the serving pointer (against a stub client)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.core.lifecycle import (
    RuleState,
    changed_definitions,
    generation_name,
    generation_of,
    live_generation,
    resolved_rules,
    rule_fingerprint,
    storage_rules,
)
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.query import AggregateStore
from tests.factories import AggregatesStub

V1 = rule("delay", key="{carrier}")
V2 = rule("delay", key="{carrier}", delta={"attribute": "minutes"})
V3 = rule("delay", key="{carrier}", delta=2)


def state(name, r, status="active"):
    return RuleState(name, rule_fingerprint(r), status, 0)


@pytest.mark.parametrize("name", ["a", "delay_by.carrier-2", "x" * 100])
@pytest.mark.parametrize("generation", [1, 2, 17])
def test_storage_names_round_trip(name, generation):
    stored = generation_name(name, generation)
    assert generation_of(stored) == (name, generation)
    assert (stored == name) == (generation == 1)


def test_generation_numbers_start_at_one():
    with pytest.raises(ValueError):
        generation_name("a", 0)


def test_a_definition_resolves_to_the_newest_live_generation_with_its_fingerprint():
    states = {
        "delay": state("delay", V1, "retired"),
        "delay@2": state("delay@2", V2),
        "delay@3": state("delay@3", V3, "requested"),
    }
    assert live_generation(V1, states) is None  # only a retired generation has it
    assert live_generation(V2, states).name == "delay@2"
    assert live_generation(V3, states).name == "delay@3"
    assert changed_definitions(RuleSet.of(V1), states) == ["delay"]
    assert changed_definitions(RuleSet.of(V2), states) == []
    assert changed_definitions(RuleSet.of(rule("new", key="X")), states) == []
    resolved = resolved_rules(RuleSet.of(V2, rule("other", key="X")), states)
    assert [r.name for r in resolved] == ["delay@2", "other"]
    assert resolved.get("delay@2").delta == V2.delta


def test_derived_rules_and_their_sources_have_one_generation():
    hist = rule("hist", source="delay", key="{value}")
    rules = RuleSet.of(V1, hist)
    with pytest.raises(ValueError, match="one generation only"):
        storage_rules(rules, {"delay": "delay@2"})
    with pytest.raises(ValueError, match="one generation only"):
        storage_rules(rules, {"hist": "hist@2"})


def test_readers_follow_the_serving_generation_read_once_per_cache_period():
    rules = RuleSet.of(rule("total", key="ALL", leaderboard=False))
    items = {
        "manifest": {"generations": {"M": {"total": {"N": "2"}}}},
        "total#ALL": {"value": {"N": "5"}},
        "total@2#ALL": {"value": {"N": "7"}},
    }
    client = AggregatesStub(items)
    store = AggregateStore(client, "t", rules)
    assert store.get("total").value == Decimal(7)
    assert [a.value for a in store.list("total")] == [Decimal(7)]
    assert store.get("total").key == "ALL"
    assert (client.manifest_reads, store.manifest_reads, store.requests) == (1, 1, 3)
    # an explicit generation map reads no manifest
    fixed = AggregateStore(client, "t", rules, generations={})
    assert fixed.get("total").value == Decimal(5)
    assert fixed.manifest_reads == 0
    # with no cache every call reads the pointer again
    fresh = AggregateStore(client, "t", rules, generation_cache_seconds=-1)
    fresh.get("total")
    fresh.get("total")
    assert fresh.manifest_reads == 2


def test_the_first_question_about_a_rule_is_answered_from_the_manifest_it_reads():
    """The serving generation's state comes from the same read as its name, even on the first
    call (a store that has not read the manifest yet), parsed by the manifest's own parser."""
    rules = RuleSet.of(V1)  # no leaderboard
    entry = {
        "M": {
            "fingerprint": {"S": rule_fingerprint(V2)},
            "status": {"S": "pending"},
            "registered_at": {"N": "0"},
            "leaderboard": {"BOOL": True},
        }
    }
    items = {"manifest": {"rules": {"M": {"delay": entry}}}}
    assert AggregateStore(AggregatesStub(items), "t", rules).serving_status("delay") == "pending"
    assert AggregateStore(AggregatesStub(items), "t", rules).deployed("delay") is True
    assert AggregateStore(AggregatesStub(items), "t", rules).deployed("other") is False
    assert AggregateStore(AggregatesStub({}), "t", rules).deployed("delay") is None
    # V1 has no leaderboard where the stored generation was indexed: not complete
    assert AggregateStore(AggregatesStub(items), "t", rules).index_complete("delay") is False
    # built from V2, read with V1
    assert AggregateStore(AggregatesStub(items), "t", rules).definition_changed("delay") is True
    same = RuleSet.of(V2)
    assert AggregateStore(AggregatesStub(items), "t", same).definition_changed("delay") is False
    store = AggregateStore(AggregatesStub(items), "t", rules)
    assert store.serving_status("delay") == "pending"
    assert store.manifest_reads == 1

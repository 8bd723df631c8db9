"""A rule's write facts (``Rule.write_spec``) and the one constructor of coalesced deltas that
copies them (``CoalescedDelta.of``), as the engine uses them."""

from __future__ import annotations

from dataclasses import fields
from decimal import Decimal

from aggregator.core.engine import AggregateRef, CoalescedDelta, Engine
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, WriteSpec, rule
from tests.factories import stream_record, write_facts

PATHS = {"sk": {"prefix": "PATH#"}}
TALLY = {"partition_key": "{pk}", "sort_key": "META", "attribute": "pathCount"}


def test_each_rule_states_its_write_facts():
    cases = {
        "plain": (rule("plain", key="K"), WriteSpec()),
        "indexed": (
            rule("indexed", key="{a}", leaderboard=True, leaderboard_partitions=3),
            WriteSpec(indexed=True, index_partitions=3),
        ),
        # a leaderboard kept in top lists has no entries in the index
        "listed": (
            rule("listed", key="{a}", leaderboard=True, leaderboard_store="list"),
            WriteSpec(),
        ),
        "sharded": (rule("sharded", key="K", write_shards=4), WriteSpec(write_shards=4)),
        "auto": (
            rule("auto", key="K", write_shards="auto"),
            WriteSpec(write_shards=64, auto_shards=True),
        ),
        "mean": (
            rule("mean", key="K", delta={"attribute": "d"}, kind="mean"),
            WriteSpec(keeps_count=True),
        ),
        "max": (
            rule("max", key="K", delta={"attribute": "d"}, kind="max"),
            WriteSpec(per_value=True),
        ),
        "target": (
            rule("target", match=PATHS, target=TALLY),
            # "{pk}#META": two fields make the aggregate's home
            WriteSpec(target_attribute="pathCount", key_fields=2),
        ),
        # spread over 8 partition key values; a key of two fields
        "spread": (
            rule("spread", key="{a}#{b}", partitions=8),
            WriteSpec(partitions=8, key_fields=2),
        ),
    }
    assert {name: r.write_spec for name, (r, _) in cases.items()} == {
        name: spec for name, (_, spec) in cases.items()
    }


def test_the_spec_holds_every_write_fact_a_delta_takes_from_its_rule():
    own = {"ref", "amount", "first_sequence_number", "parts", "slot", "count", "count_parts"}
    from_rule = {f.name for f in fields(CoalescedDelta)} - own
    # the delta's name for two of them: its item's index entry and the index's partitions
    renamed = {"leaderboard": "indexed", "index_partitions": "index_partitions"}
    assert {renamed.get(n, n) for n in from_rule} == {f.name for f in fields(WriteSpec)}


def test_a_partial_takes_neither_the_index_entry_nor_the_target_attribute():
    spec = WriteSpec(True, 3, 4, True, True, True, "n")
    whole = AggregateRef("r", "k", "k", target=("P1",))
    parts = [("7", Decimal(2))]
    counted = [("7", Decimal(1))]
    made = {
        partial: CoalescedDelta.of(
            spec,
            AggregateRef("r", "k", "k", partial=partial, target=("P1",)),
            Decimal(2),
            "7",
            parts,
            count=Decimal(1),
            count_parts=counted,
        )
        for partial in (False, True)
    }
    facts = {p: (*write_facts(d), d.count_parts) for p, d in made.items()}
    assert facts == {
        False: (True, 3, 4, True, True, True, "n", counted),
        True: (False, 3, 4, True, True, True, None, counted),
    }
    assert made[False].ref == whole
    # a kind without a count keeps no count parts
    plain = CoalescedDelta.of(WriteSpec(), whole, Decimal(2), "7", parts, count_parts=counted)
    assert (plain.count_parts, plain.keeps_count) == ([], False)


def test_the_engine_builds_its_deltas_from_the_rules_specs():
    rules = RuleSet.of(
        rule("per_owner", match=PATHS, key="{owner}", leaderboard=True, leaderboard_partitions=2),
        rule("total", match=PATHS, key="TOTAL", write_shards="auto"),
        rule("sharded", match=PATHS, key="{owner}", leaderboard=True, write_shards=3),
        rule("mean", match=PATHS, key="{owner}", delta={"attribute": "n"}, kind="mean"),
        rule("max", match=PATHS, key="{owner}", delta={"attribute": "n"}, kind="max"),
        rule("tally", match=PATHS, target=TALLY),
    )
    item = {"pk": "P1", "sk": "PATH#1", "owner": "ann", "n": 5}
    batch = Engine(rules).process([StreamRecord(stream_record("INSERT", None, item, seq=7))])
    facts = {(d.ref.rule, d.ref.partial): write_facts(d) for d in batch.deltas.values()}
    assert facts == {
        ("per_owner", False): (True, 2, 1, False, False, False, None),
        ("total", False): (False, 1, 64, True, False, False, None),  # not hot: the aggregate
        ("sharded", True): (False, 1, 3, False, False, False, None),  # a partial: no index entry
        ("mean", False): (False, 1, 1, False, True, False, None),
        ("max", False): (False, 1, 1, False, False, True, None),  # its value item
        ("tally", False): (False, 1, 1, False, False, False, "pathCount"),
    }

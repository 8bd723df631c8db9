"""The backfill's and reconcile's deltas carry their rule's write facts (``Rule.write_spec``), as
the engine's do: the same facts whatever path writes an aggregate."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from aggregator.core.engine import AggregateRef
from aggregator.core.layout import DEFAULT_LAYOUT, leaderboard_partition
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.updates import resolved
from aggregator.operations.backfill import Backfill
from aggregator.operations.reconcile import _repair
from tests.factories import write_facts

D = Decimal
PATHS = {"sk": {"prefix": "PATH#"}}
RULES = RuleSet.of(
    rule("ranked", match=PATHS, key="{owner}", leaderboard=True, leaderboard_partitions=2),
    rule("total", match=PATHS, key="TOTAL", write_shards="auto"),
    rule("mean", match=PATHS, key="{owner}", delta={"attribute": "n"}, kind="mean"),
    rule("max", match=PATHS, key="{owner}", delta={"attribute": "n"}, kind="max"),
    rule(
        "tally",
        match=PATHS,
        target={"partition_key": "{pk}", "sort_key": "META", "attribute": "pathCount"},
    ),
)


def test_backfill_pages_carry_the_rules_write_facts():
    amounts = {
        AggregateRef("ranked", "ann", "ann"): (D(2), D(0)),
        AggregateRef("total", "TOTAL", "TOTAL"): (D(3), D(0)),
        AggregateRef("mean", "ann", "ann"): (D(9), D(2)),
        AggregateRef("max", "ann#5", "ann"): (D(1), D(0)),
        AggregateRef("tally", "P1#META", "P1#META", target=("P1", "META")): (D(4), D(0)),
    }
    batch = Backfill.batch(SimpleNamespace(rules=RULES), amounts, 12)  # type: ignore[arg-type]
    facts = {d.ref.rule: (*write_facts(d), d.parts, d.count_parts) for d in batch.deltas.values()}
    assert facts == {
        "ranked": (True, 2, 1, False, False, False, None, [("12", D(2))], []),
        "total": (False, 1, 64, True, False, False, None, [("12", D(3))], []),
        "mean": (False, 1, 1, False, True, False, None, [("12", D(9))], [("12", D(2))]),
        "max": (False, 1, 1, False, False, True, None, [("12", D(1))], []),
        "tally": (False, 1, 1, False, False, False, "pathCount", [("12", D(4))], []),
    }


class _Client:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def update_item(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        return {}


def _repaired(name: str, key: str, expected: tuple[Decimal, Decimal]) -> dict[str, Any]:
    client = _Client()
    checker = SimpleNamespace(
        rules=RULES, layout=DEFAULT_LAYOUT, client=client, table_name="t", targets={}
    )
    ref = AggregateRef(name, key, key.partition("#")[0])
    status = _repair(
        checker,
        f"{name}#{key}",
        name,
        ref.display_key,
        ref,
        expected,  # type: ignore[arg-type]
        (D(0), D(0)),
        None,
    )
    assert status == "repaired"
    (request,) = client.requests
    out: dict[str, Any] = resolved(request)
    return out


def test_a_repair_writes_what_the_handler_writes_for_the_rule():
    ranked = _repaired("ranked", "ann", (D(5), D(0)))
    assert ranked["ADD"] == {"value": {"N": "5"}}
    assert ranked["SET"]["lb"] == {"S": leaderboard_partition("ranked", "ranked#ann", 2)}
    mean = _repaired("mean", "ann", (D(9), D(2)))
    assert mean["ADD"] == {"value": {"N": "9"}, "count": {"N": "2"}}
    # a value item repaired back to life loses the TTL an empty count gave it, as on the
    # handler's updates (reconcile left it before the write spec)
    value = _repaired("max", "ann#5", (D(1), D(0)))
    assert (value["ADD"], value["REMOVE"]) == ({"value": {"N": "1"}}, ["ttl"])

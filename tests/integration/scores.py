"""Score items for the leaderboard scenarios (the index's floors, top lists): players, the steps
that write them, the rule that ranks them and its truth, summed from the items themselves."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from aggregator.core.rules import RuleSet, rule
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import StreamProcessor, create_processor
from tests.factories import ddb_json

PLAYERS = [f"p{i}" for i in range(9)]
RULE = "score"

put = st.tuples(st.just("put"), st.integers(0, 11), st.sampled_from(PLAYERS), st.integers(-6, 25))
"""A score item written (a new one, or another player or value for the slot's item)."""
move = st.tuples(st.just("move"), st.integers(0, 11), st.sampled_from(PLAYERS), st.integers(-6, 25))
"""The same write as :data:`put`, as its own strategy object: ``one_of(put, move, ...)`` draws
what the tests drew before this module (``one_of(put, put, ...)`` draws differently)."""
delete = st.tuples(st.just("delete"), st.integers(0, 11), st.just(""), st.just(0))
run = st.tuples(st.just("run"), st.just(0), st.just(""), st.just(0))
"""The stream run to its end, then checked."""


def score_rules(partitions: int, **options: Any) -> RuleSet:
    """The ``score`` leaderboard over ``partitions`` index partitions (``options``: more rule
    fields, such as ``leaderboard_store``)."""
    return RuleSet.of(
        rule(
            RULE,
            match={"kind": "score"},
            key="{player}",
            delta={"attribute": "points"},
            leaderboard=True,
            leaderboard_partitions=partitions,
            **options,
        )
    )


def score_truth(items: list[dict[str, Any]]) -> list[tuple[str, Decimal]]:
    """Each player's sum of points over the score items, non-zero, largest first, ties by key."""
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for item in items:
        if item.get("kind", {}).get("S") == "score":
            sums[item["player"]["S"]] += Decimal(item["points"]["N"])
    return sorted(((k, v) for k, v in sums.items() if v), key=lambda kv: (-kv[1], kv[0]))


def write_step(ddb: Any, table: str, kind: str, slot: int, player: str, points: int) -> bool:
    """Apply a ``put`` (or ``move``) or ``delete`` step to the table; ``False`` for any other
    step (the caller's own)."""
    key = {"pk": f"SCORE#{slot}", "sk": "S"}
    if kind in ("put", "move"):
        item = {**key, "kind": "score", "player": player, "points": points}
        ddb.put_item(TableName=table, Item=ddb_json(item))
    elif kind == "delete":
        ddb.delete_item(TableName=table, Key=ddb_json(key))
    else:
        return False
    return True


def score_scenarios(*steps: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Scenarios of 8 to 40 of ``steps`` (one drawn at a time, uniformly), over 1 or 2 index
    partitions, in the exactly-once or window mode, with a crash every 2 to 4 deliveries."""
    return st.fixed_dictionaries(
        {
            "steps": st.lists(st.one_of(*steps), min_size=8, max_size=40),
            "partitions": st.sampled_from([1, 2]),
            "mode": st.sampled_from(["exactly-once", "window"]),
            "crash_every": st.integers(2, 4),
            "crash_after": st.integers(1, 3),
        }
    )


def faulty_stream(
    ddb: Any, streams: Any, rules: RuleSet, name: str, case: dict[str, Any]
) -> tuple[FaultInjectingClient, StreamProcessor, Callable[[], StreamRunner]]:
    """A fresh table ``name`` for ``rules``, a client that crashes every ``case["crash_every"]``
    deliveries (6 crashes at most) and delivers every other batch twice, the processor of
    ``case["mode"]`` on it, and a function that makes its runner (batches of 4) once the caller
    has tuned the processor."""
    arn = create_table(ddb, name, layout=rules.layout)
    client = FaultInjectingClient(ddb, layout=rules.layout)
    faults = RunnerFaults(client=client)
    every, after = case["crash_every"], case["crash_after"]
    faults.crash = lambda n: after if n % every == 0 and client.crashes < 6 else None
    faults.duplicate = lambda n: n % 2 == 1
    processor = create_processor(rules, client, name, mode=case["mode"])
    return (
        client,
        processor,
        lambda: StreamRunner(processor, streams, arn, batch_size=4, faults=faults),
    )

"""Property: a target rule's ledger holds exactly the deltas that never reached their target
item, when target items are deleted between a batch and its redelivery (issue 35).

Each scenario writes in phases on the reference-count layout (``PK``/``SK``): some posts
(``POST#<n>``/``META``) are created before anything else, may be deleted on the way, and may be
created (again) in any phase, as a new item with no tally, likes (``LIKE#<user>``, counted by
``likes``) and comments (``COMMENT#<n>`` with a ``words`` count, summed by ``words``) are added,
rewritten and taken back. After each phase's writes the stream runner processes everything
(crashing mid-batch, delivering batches twice, bisecting, in the ``exactly-once`` or ``window``
mode), so a record written in a phase reaches its post exactly when the post exists after that
phase's writes. Then, sometimes, the stream is delivered again: from its start, or from where it
stood after an earlier phase (a stale redelivery, which also delivers again the batches that
crashed after writing a post). A final replay from the start ends every scenario. Each post's
``REMOVE`` is processed (by the phase's run) before any redelivery of the records that reached the
post: the case the ledger carries make exact (``aggregator.dynamodb.targets``, "After the delete").

The expected values are computed from the scenario alone: per rule and post, the ledger is the sum
of the deltas of the records written in phases after which the post did not exist (not created yet,
or deleted), and a live post's attribute the sum of the others' written since the phase that
created it last (a re-created post gets none of what its key counted before, in its ledger or on
the old item: the new item's first write of a shard starts from the ledger's checkpoint). Without
the carries, a replay after a delete counted the deleted post's records twice in its ledger.
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import strategies as st

from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet, rule
from aggregator.dev.runner import PositionStore
from aggregator.dynamodb.query import AggregateStore
from tests.integration.harness import article_table, pipeline, run_property, table_items

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("AGGREGATOR_LEDGER_EXAMPLES", "8"))
RULES = RuleSet.of(
    rule(
        "likes",
        match={"SK": {"prefix": "LIKE#"}},
        target={"partition_key": "{PK}", "sort_key": "META", "attribute": "likeTally"},
    ),
    rule(
        "words",
        match={"SK": {"prefix": "COMMENT#"}},
        delta={"attribute": "words"},
        target={"partition_key": "{PK}", "sort_key": "META", "attribute": "wordCount"},
    ),
    layout=TableLayout(partition_key="PK", sort_key="SK"),
)
ATTRIBUTES = {"likes": "likeTally", "words": "wordCount"}
POSTS = ("POST#0", "POST#1", "POST#2")
_names = itertools.count()

post = st.sampled_from(POSTS)
op = st.one_of(
    st.tuples(st.just("delete"), post),
    st.tuples(st.just("create"), post),  # a post never created yet, or deleted: re-created
    st.tuples(st.just("like"), post, st.integers(0, 3)),
    st.tuples(st.just("unlike"), post, st.integers(0, 3)),
    st.tuples(st.just("comment"), post, st.integers(0, 2), st.integers(-2, 9)),
    st.tuples(st.just("uncomment"), post, st.integers(0, 2)),
)
phase = st.fixed_dictionaries(
    {
        "ops": st.lists(op, min_size=1, max_size=10),
        # deliver again after the phase: None, from the start, or from after phase i
        "replay": st.one_of(st.none(), st.just("start"), st.integers(0, 4)),
        "crashes": st.dictionaries(st.integers(1, 6), st.integers(0, 2), max_size=2),
        "duplicates": st.sets(st.integers(1, 6), max_size=2),
    }
)
scenario = st.fixed_dictionaries(
    {
        "created": st.sets(post, min_size=1),  # before anything else; the others never are
        "phases": st.lists(phase, min_size=2, max_size=4),
        "mode": st.sampled_from(["exactly-once", "window"]),
        "batch_size": st.integers(1, 6),
        "bisect": st.booleans(),
    }
)


class Model:
    """The scenario's truth, from its operations alone."""

    def __init__(self) -> None:
        self.created: set[str] = set()
        self.deleted: set[str] = set()
        self.recreated = 0  # posts created after a write to their key, or after their delete
        self.likes: set[tuple[str, int]] = set()
        self.comments: dict[tuple[str, int], int] = {}
        # this phase's deltas, per (rule, post), until the phase's run decides where they go
        self.pending: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        self.ledger: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        self.tally: dict[tuple[str, str], Decimal] = defaultdict(Decimal)

    def live(self, p: str) -> bool:
        return p in self.created and p not in self.deleted

    def apply(self, ddb, table: str, operation: tuple[Any, ...]) -> None:
        kind, p, *rest = operation
        if kind == "create" and not self.live(p):
            # a new item, with no tally: it starts from 0 whatever its key counted before
            ddb.put_item(TableName=table, Item={"PK": {"S": p}, "SK": {"S": "META"}})
            self.recreated += p in self.created or any(k[1] == p for k in self.ledger)
            self.created.add(p)
            self.deleted.discard(p)
            for name in ATTRIBUTES:
                self.tally[name, p] = Decimal(0)
        elif kind == "delete" and self.live(p):
            ddb.delete_item(TableName=table, Key={"PK": {"S": p}, "SK": {"S": "META"}})
            self.deleted.add(p)
        elif kind == "like" and (p, rest[0]) not in self.likes:
            item = {"PK": {"S": p}, "SK": {"S": f"LIKE#{rest[0]}"}}
            ddb.put_item(TableName=table, Item=item)
            self.likes.add((p, rest[0]))
            self.pending["likes", p] += 1
        elif kind == "unlike" and (p, rest[0]) in self.likes:
            key = {"PK": {"S": p}, "SK": {"S": f"LIKE#{rest[0]}"}}
            ddb.delete_item(TableName=table, Key=key)
            self.likes.discard((p, rest[0]))
            self.pending["likes", p] -= 1
        elif kind == "comment":
            number, words = rest
            item = {"PK": {"S": p}, "SK": {"S": f"COMMENT#{number}"}, "words": {"N": str(words)}}
            ddb.put_item(TableName=table, Item=item)  # a new comment, or one rewritten
            self.pending["words", p] += words - self.comments.get((p, number), 0)
            self.comments[p, number] = words
        elif kind == "uncomment" and (p, rest[0]) in self.comments:
            key = {"PK": {"S": p}, "SK": {"S": f"COMMENT#{rest[0]}"}}
            ddb.delete_item(TableName=table, Key=key)
            self.pending["words", p] -= self.comments.pop((p, rest[0]))

    def processed(self) -> None:
        """The phase's run: a record reached its post when the post exists now."""
        for (name, p), amount in self.pending.items():
            (self.tally if self.live(p) else self.ledger)[name, p] += amount
        self.pending.clear()


def run_scenario(ddb, streams, case: dict[str, Any], report: dict[str, int]) -> None:
    name = f"ledger-{os.getpid()}-{next(_names)}"
    arn = article_table(ddb, name)
    assert arn is not None
    positions = PositionStore(ddb, name, RULES.layout)
    try:
        model = Model()
        after: list[dict[str, str | None]] = []  # the shards' positions after each phase
        for p in sorted(case["created"]):
            model.apply(ddb, name, ("create", p))

        def run(crashes=None, duplicates=(), replay: bool = False) -> dict[str, str | None]:
            built = pipeline(
                ddb,
                streams,
                name,
                arn,
                mode=case["mode"],
                batch_size=case["batch_size"],
                window_seconds=1,
                rules=RULES,
                bisect_on_error=case["bisect"],
                crash=lambda n: (crashes or {}).get(n),
                duplicate=lambda n: n in duplicates,
            )
            if replay:  # from the start: nothing read from or saved to the positions
                built.runner.positions_store = None
            stats = built.runner.run()
            assert stats.failures == 0
            report["carries"] += stats.write.ledger_carries
            report["faults"] += stats.function_errors + stats.retries + stats.duplicates
            report["records"] += stats.records
            return built.runner.positions

        for number, current in enumerate(case["phases"]):
            for operation in current["ops"]:
                model.apply(ddb, name, operation)
            after.append(run(current["crashes"], current["duplicates"]))
            model.processed()
            replay = current["replay"]
            if replay == "start":
                run(replay=True)
                report["replays"] += 1
            elif replay is not None and replay < number:
                # a stale redelivery: the positions go back to where they were after that phase
                for shard_id, sequence_number in after[replay].items():
                    if sequence_number is not None:
                        positions.save(arn, shard_id, sequence_number, None, {})
                run()
                report["replays"] += 1
        run(replay=True)
        report["replays"] += 1

        items = table_items(ddb, name)
        store = AggregateStore(ddb, name, RULES)
        ledger = {
            (r, a.key.removesuffix("#META")): a.value
            for r in ATTRIBUTES
            for a in store.list(r)
            if a.value
        }
        expected_ledger = {k: v for k, v in model.ledger.items() if v}
        metas = {i["PK"]["S"]: i for i in items if i["SK"]["S"] == "META"}
        found = {
            (r, p): Decimal(meta.get(attribute, {"N": "0"})["N"])
            for p, meta in metas.items()
            for r, attribute in ATTRIBUTES.items()
        }
        expected_tallies = {
            (r, p): model.tally[r, p] for p in POSTS if model.live(p) for r in ATTRIBUTES
        }
        report["scenarios"] += 1
        report["ledger_keys"] += len(expected_ledger)
        report["deleted_posts"] += len(model.deleted)
        report["recreated_posts"] += model.recreated
        if ledger != expected_ledger or found != expected_tallies:
            report["drift"] += 1
        assert ledger == expected_ledger
        assert found == expected_tallies  # deleted posts never re-created by the writer
    finally:
        ddb.delete_table(TableName=name)


def test_the_ledger_holds_what_never_reached_deleted_targets_under_redelivery(dynamodb_local):
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    keys = ("scenarios", "drift", "records", "faults", "replays", "carries", "ledger_keys")
    report = dict.fromkeys((*keys, "deleted_posts", "recreated_posts"), 0)
    run_property(
        scenario,
        EXAMPLES,
        lambda case: run_scenario(ddb, streams, case, report),
        report,
        lambda r: (
            f"ledger property: {r['scenarios']} scenarios, {r['records']} stream records, "
            f"{r['faults']} injected faults and retries, {r['replays']} redeliveries, "
            f"{r['deleted_posts']} deleted posts, {r['recreated_posts']} posts created after "
            f"their ledger or their delete, {r['carries']} ledger carries, "
            f"{r['ledger_keys']} ledger keys, drift in {r['drift']} scenarios"
        ),
        "ledger.json",
    )
    # the scenarios reached the path under test
    assert report["carries"] > 0 and report["replays"] > report["scenarios"]
    assert report["recreated_posts"] > 0

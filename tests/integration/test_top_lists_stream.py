"""Leaderboards kept in top lists (``leaderboard_store: list``), end to end on DynamoDB Local.

Random scenarios: scores are written, moved up and down (negative points, zero), moved to
another player and deleted, while the handler crashes mid-batch and delivers batches twice; the
lists keep only 3 keys, so their floors rise often and keys leave and come back. The aggregates'
own stream records feed the lists (:mod:`aggregator.core.top_list_merge`). After every run of the
stream, ``top(n)`` for several ``n`` equals a plain sort of sums computed from the score items
themselves (ties by key, keys at zero left out), and no aggregate carries a GSI entry.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest

from aggregator.core.rules import RuleSet
from aggregator.deploy.filters import filter_patterns
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import create_table
from aggregator.dynamodb.top_list_items import TOP_PREFIX
from aggregator.runtime.processor import create_processor
from tests.factories import ddb_json
from tests.integration.harness import SOAK, run_property, table_items
from tests.integration.scores import (
    PLAYERS,
    RULE,
    delete,
    faulty_stream,
    move,
    put,
    run,
    score_rules,
    score_scenarios,
    score_truth,
    write_step,
)

pytestmark = pytest.mark.integration

scenario = score_scenarios(put, move, delete, run)


def _rules(partitions: int) -> RuleSet:
    return score_rules(partitions, leaderboard_store="list")


_truth = score_truth


def test_top_from_lists_is_a_plain_sort_under_faults(ddb, streams) -> None:
    report: dict[str, int] = defaultdict(int)
    counter = iter(range(10_000))

    def run(case: dict[str, Any]) -> None:
        report["scenarios"] += 1
        rules = _rules(case["partitions"])
        name = f"toplists-{next(counter)}"
        client, processor, make_runner = faulty_stream(ddb, streams, rules, name, case)
        assert processor.top_lists is not None
        processor.top_lists.keep = 3
        runner = make_runner()
        store = AggregateStore(ddb, name, rules)

        def check() -> None:
            assert runner.run().failures == 0
            items = table_items(ddb, name)
            assert not any("lb" in item for item in items)  # nothing in the GSI
            lists = [i for i in items if i["sk"]["S"].startswith(TOP_PREFIX)]
            report["floors"] += sum(1 for i in lists if "floor" in i)
            expected = _truth(items)
            for n in (1, 2, 3, 4, 7, 20):
                before = store.top_fallbacks
                got = [(a.key, a.value) for a in store.top(RULE, n)]
                report["proved"] += store.top_fallbacks == before
                if got != expected[:n]:
                    report["drift"] += 1
                assert got == expected[:n], (n, got, expected, lists)
            report["checks"] += 1

        for kind, slot, player, points in case["steps"]:
            if not write_step(ddb, name, kind, slot, player, points):
                check()
        check()
        report["fallbacks"] += store.top_fallbacks
        report["crashes"] += client.crashes
        ddb.delete_table(TableName=name)

    run_property(
        scenario,
        40 if SOAK else 8,
        run,
        report,
        lambda r: (
            f"top lists: {r['scenarios']} scenarios, {r['checks']} checks, {r['proved']} top "
            f"calls answered from the lists, {r['fallbacks']} read every aggregate, "
            f"{r['floors']} lists seen with a floor; drift {r['drift']}"
        ),
        "top_lists.json",
    )
    # the scenarios reached the lists' every path: floors, proofs from the lists, fallbacks
    assert report["floors"] > 0 and report["proved"] > 0 and report["fallbacks"] > 0
    assert report["crashes"] > 0


def test_the_filters_let_the_listed_aggregates_through() -> None:
    patterns = filter_patterns(_rules(1))
    assert patterns[1]["dynamodb"]["Keys"]["sk"] == {
        "S": [{"prefix": "score#"}, {"prefix": "score@"}]
    }


def test_reconcile_finds_a_list_that_lost_a_record_and_repairs_it(ddb, streams) -> None:
    """A list that missed a record (a batch given up after its retries) keeps an old value:
    reconcile reports it, repairs it from the aggregates once, and a list that moves during the
    check is reported as moving, never written."""
    from aggregator.operations.reconcile import reconcile
    from aggregator.operations.top_list_check import check_top_lists

    rules = _rules(1)
    name = "toplists-reconcile"
    arn = create_table(ddb, name, layout=rules.layout)
    runner = StreamRunner(create_processor(rules, ddb, name), streams, arn, batch_size=10)
    for i, points in enumerate([5, 9, -2, 7, 7, 3]):
        item = {"pk": f"SCORE#{i}", "sk": "S", "kind": "score", "player": PLAYERS[i % 4]}
        ddb.put_item(TableName=name, Item=ddb_json(item | {"points": points}))
    assert runner.run().failures == 0
    store = AggregateStore(ddb, name, rules)
    truth = _truth(table_items(ddb, name))
    assert [(a.key, a.value) for a in store.top(RULE, 10)] == truth
    report = reconcile(rules, ddb, name, settle_seconds=0)
    assert report.clean and report.lists_checked == 1 and report.list_drifts == []

    def lose_a_record() -> None:  # the leader's list entry keeps an old value
        ddb.update_item(
            TableName=name,
            Key=rules.layout.item_key(rules.layout.control_pk, f"{TOP_PREFIX}{RULE}"),
            UpdateExpression="SET #t.#k = :v",
            ExpressionAttributeNames={"#t": "top", "#k": truth[0][0]},
            ExpressionAttributeValues={":v": {"N": "1"}},
        )

    lose_a_record()
    assert [(a.key, a.value) for a in store.top(RULE, 10)] != truth  # the list is wrong
    report = reconcile(rules, ddb, name, settle_seconds=0)
    assert not report.clean
    assert [(d.rule, d.partition, d.wrong, d.status) for d in report.list_drifts] == [
        (RULE, RULE, 1, "drift")
    ]
    report = reconcile(rules, ddb, name, repair=True, settle_seconds=0)
    assert report.clean and [d.status for d in report.list_drifts] == ["repaired"]
    assert [(a.key, a.value) for a in store.top(RULE, 10)] == truth
    assert reconcile(rules, ddb, name, settle_seconds=0).list_drifts == []

    # a list that a merge changes between the two checks is moving: not written
    lose_a_record()

    def merge_meanwhile(_seconds: float) -> None:
        item = {"pk": "SCORE#9", "sk": "S", "kind": "score", "player": "p8", "points": 4}
        ddb.put_item(TableName=name, Item=ddb_json(item))
        assert runner.run().failures == 0

    checked, drifts = check_top_lists(
        ddb, name, rules, [RULE], repair=True, settle_seconds=0, sleep=merge_meanwhile
    )
    assert checked == 1 and [d.status for d in drifts] == ["moving"]
    ddb.delete_table(TableName=name)


def test_a_backfill_leaves_the_lists_exact_before_the_handler_merges_its_writes(
    ddb, streams
) -> None:
    """A backfill writes a new rule's aggregates; the handler would merge their records into
    the lists a moment later (a local run perhaps much later). The backfill writes the lists
    from the aggregates at its end, so top is exact as soon as the rule is active; the records
    merged later change nothing."""
    from aggregator.dynamodb.table import table_definition, table_stream_arn
    from aggregator.dynamodb.tablecheck import prepare_table
    from aggregator.operations.backfill import Backfill

    rules = _rules(2)
    name = "toplists-backfill"
    # items written before the table had a stream, so before any rule: the backfill's
    definition = table_definition(rules.layout)
    definition.pop("StreamSpecification", None)
    ddb.create_table(TableName=name, **definition)
    ddb.get_waiter("table_exists").wait(TableName=name)
    for i in range(40):
        item = {"pk": f"SCORE#{i}", "sk": "S", "kind": "score", "player": PLAYERS[i % 9]}
        ddb.put_item(TableName=name, Item=ddb_json(item | {"points": (i * 7) % 23 - 5}))
    prepare_table(ddb, name, rules, poll_seconds=0.1)  # enables the stream
    arn = table_stream_arn(ddb, name)
    processor = create_processor(rules, ddb, name, lifecycle=True)
    assert processor.top_lists is not None
    processor.top_lists.keep = 3  # floors in the lists written by the backfill as well
    runner = StreamRunner(processor, streams, arn, batch_size=10)
    assert runner.run().failures == 0  # registers the rule, pending; nothing to count yet
    assert not [i for i in table_items(ddb, name) if i["sk"]["S"].startswith(TOP_PREFIX)]
    stats = Backfill(
        rules, TableStream(ddb, streams, name, arn), segments=2, stream_lag_seconds=0
    ).run()
    assert stats.write.items_written > 0
    assert stats.top_lists_written == 2 and stats.top_lists_unsettled == 0
    store = AggregateStore(ddb, name, rules)
    truth = _truth(table_items(ddb, name))
    for n in (1, 3, 20):
        assert [(a.key, a.value) for a in store.top(RULE, n)] == truth[:n]
    assert runner.run().failures == 0  # the handler merges the backfill's records: no change
    assert [(a.key, a.value) for a in store.top(RULE, 20)] == truth
    ddb.delete_table(TableName=name)


MOVING_RULE = """version: 1
rules:
  - name: score
    match: {{kind: score}}
    key: "{{player}}"
    delta: {{attribute: points}}
    leaderboard: true
{store}"""


def test_moving_a_ranking_from_the_index_to_top_lists_is_a_rebuild(
    ddb, dynamodb_local, tmp_path
) -> None:
    """The commands, as a user runs them: a rule ranked in the index moves to top lists. The
    handler refuses the new definition, naming the store; the rebuild builds a generation with
    lists, and top is exact once readers are switched, before any further run merges the
    rebuild's records."""
    from click.testing import CliRunner

    from aggregator.cli import main
    from aggregator.core.rules import load_rules

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(MOVING_RULE.format(store=""))
    name = "toplists-moving"
    create_table(ddb, name, layout=load_rules(rules_file).layout)
    for i in range(60):
        item = {"pk": f"SCORE#{i}", "sk": "S", "kind": "score", "player": f"p{i % 17}"}
        ddb.put_item(TableName=name, Item=ddb_json(item | {"points": (i * 5) % 19 - 4}))
    cli = CliRunner()
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
    common += ["-d", str(rules_file)]

    def ok(*args: str) -> str:
        result = cli.invoke(main, [*args, *common])
        assert result.exit_code == 0, result.output + result.stderr
        return " ".join(result.output.split())

    ok("run")
    truth = _truth(table_items(ddb, name))
    rules_file.write_text(MOVING_RULE.format(store="    leaderboard_store: list\n"))
    refused = cli.invoke(main, ["run", *common])
    assert refused.exit_code == 1 and "Traceback" not in refused.stderr
    assert "only where the ranking is kept changed (leaderboard_store)" in refused.stderr
    assert "requested; no handler" in ok("rebuild", RULE, "--wait", "0")
    ok("run")  # the handler takes the new generation up
    out = ok("rebuild", RULE, "--stream-lag", "0")
    assert "readers switched from generation 1 (score) to generation 2 (score@2)" in out
    assert "top lists: 1 written from the aggregates" in out
    result = cli.invoke(main, ["query", "top", RULE, "-n", "20", "--json", *common])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)["aggregates"]
    assert [(a["key"], Decimal(a["value"])) for a in listed] == truth[:20]
    ddb.delete_table(TableName=name)

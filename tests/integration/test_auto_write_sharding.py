"""``write_shards: auto`` on DynamoDB Local: a batch delivered again after its shard switched
makes the choice its first delivery made; a first batch that shows a rule hot writes no
aggregate; the routing item is read before anything is evaluated."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from aggregator.core.routing import next_switch_seconds
from aggregator.core.rules import RuleSet, rule
from aggregator.operations.status import AutoRouting, _auto_routing, table_status
from aggregator.runtime.processor import create_processor
from tests.factories import stream_record
from tests.fakes import Clock

pytestmark = pytest.mark.integration

RULES = RuleSet.of(
    rule("total", match={"sk": {"prefix": "PATH#"}}, key="TOTAL", write_shards="auto")
)
SHARD = "shardId-00000001700000000000-00000001"
START = 1_700_000_000


def event(numbers: range, created: int) -> dict[str, Any]:
    return {
        "Records": [
            stream_record(
                "INSERT", None, {"pk": f"P{n}", "sk": f"PATH#{n}"}, seq=n, created=created
            )
            for n in numbers
        ],
        "shardId": SHARD,
        "window": {"start": "2023-11-14T22:13:00Z", "end": "2023-11-14T22:14:00Z"},
        "state": {},
        "isFinalInvokeForWindow": False,
        "isWindowTerminatedEarly": False,
    }


def values(ddb, table: str) -> dict[str, Decimal]:
    """The aggregate's value and each partial's, by sort key (a consistent scan)."""
    found = {}
    for item in ddb.scan(TableName=table, ConsistentRead=True)["Items"]:
        if "value" in item and item["pk"]["S"].startswith("AGGREGATES"):
            found[f"{item['pk']['S']}/{item['sk']['S']}"] = Decimal(item["value"]["N"])
    return found


def test_a_batch_delivered_after_a_switch_makes_its_first_choice_again(ddb, table):
    name, _ = table
    clock = Clock(START + 0.5)
    processor = create_processor(RULES, ddb, name, clock=clock)
    routing = processor.routing
    assert routing is not None
    routing.hot_wcu_per_second = 0.0  # every batch wants the shard hot

    first = event(range(1, 4), START)
    processor.process_event(first)
    switches = routing.read(SHARD)
    assert switches == {"total": [START + 2]}  # decided at START + 0.5: after every record now
    assert values(ddb, name) == {"AGGREGATES/total#TOTAL": Decimal(3)}

    # the same batch again once the switch is in force: its records were created before it
    clock.now = START + 10
    processor.process_event(first)
    assert values(ddb, name) == {"AGGREGATES/total#TOTAL": Decimal(3)}

    # records created after the switch go to the shard's partial
    later = event(range(4, 6), START + 5)
    processor.process_event(later)
    processor.process_event(later)  # and a duplicate of that batch adds nothing either
    found = values(ddb, name)
    assert found.pop("AGGREGATES/total#TOTAL") == 3
    assert list(found.values()) == [Decimal(2)] and all("PARTIAL#" in k for k in found)

    # status reads the routing items: the shard wrote the partials from its first switch to its
    # second (the last batch found it cool again)
    assert routing.read(SHARD) == {"total": [START + 2, START + 12]}
    assert _auto_routing(ddb, name, RULES, now=START + 1) == {"total": AutoRouting(1, 0)}
    assert _auto_routing(ddb, name, RULES, now=START + 5) == {"total": AutoRouting(1, 1)}
    (report,) = table_status(RULES, ddb, name, now=START + 20).rules  # after both switches
    assert report.auto_routing == AutoRouting(shards=1, on_partials=0)
    # only the stream's open shards count when they are known, and never an expired item
    assert _auto_routing(ddb, name, RULES, now=START + 5, open_shards=["another"]) == {}
    assert _auto_routing(ddb, name, RULES, now=START + 5, open_shards=[SHARD]) == {
        "total": AutoRouting(1, 1)
    }
    assert _auto_routing(ddb, name, RULES, now=START + 31 * 24 * 3600) == {}


def test_a_first_batch_that_shows_the_rule_hot_never_writes_the_aggregate(ddb, table):
    name, _ = table
    processor = create_processor(RULES, ddb, name, clock=Clock(START + 0.5))
    assert processor.routing is not None
    processor.routing.start_hot_deltas_per_second = 3
    outcome = processor.process_event(event(range(1, 5), START))  # 4 deltas in one second
    assert processor.routing.read(SHARD) == {"total": [0]}
    (report,) = table_status(RULES, ddb, name, now=START + 1).rules
    assert report.auto_routing == AutoRouting(shards=1, on_partials=1)
    found = values(ddb, name)
    assert "AGGREGATES/total#TOTAL" not in found  # its records roll up from the partial later
    assert list(found.values()) == [Decimal(4)]
    assert outcome.write.modelled_wcu >= 2  # the routing item's creation is counted


def test_without_the_routing_item_nothing_is_evaluated(ddb, table):
    name, _ = table
    processor = create_processor(RULES, ddb, "no-such-table-here", clock=Clock(START))
    with pytest.raises(Exception, match="write sharding switches"):
        processor.process_event(event(range(1, 3), START))
    assert values(ddb, name) == {}


def test_a_batch_of_the_frameworks_own_items_neither_reads_nor_switches(ddb, table):
    name, _ = table
    clock = Clock(START + 0.5)
    processor = create_processor(RULES, ddb, name, clock=clock)
    routing = processor.routing
    assert routing is not None
    routing.start_hot_deltas_per_second = 3
    processor.process_event(event(range(1, 5), START))
    assert routing.read(SHARD) == {"total": [0]}
    reads = routing.reads
    # any batch that decides now switches, whatever it takes the shard's state for
    routing.cool_wcu_per_second = 10**9
    routing.hot_wcu_per_second = -1.0
    clock.now = START + 20
    own = stream_record(
        "MODIFY",
        {"pk": "AGGREGATES", "sk": "total#TOTAL", "value": 1},
        {"pk": "AGGREGATES", "sk": "total#TOTAL", "value": 2},
        seq=9,
        created=START + 19,
    )
    outcome = processor.process_event({**event(range(0), START), "Records": [own]})
    assert (outcome.routing_switches, routing.reads) == (0, reads)
    assert routing.read(SHARD) == {"total": [0]}  # the list is never written over
    # the next batch of the application's items reads and appends to what it read (it cooled)
    routing.start_hot_deltas_per_second = 10**9
    processor.process_event(event(range(10, 12), START + 20))
    assert routing.read(SHARD) == {"total": [0, next_switch_seconds(START + 20)]}


def test_status_and_explain_say_where_an_auto_rule_writes(ddb, table, dynamodb_local, tmp_path):
    from click.testing import CliRunner

    from aggregator.cli import main

    name, _ = table
    processor = create_processor(RULES, ddb, name, clock=Clock(START + 0.5))
    assert processor.routing is not None
    processor.routing.start_hot_deltas_per_second = 3
    processor.process_event(event(range(1, 5), START))  # starts on the partials
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - name: total\n    match: {sk: {prefix: 'PATH#'}}\n    key: TOTAL\n"
        "    write_shards: auto\n"
    )
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url, "-d", str(rules)]
    shown = CliRunner().invoke(main, ["status", *common])
    assert shown.exit_code == 0, shown.output
    # the event's shard is not one of DynamoDB Local's: of the stream's open shards, none has
    # processed a record of the rule
    assert (
        "write_shards auto: total: 0 of 0 open shard(s) write its partials now (no shard has "
        "processed a record of it yet)"
    ) in " ".join(shown.output.split())
    (report,) = table_status(RULES, ddb, name, open_shards=[SHARD], now=START + 1).rules
    assert report.auto_routing == AutoRouting(shards=1, on_partials=1)

    record = tmp_path / "record.json"
    record.write_text(json.dumps(event(range(9, 10), START)["Records"][0]))
    explained = CliRunner().invoke(main, ["explain", "--record", str(record), "-d", str(rules)])
    assert explained.exit_code == 0, explained.output
    assert "write_shards: auto: to one of its partials if the record's shard" in " ".join(
        explained.output.split()
    )

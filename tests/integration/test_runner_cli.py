"""The local runner on DynamoDB Local's stream, and the CLI's run/query commands."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.engine import Engine
from aggregator.core.exceptions import RunnerError
from aggregator.core.rules import RuleSet, load_rules, rule
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.modes import make_writer
from aggregator.dynamodb.query import AggregateStore
from aggregator.runtime.processor import BatchOutcome, StreamProcessor
from tests.factories import ddb_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = RuleSet.of(
    rule("paths", match={"sk": {"prefix": "PATH#"}}, key="TOTAL"),
    rule("per_player", match={"sk": {"prefix": "PATH#"}}, key="{pk}", leaderboard=True),
)


def put_paths(ddb, table_name, players):
    for player, count in players.items():
        for i in range(count):
            ddb.put_item(TableName=table_name, Item=ddb_json({"pk": player, "sk": f"PATH#{i}"}))


class FailOnce:
    """First batch: applies its first two records, then reports a failure at the third."""

    def __init__(self, inner):
        self.inner = inner
        self.batches: list[list[str]] = []
        self.failed = False

    def process_event(self, event):
        records = event["Records"]
        self.batches.append([r["dynamodb"]["SequenceNumber"] for r in records])
        if not self.failed and len(records) >= 3:
            self.failed = True
            seq = records[2]["dynamodb"]["SequenceNumber"]
            # records 0 and 1 are applied, the rest is left for the retry
            head = self.inner.process_event({"Records": records[:2]})
            return BatchOutcome(
                response={"batchItemFailures": [{"itemIdentifier": seq}]}, write=head.write
            )
        return self.inner.process_event(event)


def test_runner_honours_batch_item_failures(ddb, streams, table):
    name, arn = table
    put_paths(ddb, name, {"alice": 3, "bob": 4})
    inner = StreamProcessor(Engine(RULES), make_writer("at-least-once", ddb, name))
    wrapped = FailOnce(inner)
    stats = StreamRunner(wrapped, streams, arn, batch_size=5).run()  # type: ignore[arg-type]
    # the retry started exactly at the reported record (the third of the first batch)
    assert wrapped.batches[1][0] == wrapped.batches[0][2]
    assert stats.retries == 1
    store = AggregateStore(ddb, name, RULES)
    assert store.get("paths").value == Decimal(7)
    assert {a.key: a.value for a in store.list("per_player")} == {"alice": 3, "bob": 4}


def test_runner_gives_up_after_bounded_retries(ddb, streams, table):
    name, arn = table
    put_paths(ddb, name, {"alice": 1})

    class AlwaysFail:
        def process_event(self, event):
            seq = event["Records"][0]["dynamodb"]["SequenceNumber"]
            return BatchOutcome(
                response={"batchItemFailures": [{"itemIdentifier": seq}]}, errors=["boom"]
            )

    runner = StreamRunner(AlwaysFail(), streams, arn, max_retries=2)  # type: ignore[arg-type]
    with pytest.raises(RunnerError, match=r"still failing after 2 retries: boom"):
        runner.run()


def test_cli_run_and_query(dynamodb_local, ddb, table, tmp_path):
    name, _ = table
    put_paths(ddb, name, {"alice": 2, "bob": 5, "carol": 1})
    ddb.delete_item(TableName=name, Key=ddb_json({"pk": "bob", "sk": "PATH#0"}))
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
    defs = ["--definitions", str(ROOT / "definitions" / "cloud_adventure.yaml")]
    cli = CliRunner()

    result = cli.invoke(main, ["run", *common, *defs])
    assert result.exit_code == 0, result.output
    # 8 puts + 1 delete; then the 4 aggregate items' own stream records: the 3 players' are the
    # derived rules' input, which write 4 more (3 histogram buckets and the player count); and
    # the control records: the rule manifest created with the stream's genesis (create_table),
    # its maps and the 4 rules registered (two updates), the shard's fence item created and the
    # rules' fences set (one update), and the 4 rules turned active (one update: the table's
    # stream holds every write, so they need no backfill). Usually in 4 invocations; more when
    # the records' creation times straddle a minute, so that the 60 s tumbling windows (which
    # follow them) cut a batch in two
    said = " ".join(result.output.split())
    found = re.match(
        r"processed 23 stream records in (\d+) invocations \(11 self-writes skipped, 3 source "
        r"aggregates read by derived rules\): 24 deltas -> 8 aggregate updates",
        said,
    )
    assert found and int(found[1]) >= 4, said
    # a second run resumes from the stored positions: nothing new is counted
    result = cli.invoke(main, ["run", *common, *defs])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).startswith(
        "processed 0 stream records in 0 invocations (0 self-writes skipped): 0 deltas"
    )
    # --from-start delivers every record again (the checkpoints make it count nothing twice)
    # and keeps the positions it reaches: the next run continues from them, as --help says
    again = cli.invoke(main, ["run", "--from-start", *common, *defs])
    assert again.exit_code == 0, again.output
    assert re.match(r"processed (2[3-9]|[3-9]\d) stream records", " ".join(again.output.split()))
    after = cli.invoke(main, ["run", *common, *defs])
    assert " ".join(after.output.split()).startswith(
        "processed 0 stream records in 0 invocations (0 self-writes skipped): 0 deltas"
    ), after.output
    helped = " ".join(cli.invoke(main, ["run", "--help"]).output.split())
    assert "the positions it reaches are kept, so the next run continues from them" in helped

    result = cli.invoke(main, ["query", "get", "total_paths_found", *common, *defs])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "total_paths_found TOTAL_PATHS_FOUND: 7"
    # the rules are active without a backfill (the table's stream holds every write): no warning
    assert result.stderr == ""
    # a definition changed without a rebuild: the stored aggregates mean the deployed one
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        (ROOT / "definitions" / "cloud_adventure.yaml")
        .read_text()
        .replace("key: TOTAL_PATHS_FOUND", "key: ALL_PATHS", 1)
    )
    result = cli.invoke(main, ["query", "get", "total_paths_found", *common, "-d", str(changed)])
    # (nothing is stored under the new key ALL_PATHS: exit 1)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(
        "warning: rule 'total_paths_found' was changed since its aggregates were built"
    )

    result = cli.invoke(main, ["query", "top", "paths_per_player", "-n", "2", *common, *defs])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if "│" in line]
    assert [[c.strip() for c in line.split("│")[1:4]] for line in lines] == [
        ["1", "bob", "4"],
        ["2", "alice", "2"],
    ]

    result = cli.invoke(main, ["query", "get", "paths_per_player", "nobody", *common, *defs])
    assert result.exit_code == 1
    assert "no aggregate" in result.output

    result = cli.invoke(main, ["query", "get", "no_such_rule", *common, *defs])
    assert result.exit_code == 1
    assert "no rule named 'no_such_rule'" in result.output


def test_query_keys_round_trip_escaping(ddb, streams, table):
    name, arn = table
    rules = RuleSet.of(rule("route", key="{origin}#{dest}"))
    ddb.put_item(
        TableName=name, Item=ddb_json({"pk": "x", "sk": "1", "origin": "A#1", "dest": "50%"})
    )
    ddb.put_item(
        TableName=name, Item=ddb_json({"pk": "x", "sk": "2", "origin": "A", "dest": "1#50%"})
    )
    StreamRunner(
        StreamProcessor(Engine(rules), make_writer("at-least-once", ddb, name)), streams, arn
    ).run()
    store = AggregateStore(ddb, name, rules)
    # the two items differ only in where '#' sits; their aggregates stay apart
    assert store.get("route", {"origin": "A#1", "dest": "50%"}).value == 1
    assert store.get("route", ["A", "1#50%"]).value == 1
    assert sorted(a.sort_key for a in store.list("route")) == [
        "route#A#1%2350%25",
        "route#A%231#50%25",
    ]


def test_shipped_cloud_adventure_rules_load():
    assert [r.name for r in load_rules(ROOT / "definitions" / "cloud_adventure.yaml")] == [
        "total_paths_found",
        "paths_per_player",
        "players_by_paths_found",
        "total_players",
    ]

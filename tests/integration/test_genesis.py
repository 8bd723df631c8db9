"""Rules start ``active`` when nothing predates them (:mod:`aggregator.core.lifecycle`, "Rules
that need no backfill"), through the CLI on DynamoDB Local: a table ``create-table`` made, a
table whose items were written before its stream, a rule deployed after the first batch, a
stream that is not the one the table was created with, and the stack's own table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.rules import load_rules
from aggregator.dynamodb.manifest import Manifest, RuleLifecycle
from aggregator.dynamodb.table import table_definition
from tests.factories import ddb_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "definitions" / "cloud_adventure.yaml"
PATHS = {"alice": 3, "bob": 5}  # then bob's PATH#0 is deleted: 7 paths, bob 4, alice 3
RULES = ("total_paths_found", "paths_per_player", "players_by_paths_found", "total_players")


def _write_paths(ddb, table: str) -> None:
    for player, count in PATHS.items():
        for i in range(count):
            ddb.put_item(TableName=table, Item=ddb_json({"pk": player, "sk": f"PATH#{i}"}))
    ddb.delete_item(TableName=table, Key=ddb_json({"pk": "bob", "sk": "PATH#0"}))


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _statuses(common: list[str], definitions: Path) -> dict[str, str]:
    code, out, err = _cli("status", *common, "-d", str(definitions), "--json")
    assert code == 0, out + err
    return {r["rule"]: r["generations"][0]["status"] for r in json.loads(out)["rules"]}


def _expected_answers(common: list[str]) -> None:
    """The tour's aggregates, exact (independent of how the rules became complete)."""
    for args, answer in (
        (("total_paths_found",), "total_paths_found TOTAL_PATHS_FOUND: 7"),
        (("paths_per_player", "bob"), "paths_per_player bob: 4"),
        (("paths_per_player", "alice"), "paths_per_player alice: 3"),
        (("total_players",), "total_players TOTAL_PLAYERS: 2"),
    ):
        code, out, err = _cli("query", "get", *args, *common, "-d", str(TOUR))
        assert code == 0, out + err
        assert out.strip() == answer


def test_the_tour_on_a_table_create_table_made_needs_no_backfill(dynamodb_local, ddb):
    # GIVEN a table the framework created, items written before anything ran
    endpoint = ["--endpoint-url", dynamodb_local.endpoint_url]
    code, out, err = _cli("create-table", "--table", "genesis-tour", *endpoint)
    assert code == 0, out + err
    _write_paths(ddb, "genesis-tour")
    common = ["--table", "genesis-tour", *endpoint]
    # WHEN the rules run for the first time
    code, out, err = _cli("run", *common, "-d", str(TOUR))
    assert code == 0, out + err
    # THEN every rule is active, and no answer warns that it is incomplete
    assert _statuses(common, TOUR) == dict.fromkeys(RULES, "active")
    for rule in RULES:
        code, out, err = _cli("query", "get", rule, "x", *common, "-d", str(TOUR))
        assert "pending" not in err
    _expected_answers(common)
    # and a backfill has nothing to do
    code, out, err = _cli("backfill", *common, "-d", str(TOUR), "--stream-lag", "0")
    assert code == 0, out + err
    assert out.startswith("nothing to backfill: every rule is active"), out + err
    _expected_answers(common)


def _table_with_items_before_its_stream(ddb, name: str) -> None:
    """A table created without a stream, written to, then given one (adopting a live table)."""
    definition = {k: v for k, v in table_definition(DEFAULT_LAYOUT).items()}
    stream = definition.pop("StreamSpecification")
    ddb.create_table(TableName=name, **definition)
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})
    _write_paths(ddb, name)
    ddb.update_table(TableName=name, StreamSpecification=stream)


def test_items_from_before_the_stream_keep_the_rules_pending_until_a_backfill(dynamodb_local, ddb):
    _table_with_items_before_its_stream(ddb, "genesis-adopted")
    common = ["--table", "genesis-adopted", "--endpoint-url", dynamodb_local.endpoint_url]
    ddb.put_item(TableName="genesis-adopted", Item=ddb_json({"pk": "carol", "sk": "PATH#0"}))
    code, out, err = _cli("run", *common, "-d", str(TOUR))
    assert code == 0, out + err
    assert _statuses(common, TOUR) == dict.fromkeys(RULES, "pending")
    code, out, err = _cli("query", "get", "total_paths_found", *common, "-d", str(TOUR))
    assert out.strip() == "total_paths_found TOTAL_PATHS_FOUND: 1"  # carol's only
    assert err.startswith("warning: rule 'total_paths_found' is pending")
    code, out, err = _cli("backfill", *common, "-d", str(TOUR), "--stream-lag", "0")
    assert code == 0, out + err
    assert _statuses(common, TOUR) == dict.fromkeys(RULES, "active")
    code, out, err = _cli("query", "get", "total_paths_found", *common, "-d", str(TOUR))
    assert (out.strip(), err) == ("total_paths_found TOTAL_PATHS_FOUND: 8", "")


def test_a_rule_deployed_after_the_first_batch_needs_a_backfill(dynamodb_local, ddb, tmp_path):
    endpoint = ["--endpoint-url", dynamodb_local.endpoint_url]
    assert _cli("create-table", "--table", "genesis-later", *endpoint)[0] == 0
    common = ["--table", "genesis-later", *endpoint]
    first = tmp_path / "first.yaml"
    first.write_text(
        "version: 1\nrules:\n"
        '  - {name: total_paths_found, match: {sk: {prefix: "PATH#"}}, key: TOTAL_PATHS_FOUND}\n'
    )
    later = tmp_path / "later.yaml"
    later.write_text(
        first.read_text()
        + '  - {name: paths_per_player, match: {sk: {prefix: "PATH#"}}, key: "{pk}"}\n'
    )
    _write_paths(ddb, "genesis-later")
    assert _cli("run", *common, "-d", str(first))[0] == 0
    assert _statuses(common, first) == {"total_paths_found": "active"}
    # before anything ran with it, a query says the rule is not deployed (nothing counts it)
    _, out, err = _cli("query", "get", "paths_per_player", "bob", *common, "-d", str(later))
    assert err.startswith("warning: rule 'paths_per_player' is not deployed yet"), err
    # the second rule meets a shard whose first batch it was not part of
    ddb.put_item(TableName="genesis-later", Item=ddb_json({"pk": "carol", "sk": "PATH#0"}))
    assert _cli("run", *common, "-d", str(later))[0] == 0
    assert _statuses(common, later) == {
        "total_paths_found": "active",
        "paths_per_player": "pending",
    }
    _, out, err = _cli("query", "get", "paths_per_player", "bob", *common, "-d", str(later))
    assert err.startswith("warning: rule 'paths_per_player' is pending")
    assert _cli("backfill", *common, "-d", str(later), "--stream-lag", "0")[0] == 0
    assert _statuses(common, later) == dict.fromkeys(
        ["total_paths_found", "paths_per_player"], "active"
    )
    _code, out, err = _cli("query", "get", "paths_per_player", "bob", *common, "-d", str(later))
    assert (out.strip(), err) == ("paths_per_player bob: 4", "")


def test_the_proof_names_its_stream_and_the_stack_records_it(ddb, streams):
    # GIVEN a table created with its stream by someone else (the stack): no genesis yet
    ddb.create_table(TableName="genesis-stack", **table_definition(DEFAULT_LAYOUT))
    ddb.get_waiter("table_exists").wait(TableName="genesis-stack", WaiterConfig={"Delay": 1})
    arn = ddb.describe_table(TableName="genesis-stack")["Table"]["LatestStreamArn"]
    rules = load_rules(TOUR)
    manifest = Manifest(ddb, "genesis-stack", DEFAULT_LAYOUT)
    assert manifest.genesis() is None
    # WHEN the handler starts with the stack's word that it created the table with this stream
    lifecycle = RuleLifecycle(
        rules, ddb, "genesis-stack", streams=lambda: streams, genesis_stream_arn=arn
    )
    # THEN the manifest names that stream, and the new rules are candidates
    genesis = manifest.genesis()
    assert genesis is not None and genesis.set_by == "stack"
    assert lifecycle.candidates() == sorted(RULES)
    # a batch from another stream (one enabled again later: other shards) proves nothing
    other = arn.rsplit("/stream/", 1)[0] + "/stream/2026-01-01T00:00:00.000"
    lifecycle.fences_for("shardId-other-1", "100", list(RULES), stream_arn=other)
    assert {s.status for s in manifest.load().values()} == {"pending"}
    assert lifecycle.candidates() == []
    # on the stream the table was created with, its one shard opened with the rules proves it
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    again = RuleLifecycle(rules, ddb, "genesis-stack", streams=lambda: streams)
    assert again.candidates() == sorted(RULES)
    again.fences_for(shard, "100", list(RULES), stream_arn=arn)
    assert {s.status for s in manifest.load().values()} == {"active"}

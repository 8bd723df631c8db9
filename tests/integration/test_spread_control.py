"""Control items spread over partition key values (``control_partitions``), end to end on
DynamoDB Local: the runner counts a pending rule (fences), a ``write_shards: auto`` rule (routing
items), a ``leaderboard_store: list`` rule (top lists) and an index leaderboard (floors); a
backfill leaves its records; each of them lives under the value its sort key's CRC-32 chooses;
``status`` finds them all, ``query top`` reads one key per list, ``drop-rule`` deletes a rule's
control items wherever they are; and a layout that disagrees with the table's record is refused.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter, defaultdict
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.exceptions import ConfigError, QueryError
from aggregator.core.rules import load_rules
from aggregator.dynamodb.floors import FLOOR_PREFIX, IndexFloors
from aggregator.dynamodb.manifest import MANIFEST_SORT_KEY, Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.routing import ROUTING_PREFIX, SWITCHES_PREFIX
from aggregator.dynamodb.table import create_table
from aggregator.dynamodb.top_list_items import TOP_PREFIX
from tests.factories import ddb_json, stream_record
from tests.integration.harness import table_items, without_genesis

pytestmark = pytest.mark.integration

CONTROL = "AGGREGATOR#CONTROL"
LIKES = '  - {name: likes, match: {sk: {prefix: "LIKE#"}}, key: "{pk}", write_shards: auto}\n'
BOARD = (
    "  - {name: board, match: {kind: score}, key: '{player}', delta: {attribute: points},\n"
    "     leaderboard: true, leaderboard_store: list, leaderboard_partitions: 8}\n"
)
RANKED = (
    "  - {name: ranked, match: {kind: score}, key: '{player}', delta: {attribute: points},\n"
    "     leaderboard: true, leaderboard_partitions: 4}\n"
)
PLAYERS = [f"p{n:02d}" for n in range(24)]


def _rules(directory: Path, control_partitions: int, *rules: str) -> Path:
    directory.mkdir()
    table = f"table: {{control_partitions: {control_partitions}}}\n"
    (directory / "rules.yaml").write_text("version: 1\n" + table + "rules:\n" + "".join(rules))
    return directory


def _control_items(ddb, table: str) -> list[dict[str, Any]]:
    return [i for i in table_items(ddb, table) if i["pk"]["S"].startswith(CONTROL)]


def _kind(sort_key: str) -> str:
    for prefix in ("fence#", ROUTING_PREFIX, TOP_PREFIX, FLOOR_PREFIX, "backfill#"):
        if sort_key.startswith(prefix):
            return prefix
    return sort_key


def _truth(ddb, table: str) -> list[tuple[str, Decimal]]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for item in table_items(ddb, table):
        if item.get("kind", {}).get("S") == "score":
            sums[item["player"]["S"]] += Decimal(item["points"]["N"])
    return sorted(((k, v) for k, v in sums.items() if v), key=lambda kv: (-kv[1], kv[0]))


def test_control_items_spread_and_every_operation_finds_them(ddb, dynamodb_local, tmp_path):
    table = "spread-control"
    rules_dir = _rules(tmp_path / "rules", 4, LIKES, BOARD, RANKED)
    rules = load_rules(rules_dir)
    create_table(ddb, table, layout=rules.layout)
    without_genesis(ddb, table, rules.layout)  # a table with older items: rules stay pending
    for n, player in enumerate(PLAYERS):
        score = {"pk": f"SCORE#{n}", "sk": "S", "kind": "score", "player": player}
        ddb.put_item(TableName=table, Item=ddb_json(score | {"points": 3 * n % 17 + 1}))
        like = {"pk": f"POST#{n % 5}", "sk": f"LIKE#{n}"}
        ddb.put_item(TableName=table, Item=ddb_json(like))
    common = ["--table", table, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    ran = cli.invoke(main, ["run", *common, "-d", str(rules_dir)])
    assert ran.exit_code == 0, ran.output
    backfill = ["backfill", *common, "-d", str(rules_dir), "--stream-lag", "0"]
    done = cli.invoke(main, backfill)
    assert done.exit_code == 0, done.output
    # the index leaderboard's floors (a writer keeping one key above each partition's floor)
    floors = IndexFloors(ddb, table, rules.layout, keep=1)
    assert sum(floors.raise_floor(f"ranked#{n}") > 0 for n in range(4)) == 4

    # every control item but the manifest is under the value its sort key's CRC-32 chooses
    items = _control_items(ddb, table)
    manifest = [i for i in items if i["sk"]["S"] == MANIFEST_SORT_KEY]
    assert [i["pk"]["S"] for i in manifest] == [CONTROL]
    assert manifest[0]["control_partitions"] == {"N": "4"}
    others = [i for i in items if i["sk"]["S"] != MANIFEST_SORT_KEY]
    for item in others:
        sort_key = item["sk"]["S"]
        assert item["pk"]["S"] == f"{CONTROL}#{zlib.crc32(sort_key.encode()) % 4}", sort_key
    kinds = Counter(_kind(i["sk"]["S"]) for i in others)
    assert kinds["fence#"] == 1 and kinds[ROUTING_PREFIX] == 1
    assert kinds[TOP_PREFIX] == 8 and kinds[FLOOR_PREFIX] == 4
    assert kinds["backfill#"] >= 3  # its meta, fences marker, segments, pages
    assert len({i["pk"]["S"] for i in others}) == 4  # really spread: every value used

    # status finds the fences, the routing items and a backfill's records in every value
    def status() -> dict[str, dict]:
        result = cli.invoke(main, ["status", *common, "-d", str(rules_dir), "--json"])
        assert result.exit_code == 0, result.output
        return {r["rule"]: r for r in json.loads(result.output)["rules"]}

    # (the shard's routing item names a rule once it switched: as if likes ran hot from the
    # shard's start)
    routing = next(i for i in others if i["sk"]["S"].startswith(ROUTING_PREFIX))
    ddb.update_item(
        TableName=table,
        Key={"pk": routing["pk"], "sk": routing["sk"]},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": f"{SWITCHES_PREFIX}likes"},
        ExpressionAttributeValues={":s": {"L": [{"N": "0"}]}},
    )
    report = status()
    for name in ("likes", "board", "ranked"):
        assert [(g["status"], g["fenced_shards"]) for g in report[name]["generations"]] == [
            ("active", 1)
        ]
    assert report["likes"]["auto_routing"] == {"shards": 1, "on_partials": 1}
    manifest_store = Manifest(ddb, table, rules.layout)
    state = manifest_store.load()["board"]
    assert state.backfill_id is not None
    segments = [i for i in others if i["sk"]["S"].startswith(f"backfill#{state.backfill_id}#")]
    assert len({i["pk"]["S"] for i in segments}) > 1
    manifest_store.set_state(replace(state, status="backfilling"))
    progress = status()["board"]["generations"][0]["backfill"]
    assert progress["segments"] > 0 and progress["segments_done"] == progress["segments"]
    manifest_store.set_state(state)

    # query top: one key per list in one BatchGetItem, exact
    store = AggregateStore(ddb, table, rules)
    assert store.storage_name("board") == "board"  # the manifest read before counting
    sent: list[tuple[str, int]] = []

    def count(params: dict[str, Any], model: Any, **_: Any) -> None:
        keys = sum(len(t["Keys"]) for t in params.get("RequestItems", {}).values())
        sent.append((model.name, keys))

    ddb.meta.events.register("before-parameter-build.dynamodb", count)
    try:
        got = [(a.key, a.value) for a in store.top("board", 5)]
    finally:
        ddb.meta.events.unregister("before-parameter-build.dynamodb", count)
    assert got == _truth(ddb, table)[:5]
    assert sent == [("BatchGetItem", 8)]
    assert store.top_fallbacks == 0

    # drop-rule deletes the dropped rules' top lists and floors in every value
    kept = _rules(tmp_path / "kept", 4, LIKES)
    for name in ("board", "ranked"):
        dropped = cli.invoke(main, ["drop-rule", name, *common, "-d", str(kept), "--yes"])
        assert dropped.exit_code == 0, dropped.output
    left = Counter(_kind(i["sk"]["S"]) for i in _control_items(ddb, table))
    assert left[TOP_PREFIX] == 0 and left[FLOOR_PREFIX] == 0
    assert left["fence#"] == 1 and left[ROUTING_PREFIX] == 1
    fence = next(i for i in _control_items(ddb, table) if i["sk"]["S"].startswith("fence#"))
    assert set(fence["after"]["M"]) == {"likes"}
    ddb.delete_table(TableName=table)


def test_a_layout_that_disagrees_with_the_table_is_refused(ddb, dynamodb_local, tmp_path):
    table = "spread-refused"
    four = _rules(tmp_path / "four", 4, BOARD)
    create_table(ddb, table, layout=load_rules(four).layout)
    common = ["--table", table, "--endpoint-url", dynamodb_local.endpoint_url]
    ddb.put_item(
        TableName=table,
        Item=ddb_json({"pk": "SCORE#1", "sk": "S", "kind": "score", "player": "a", "points": 2}),
    )
    cli = CliRunner()
    assert cli.invoke(main, ["run", *common, "-d", str(four)]).exit_code == 0
    two = _rules(tmp_path / "two", 2, BOARD)
    expected = (
        f"error: table '{table}' keeps its control items (fences, routing items, top lists, "
        "backfill records) under 4 partition key values, but the definitions say "
        "control_partitions: 2; set control_partitions: 4 in their table: section (a table "
        "keeps the number its first rules were registered with), or move the items with the "
        "stream subscription stopped: aggregator move-control-items --subscription-stopped "
        "(docs: Table layout)\n"
    )
    for command in (["run"], ["status"], ["query", "top", "board"]):
        refused = cli.invoke(main, [*command, *common, "-d", str(two)])
        assert (refused.exit_code, refused.stderr) == (1, expected), command
    with pytest.raises(QueryError, match="under 4 partition key values"):
        AggregateStore(ddb, table, load_rules(two)).top("board", 3)
    got = cli.invoke(main, ["query", "top", "board", *common, "-d", str(four)])
    assert got.exit_code == 0 and "│ 1 │ a   │     2 │" in got.stdout, got.output

    # a manifest written before the record (rules listed, no number) means 1
    key = load_rules(four).layout.item_key(CONTROL, MANIFEST_SORT_KEY)
    ddb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE control_partitions")
    refused = cli.invoke(main, ["status", *common, "-d", str(four)])
    assert refused.exit_code == 1
    assert "under 1 partition key value, but the definitions say control_partitions: 4" in (
        refused.stderr
    )
    one = _rules(tmp_path / "one", 1, BOARD)
    assert cli.invoke(main, ["status", *common, "-d", str(one)]).exit_code == 0
    ddb.delete_table(TableName=table)


def _spread_as(items: list[dict[str, Any]], partitions: int) -> None:
    """Every control item but the manifest is where ``partitions`` values put it."""
    for item in items:
        sort_key = item["sk"]["S"]
        if sort_key == MANIFEST_SORT_KEY:
            assert item["pk"]["S"] == CONTROL
            assert item.get("control_partitions") == {"N": str(partitions)}
            assert "control_partitions_moving" not in item
            continue
        n = zlib.crc32(sort_key.encode()) % partitions
        assert item["pk"]["S"] == (CONTROL if partitions == 1 else f"{CONTROL}#{n}"), sort_key


def test_a_table_moves_its_control_items_and_keeps_counting(ddb, dynamodb_local, tmp_path):
    """1 -> 4 through the CLI with rules pending (their fences move), then 4 -> 2 stopped after
    two items and finished by a second run; the handler and a backfill find every item after
    each move, and top stays exact."""
    from aggregator.operations.control_move import move_control_items

    table = "spread-move"
    one, four, two = (_rules(tmp_path / f"d{n}", n, LIKES, BOARD, RANKED) for n in (1, 4, 2))
    create_table(ddb, table, layout=load_rules(one).layout)
    without_genesis(ddb, table)
    common = ["--table", table, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()

    def write(start: int, stop: int) -> None:
        for n in range(start, stop):
            score = {"pk": f"SCORE#{n}", "sk": "S", "kind": "score", "player": PLAYERS[n % 24]}
            ddb.put_item(TableName=table, Item=ddb_json(score | {"points": 5 * n % 13 + 1}))
            ddb.put_item(TableName=table, Item=ddb_json({"pk": f"POST#{n % 3}", "sk": f"LIKE#{n}"}))

    def run(definitions: Path) -> None:
        ran = cli.invoke(main, ["run", *common, "-d", str(definitions)])
        assert ran.exit_code == 0, ran.output

    write(0, 30)
    run(one)
    before = _control_items(ddb, table)
    _spread_as([{**i, "control_partitions": {"N": "1"}} for i in before], 1)
    assert {_kind(i["sk"]["S"]) for i in before} >= {"fence#", TOP_PREFIX}

    move = ["move-control-items", *common, "-d", str(four)]
    refused = cli.invoke(main, move)
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: move-control-items: stop the stream subscription")
    moved = cli.invoke(main, [*move, "--subscription-stopped"])
    assert (moved.exit_code, moved.stdout) == (
        0,
        f"move-control-items {table}: {len(before) - 1} control items moved from 1 to 4 "
        "partition key values; deploy the definitions (control_partitions: 4) and start the "
        "stream subscription again\n",
    )
    after = _control_items(ddb, table)
    _spread_as(after, 4)
    assert sorted(i["sk"]["S"] for i in after) == sorted(i["sk"]["S"] for i in before)
    again = cli.invoke(main, [*move, "--subscription-stopped"])
    assert again.stdout.endswith("already under 4 partition key values; nothing to move\n")
    assert cli.invoke(main, ["run", *common, "-d", str(one)]).exit_code == 1  # the old layout

    # the handler and the backfill find the moved fences and top lists
    write(30, 50)
    run(four)
    backfill = cli.invoke(main, ["backfill", *common, "-d", str(four), "--stream-lag", "0"])
    assert backfill.exit_code == 0, backfill.output
    store = AggregateStore(ddb, table, load_rules(four))
    assert [(a.key, a.value) for a in store.top("board", 6)] == _truth(ddb, table)[:6]
    assert store.top_fallbacks == 0
    _spread_as(_control_items(ddb, table), 4)

    # 4 -> 2, stopped after two items: everyone refuses until a second run finishes it
    class Stop(Exception):
        pass

    def stop_at_two(moved: int) -> None:
        if moved == 2:
            raise Stop

    items = len(_control_items(ddb, table))
    with pytest.raises(Stop):
        move_control_items(load_rules(two), ddb, table, on_moved=stop_at_two)
    for definitions in (four, two):
        refused = cli.invoke(main, ["status", *common, "-d", str(definitions)])
        assert refused.exit_code == 1
        assert "is moving its control items to 2 partition key values" in refused.stderr
    wrong = cli.invoke(
        main, ["move-control-items", *common, "-d", str(four), "--subscription-stopped"]
    )
    assert "finish that move with definitions that say control_partitions: 2" in wrong.stderr
    finish = move_control_items(load_rules(two), ddb, table)
    assert (finish.outcome, finish.source, finish.target) == ("moved", 4, 2)
    assert finish.moved > 0
    assert len(_control_items(ddb, table)) == items  # nothing lost, nothing copied twice
    _spread_as(_control_items(ddb, table), 2)
    write(50, 60)
    run(two)
    store = AggregateStore(ddb, table, load_rules(two))
    assert [(a.key, a.value) for a in store.top("board", 6)] == _truth(ddb, table)[:6]
    ddb.delete_table(TableName=table)


def test_a_move_waits_for_a_running_backfill(ddb, tmp_path):
    from aggregator.operations.control_move import move_control_items

    table = "spread-move-backfilling"
    one = load_rules(_rules(tmp_path / "one", 1, BOARD))
    create_table(ddb, table, layout=one.layout)
    manifest = Manifest(ddb, table, one.layout)
    manifest.register(one)
    state = manifest.load()["board"]
    manifest.set_state(replace(state, status="backfilling", backfill_id="b1"))
    with pytest.raises(ConfigError, match="a backfill of board is running"):
        move_control_items(load_rules(_rules(tmp_path / "four", 4, BOARD)), ddb, table)
    assert manifest.control_partitions() == 1
    ddb.delete_table(TableName=table)


def test_the_handler_refuses_a_layout_the_table_does_not_have(
    ddb, dynamodb_local, monkeypatch, tmp_path
):
    """A Lambda container whose definitions say another number than the table's record fails at
    its first invocation with the one line (Lambda then delivers the batch again: nothing is
    counted, nothing lost), and counts once the definitions agree."""
    from aggregator import handler as handler_module

    table = "spread-handler"
    one = _rules(tmp_path / "one", 1, LIKES)
    four = _rules(tmp_path / "four", 4, LIKES)
    create_table(ddb, table, layout=load_rules(one).layout)  # records 1
    for name, value in (
        ("AGGREGATOR_TABLE_NAME", table),
        ("AGGREGATOR_ENDPOINT_URL", dynamodb_local.endpoint_url),
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AGGREGATOR_MODE", "at-least-once"),
    ):
        monkeypatch.setenv(name, value)
    event = {
        "Records": [
            stream_record("INSERT", None, {"pk": "POST#1", "sk": f"LIKE#{n}"}, seq=n)
            for n in (1, 2)
        ]
    }
    context = type(
        "Context",
        (),
        {
            "function_name": "f",
            "memory_limit_in_mb": 128,
            "invoked_function_arn": "arn",
            "aws_request_id": "r",
        },
    )()
    try:
        monkeypatch.setenv("AGGREGATOR_DEFINITIONS", str(four))
        handler_module.reset()
        with pytest.raises(ConfigError, match="under 1 partition key value, but the definitions"):
            handler_module.handler(event, context)
        monkeypatch.setenv("AGGREGATOR_DEFINITIONS", str(one))
        handler_module.reset()
        assert handler_module.handler(event, context) == {"batchItemFailures": []}
    finally:
        handler_module.reset()
    store = AggregateStore(ddb, table, load_rules(one))
    assert store.get("likes", "POST#1").value == 2
    ddb.delete_table(TableName=table)

"""Your own table: a table created outside the project (plain boto3, keys ``PK``/``SK``, a
stream, no index, no TTL) is checked, prepared, and then runs the Cloud Adventure leaderboard,
with the layout declared in the rules' ``table:`` section; the aggregates are checked against a
model kept here. Also: key schemas the framework refuses, reported by check-table and at the
handler's cold start."""

from __future__ import annotations

import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import load_rules
from aggregator.dynamodb.deadletters import list_dead_letters
from aggregator.dynamodb.query import AggregateStore
from aggregator.handler import HandlerSettings, build_processor
from tests.factories import ddb_json
from tests.integration.harness import pipeline

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# definitions/cloud_adventure.yaml with the keys renamed, plus the table: section
RULES_YAML = (ROOT / "definitions" / "cloud_adventure.yaml").read_text().replace(
    '"{pk}"', '"{PK}"'
).replace("sk: {prefix:", "SK: {prefix:") + (
    "\ntable:\n  partition_key: PK\n  sort_key: SK\n  leaderboard_index: top_scores\n"
)


@pytest.fixture
def definitions(tmp_path: Path) -> Path:
    path = tmp_path / "cloud_adventure.yaml"
    path.write_text(RULES_YAML)
    return path


def own_table(ddb, name: str, *, stream: bool, key_types: tuple[str, str] = ("S", "S")) -> None:
    """What an existing production table looks like: the application's keys, no index."""
    kwargs = {}
    if stream:
        kwargs["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": key_types[0]},
            {"AttributeName": "SK", "AttributeType": key_types[1]},
        ],
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
        **kwargs,
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})


def cli(endpoint: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--endpoint-url", endpoint], env={"COLUMNS": "300"})
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_check_prepare_then_cloud_adventure_on_an_existing_table(
    ddb, streams, dynamodb_local, definitions
):
    name = "game-existing"
    own_table(ddb, name, stream=False)
    # the application's data before the aggregator is attached (before the stream: not counted)
    ddb.put_item(TableName=name, Item=ddb_json({"PK": "PLAYER#old", "SK": "PATH#000"}))
    endpoint = dynamodb_local.endpoint_url
    args = ("--table", name, "-d", str(definitions))

    # check-table reports each missing part with its fix, and fails
    code, output = cli(endpoint, "check-table", *args)
    assert code == 1
    lines = [line for line in output.splitlines() if line.startswith("problem: ")]
    assert [line.split(":")[1].strip() for line in lines] == ["stream", "leaderboard index"]
    assert "StreamViewType=NEW_AND_OLD_IMAGES" in lines[0]
    assert "top_scores" in lines[1]
    # the fixes name the endpoint the check used (here DynamoDB Local)
    assert (
        f"fix: aws dynamodb --endpoint-url {endpoint} update-table --table-name {name}"
        in (lines[0])
    )
    assert (
        f"2 problem(s); `aggregator prepare-table --table {name} -d {definitions} "
        f"--endpoint-url {endpoint}` fixes 2 of them"
    ) in output

    # prepare-table adds them, printing each change; a second run changes nothing
    code, output = cli(endpoint, "prepare-table", *args)
    assert code == 0, output
    assert [line for line in output.splitlines() if line.startswith("changed: ")] == [
        "changed: enabled the stream (NEW_AND_OLD_IMAGES)",
        "changed: created index 'top_scores' (lb S, value N, keys only)",
    ]
    code, output = cli(endpoint, "prepare-table", *args)
    assert code == 0 and "nothing to change" in output
    code, output = cli(endpoint, "check-table", *args)
    assert code == 0 and f"table {name} fits the rules" in output

    # the Cloud Adventure scenario on PK/SK: players find paths, lose some, change owner
    rules = load_rules(definitions)
    arn = ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    paths: dict[str, set[str]] = {}

    def add(player: str, path: str) -> None:
        ddb.put_item(TableName=name, Item=ddb_json({"PK": player, "SK": path, "gem": "ruby"}))
        paths.setdefault(player, set()).add(path)

    def remove(player: str, path: str) -> None:
        ddb.delete_item(TableName=name, Key=ddb_json({"PK": player, "SK": path}))
        paths[player].discard(path)

    for player, n in (("PLAYER#ana", 3), ("PLAYER#ben", 1), ("PLAYER#cho", 5)):
        for i in range(n):
            add(player, f"PATH#{player[-3:]}{i}")
    remove("PLAYER#cho", "PATH#cho0")
    remove("PLAYER#ben", "PATH#ben0")
    stats = pipeline(ddb, streams, name, arn, rules=rules, batch_size=4).runner.run()
    assert stats.failures == 0 and stats.write.dead_letters == 0

    counts = {p: len(s) for p, s in paths.items() if s}
    store = AggregateStore(ddb, name, rules)
    assert {a.key: a.value for a in store.list("paths_per_player") if a.value} == {
        p: Decimal(n) for p, n in counts.items()
    }
    assert store.get("total_paths_found").value == sum(counts.values())
    assert store.get("total_players").value == len(counts)
    assert [(r.value, r.count) for r in store.histogram("players_by_paths_found")] == sorted(
        (Decimal(n), Decimal(c)) for n, c in Counter(counts.values()).items()
    )
    # top-N reads the index prepare-table created
    assert [(a.key, a.value) for a in store.top("paths_per_player", 2)] == [
        ("PLAYER#cho", Decimal(4)),
        ("PLAYER#ana", Decimal(3)),
    ]
    # the framework's items live under the reserved partitions, keyed PK/SK
    item = ddb.get_item(
        TableName=name,
        Key=ddb_json({"PK": "AGGREGATES", "SK": "total_paths_found#TOTAL_PATHS_FOUND"}),
    )["Item"]
    assert item["value"] == {"N": "7"}


@pytest.mark.parametrize(
    ("key_types", "message"),
    [(("N", "S"), "'PK' is of type N"), (("S", "B"), "'SK' is of type B")],
)
def test_tables_keyed_by_numbers_or_binaries_are_refused(
    ddb, dynamodb_local, definitions, key_types, message, monkeypatch
):
    name = f"game-{key_types[0]}{key_types[1]}".lower()
    own_table(ddb, name, stream=True, key_types=key_types)
    code, output = cli(
        dynamodb_local.endpoint_url, "check-table", "--table", name, "-d", str(definitions)
    )
    assert code == 1 and message in output
    settings = HandlerSettings(table_name=name, definitions=definitions)
    with pytest.raises(ConfigError, match=message):
        build_processor(settings, client=ddb)


def test_a_layout_naming_other_keys_is_reported_with_the_fix(ddb, dynamodb_local, tmp_path):
    name = "game-pk-names"
    own_table(ddb, name, stream=True)
    defaults = tmp_path / "rules.yaml"  # no table: section, so the layout says pk/sk
    defaults.write_text((ROOT / "definitions" / "cloud_adventure.yaml").read_text())
    code, output = cli(
        dynamodb_local.endpoint_url, "check-table", "--table", name, "-d", str(defaults)
    )
    assert code == 1
    assert "partition key: the table's partition key is 'PK', the layout's is 'pk'" in output
    assert "fix: declare it in the rules: table: {partition_key: PK}" in output
    assert "fix: declare it in the rules: table: {sort_key: SK}" in output


def test_a_local_secondary_index_is_warned_about_not_refused(ddb, dynamodb_local, tmp_path):
    # a table the rules fit, but with a local secondary index: 10 GB item collections
    name = "game-with-lsi"
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "created", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "by_created",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "created", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})
    rules = tmp_path / "rules.yaml"
    rules.write_text("version: 1\nrules:\n  - name: per_player\n    key: '{pk}'\n")
    code, output = cli(
        dynamodb_local.endpoint_url, "check-table", "--table", name, "-d", str(rules)
    )
    assert code == 0
    assert (
        "warning: local secondary index by_created: with one, every item collection is capped "
        "at 10 GB, and the aggregates' collection (under pk = AGGREGATES) grows with the number "
        "of keys"
    ) in output
    assert f"table {name} fits the rules" in output


# Cloud Adventure on a table with only a partition key: one item per path found, keyed
# "PATH#<player>#<n>", the player in an attribute; the derived rules read the source aggregates
# through the stream as on a table with a sort key.
PK_ONLY_RULES = """
version: 1
table: {partition_key: id, sort_key: null}
rules:
  - name: total_paths_found
    match: {id: {prefix: "PATH#"}}
    key: TOTAL_PATHS_FOUND
  - name: paths_per_player
    match: {id: {prefix: "PATH#"}, player: {exists: true}}
    key: "{player}"
    leaderboard: true
  - name: players_by_paths_found
    source: paths_per_player
    key: "{value}"
  - name: total_players
    source: paths_per_player
    key: TOTAL_PLAYERS
  - name: paths_per_hour
    match: {id: {prefix: "PATH#"}}
    key: "{player}"
    delta: {attribute: points}
    window: {time: found_at, unit: epoch_seconds, granularities: [hour], retention: 2d}
"""


def test_check_prepare_then_cloud_adventure_on_a_table_with_only_a_partition_key(
    ddb, streams, dynamodb_local, tmp_path
):
    name = "game-pk-only"
    definitions = tmp_path / "rules.yaml"
    definitions.write_text(PK_ONLY_RULES)
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})
    endpoint = dynamodb_local.endpoint_url
    args = ("--table", name, "-d", str(definitions))

    code, output = cli(endpoint, "check-table", *args)
    assert code == 1
    lines = [line for line in output.splitlines() if line.startswith("problem: ")]
    assert [line.split(":")[1].strip() for line in lines] == [
        "stream",
        "collection index",
        "leaderboard index",
        "ttl",
    ]
    code, output = cli(endpoint, "prepare-table", *args)
    assert code == 0, output
    assert [line for line in output.splitlines() if line.startswith("changed: ")] == [
        "changed: enabled the stream (NEW_AND_OLD_IMAGES)",
        "changed: created index 'aggregator-collections' (aggregator_collection S, id S, "
        "keys only)",
        "changed: created index 'leaderboard' (lb S, value N, keys only)",
        "changed: enabled TTL on 'ttl'",
    ]
    code, output = cli(endpoint, "check-table", *args)
    assert code == 0 and "partition key id (S), index aggregator-collections" in output

    rules = load_rules(definitions)
    arn = ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    now = int(time.time())
    hour = now - now % 3600  # the current hour: buckets kept 2 days are written, not skipped
    found: dict[str, list[tuple[str, int]]] = {}

    def add(player: str, n: int, points: int) -> None:
        key = f"PATH#{player}#{n}"
        item = {"id": key, "player": player, "points": points, "found_at": hour + 60 * n}
        ddb.put_item(TableName=name, Item=ddb_json(item))
        found.setdefault(player, []).append((key, points))

    def remove(player: str, n: int) -> None:
        key = f"PATH#{player}#{n}"
        ddb.delete_item(TableName=name, Key=ddb_json({"id": key}))
        found[player] = [(k, p) for k, p in found[player] if k != key]

    for player, n in (("ana", 3), ("ben", 1), ("cho", 5), ("dee", 2)):
        for i in range(n):
            add(player, i, 10 * (i + 1))
    remove("cho", 0)
    remove("ben", 0)
    # a record paths_per_hour cannot evaluate (points is text): dead-lettered for that rule only
    ddb.put_item(
        TableName=name,
        Item=ddb_json({"id": "PATH#eve#0", "player": "eve", "points": "many", "found_at": hour}),
    )
    found["eve"] = [("PATH#eve#0", 0)]
    stats = pipeline(ddb, streams, name, arn, rules=rules, batch_size=4).runner.run()
    assert stats.failures == 1 and stats.write.dead_letters == 1

    counts = {p: len(paths) for p, paths in found.items() if paths}
    store = AggregateStore(ddb, name, rules)
    assert {a.key: a.value for a in store.list("paths_per_player") if a.value} == {
        p: Decimal(n) for p, n in counts.items()
    }
    assert store.get("total_paths_found").value == sum(counts.values())
    assert store.get("total_players").value == len(counts)
    assert [(r.value, r.count) for r in store.histogram("players_by_paths_found")] == sorted(
        (Decimal(n), Decimal(c)) for n, c in Counter(counts.values()).items()
    )
    assert [(a.key, a.value) for a in store.top("paths_per_player", 2)] == [
        ("cho", Decimal(4)),
        ("ana", Decimal(3)),
    ]
    window = store.window("paths_per_hour", "ana", start=hour, end=hour + 3600, now=now)
    assert window.value == 10 + 20 + 30
    # a key asked in another case is suggested from one page of the keys-only collection index
    before = store.requests
    assert store.suggest_keys("paths_per_player", "ANA").keys == ["ana"]
    assert store.requests - before == 1
    # each framework item has a partition key of its own under the reserved prefix, and the
    # collection attribute the stream filter and the collection index use
    item = ddb.get_item(
        TableName=name, Key=ddb_json({"id": "AGGREGATES#total_paths_found#TOTAL_PATHS_FOUND"})
    )["Item"]
    assert item["value"] == {"N": str(sum(counts.values()))}
    assert item["aggregator_collection"] == {"S": "AGGREGATES"}
    # the CLI reads them the same way
    code, output = cli(endpoint, "query", "top", "paths_per_player", "-n", "2", *args)
    assert code == 0 and "cho" in output and "ana" in output
    code, output = cli(endpoint, "dead-letters", *args)
    # the item is read back through the partition-key-only layout: still bad, so open
    assert code == 0 and "1 dead letter(s): 1 open" in output, output
    (letter,) = list_dead_letters(ddb, name, layout=rules.layout)
    assert (letter.rule, letter.cause, letter.image) == ("paths_per_hour", "wrong-type", "NewImage")
    letters = [
        i
        for i in ddb.scan(TableName=name)["Items"]
        if i["id"]["S"].startswith("AGGREGATOR#DEAD_LETTERS#")
    ]
    assert len(letters) == 1 and letters[0]["aggregator_collection"]["S"] == (
        "AGGREGATOR#DEAD_LETTERS"
    )


def test_prepare_table_leaves_a_table_whose_keys_never_fit_alone(ddb, dynamodb_local, tmp_path):
    name = "keys-never-fit"
    own_table(ddb, name, stream=False)  # PK/SK, where the default layout wants pk/sk
    rules = tmp_path / "r.yaml"
    rules.write_text("version: 1\nrules:\n  - {name: r, key: '{x}', leaderboard: true}\n")
    code, output = cli(
        dynamodb_local.endpoint_url, "prepare-table", "--table", name, "-d", str(rules)
    )
    assert code == 1
    assert "changed: " not in output  # nothing enabled or created
    table = ddb.describe_table(TableName=name)["Table"]
    assert "StreamSpecification" not in table or not table["StreamSpecification"]["StreamEnabled"]
    assert not table.get("GlobalSecondaryIndexes")

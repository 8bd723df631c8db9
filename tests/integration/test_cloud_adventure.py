"""The Cloud Adventure leaderboard (definitions/cloud_adventure.yaml) end to end on DynamoDB Local.

Players add paths, delete paths, and paths change owner (a transaction deleting the item under the
old player and putting it under the new one). After each phase the runner drains the stream, and
every histogram bucket ("how many players found exactly N paths"), the number of active players
and the totals are compared with a model kept here in plain Python (a dict of sets).
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from tests.factories import ddb_json
from tests.integration.harness import delete, pipeline, put

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = load_rules(ROOT / "definitions" / "cloud_adventure.yaml")
PLAYERS = [f"PLAYER#{name}" for name in ("ana", "ben", "cho", "dev", "eli", "fay", "gus")]


class Model:
    """What the aggregates must say: paths per player, as sets."""

    def __init__(self) -> None:
        self.paths: dict[str, set[str]] = {p: set() for p in PLAYERS}

    def expected(self) -> dict[str, object]:
        counts = {p: len(s) for p, s in self.paths.items() if s}
        return {
            "histogram": sorted(
                (Decimal(n), Decimal(c)) for n, c in Counter(counts.values()).items()
            ),
            "players": Decimal(len(counts)),
            "total": Decimal(sum(counts.values())),
            "per_player": {p: Decimal(n) for p, n in counts.items()},
        }


def observed(store: AggregateStore) -> dict[str, object]:
    players = store.get("total_players", "TOTAL_PLAYERS")
    total = store.get("total_paths_found")
    return {
        "histogram": [(row.value, row.count) for row in store.histogram("players_by_paths_found")],
        "players": Decimal(0) if players is None else players.value,
        "total": Decimal(0) if total is None else total.value,
        "per_player": {a.key: a.value for a in store.list("paths_per_player") if a.value != 0},
    }


def drain(ddb, streams, name, arn, mode, faults: bool) -> None:
    options = {}
    if faults:
        options = {"duplicate": lambda n: n % 3 == 0, "crash": lambda n: 2 if n % 5 == 0 else None}
    p = pipeline(ddb, streams, name, arn, mode=mode, batch_size=7, rules=RULES, **options)
    stats = p.runner.run()
    assert stats.failures == 0
    if faults:
        assert stats.duplicates > 0


MODES = [
    ("exactly-once", False),
    ("window", False),
    ("at-least-once", False),
    ("exactly-once", True),
]


@pytest.mark.parametrize(
    ("mode", "faults"), MODES, ids=[m + ("-faults" if f else "") for m, f in MODES]
)
def test_histogram_and_player_count_follow_adds_deletes_and_owner_changes(
    ddb, streams, table, mode, faults
):
    name, arn = table
    store = AggregateStore(ddb, name, RULES)
    model = Model()
    rng = random.Random(42)
    phases = []

    # phase 1: players find paths (1..6 each; gus none)
    next_path = 0
    for player, n in zip(PLAYERS, [3, 1, 3, 2, 6, 1, 0], strict=True):
        for _ in range(n):
            path = f"PATH#{next_path:03d}"
            next_path += 1
            put(ddb, name, {"pk": player, "sk": path, "gem": "ruby"})
            model.paths[player].add(path)
    phases.append("add")
    drain(ddb, streams, name, arn, mode, faults)
    assert observed(store) == model.expected()
    assert model.expected()["histogram"] == [
        (Decimal(1), Decimal(2)),
        (Decimal(2), Decimal(1)),
        (Decimal(3), Decimal(2)),
        (Decimal(6), Decimal(1)),
    ]

    # phase 2: deletes: ben loses his only path (leaves every bucket), eli goes 6 -> 4,
    # and a path is re-reported by its owner (an update that changes nothing counted)
    for player, count in (("PLAYER#ben", 1), ("PLAYER#eli", 2)):
        for path in sorted(model.paths[player])[:count]:
            delete(ddb, name, player, path)
            model.paths[player].discard(path)
    path = sorted(model.paths["PLAYER#ana"])[0]
    put(ddb, name, {"pk": "PLAYER#ana", "sk": path, "gem": "opal"})
    phases.append("delete")
    drain(ddb, streams, name, arn, mode, faults)
    assert observed(store) == model.expected()
    assert model.expected()["players"] == Decimal(5)

    # phase 3: paths change owner (delete under the old player, put under the new, atomically),
    # including to gus who had none, and random further moves
    moves = [
        ("PLAYER#cho", "PLAYER#gus"),
        ("PLAYER#cho", "PLAYER#gus"),
        ("PLAYER#eli", "PLAYER#fay"),
    ]
    for _ in range(6):
        old = rng.choice([p for p in PLAYERS if model.paths[p]])
        moves.append((old, rng.choice([p for p in PLAYERS if p != old])))
    for old, new in moves:
        path = sorted(model.paths[old])[0]
        ddb.transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": name, "Key": ddb_json({"pk": old, "sk": path})}},
                {
                    "Put": {
                        "TableName": name,
                        "Item": ddb_json({"pk": new, "sk": path, "gem": "ruby"}),
                    }
                },
            ]
        )
        model.paths[old].discard(path)
        model.paths[new].add(path)
    phases.append("owner")
    drain(ddb, streams, name, arn, mode, faults)
    assert observed(store) == model.expected()

    # phase 4: everybody's paths are deleted: every bucket and the player count go to zero
    for player in PLAYERS:
        for path in sorted(model.paths[player]):
            delete(ddb, name, player, path)
        model.paths[player].clear()
    drain(ddb, streams, name, arn, mode, faults)
    assert (
        observed(store)
        == model.expected()
        == {
            "histogram": [],
            "players": Decimal(0),
            "total": Decimal(0),
            "per_player": {},
        }
    )
    assert phases == ["add", "delete", "owner"]


def test_histogram_command_prints_each_bucket(ddb, streams, table, dynamodb_local):
    name, arn = table
    for player, n in (("PLAYER#ana", 2), ("PLAYER#ben", 2), ("PLAYER#cho", 5)):
        for i in range(n):
            put(ddb, name, {"pk": player, "sk": f"PATH#{player}{i}"})
    drain(ddb, streams, name, arn, "exactly-once", False)
    result = CliRunner().invoke(
        main,
        [
            "query",
            "histogram",
            "players_by_paths_found",
            "--table",
            name,
            "--definitions",
            str(ROOT / "definitions" / "cloud_adventure.yaml"),
            "--endpoint-url",
            dynamodb_local.endpoint_url,
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [line.split("│")[1:3] for line in result.output.splitlines() if line.count("│") >= 3]
    assert [(v.strip(), c.strip()) for v, c in rows] == [("2", "2"), ("5", "1")]

"""Turning ``leaderboard`` on (and off) for a rule that already has aggregates: never a silent
wrong answer. Until ``aggregator rebuild`` indexes the existing aggregates, ``top`` reads them
all (exact) and ``status`` names the command; after it, ``top`` reads the index, exact."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from tests.factories import ddb_json

pytestmark = pytest.mark.integration

TABLE = "board"
RULE = '  - {{name: likes_per_post, match: {{SK: {{prefix: "LIKE#"}}}}, key: "{{PK}}"{extra}}}\n'


def _rules(directory: Path, *, leaderboard: bool) -> Path:
    directory.mkdir()
    extra = ", leaderboard: true" if leaderboard else ""
    (directory / "rules.yaml").write_text(
        "version: 1\ntable: {partition_key: PK, sort_key: SK}\nrules:\n" + RULE.format(extra=extra)
    )
    return directory


def _like(ddb, post: str, user: str) -> None:
    ddb.put_item(TableName=TABLE, Item=ddb_json({"PK": f"POST#{post}", "SK": f"LIKE#{user}"}))


def _indexed_items(ddb, rules) -> dict[str, str]:
    items = ddb.scan(TableName=TABLE, ConsistentRead=True)["Items"]
    attr = rules.layout.leaderboard_attribute
    return {i["key"]["S"]: i[attr]["S"] for i in items if "key" in i and attr in i}


def test_turning_the_leaderboard_on_and_off(ddb, dynamodb_local, tmp_path):
    plain = _rules(tmp_path / "plain", leaderboard=False)
    board = _rules(tmp_path / "board", leaderboard=True)
    create_table(ddb, TABLE, layout=load_rules(plain).layout)
    likes = {"a": 3, "b": 1, "c": 2}
    for post, count in likes.items():
        for user in range(count):
            _like(ddb, post, f"u{user}")
    common = ["--table", TABLE, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    assert cli.invoke(main, ["run", *common, "-d", str(plain)]).exit_code == 0
    backfill = cli.invoke(main, ["backfill", *common, "-d", str(plain), "--stream-lag", "0"])
    assert backfill.exit_code == 0, backfill.output

    # a rebuild before the handler runs the new flag would leave what it updates unindexed
    early = cli.invoke(main, ["rebuild", "likes_per_post", *common, "-d", str(board)])
    assert early.exit_code == 0, early.output
    assert "the handler still runs the old one" in " ".join(early.output.split())
    status = json.loads(cli.invoke(main, ["status", *common, "-d", str(board), "--json"]).output)
    assert status["rules"][0]["next"] == (
        "deploy the rule files (the handler runs the old leaderboard flag), then aggregator "
        f"rebuild likes_per_post --table {TABLE}"
    )

    # WHEN the flag is turned on and the handler runs with it (one more like for b)
    _like(ddb, "b", "u9")
    likes["b"] += 1
    assert cli.invoke(main, ["run", *common, "-d", str(board)]).exit_code == 0
    rules = load_rules(board)
    expected = sorted(((f"POST#{p}", Decimal(n)) for p, n in likes.items()), key=lambda x: -x[1])
    # only the aggregate the handler updated since carries an index entry...
    assert _indexed_items(ddb, rules) == {"POST#b": "likes_per_post"}
    # ...yet top is exact: it knows the index is incomplete and reads every aggregate
    store = AggregateStore(ddb, TABLE, rules)
    assert not store.index_complete("likes_per_post")
    assert [(a.key, a.value) for a in store.top("likes_per_post", 3)] == expected
    top = cli.invoke(main, ["query", "top", "likes_per_post", *common, "-d", str(board)])
    assert top.exit_code == 0 and "POST#a" in top.output and "POST#c" in top.output
    status = json.loads(cli.invoke(main, ["status", *common, "-d", str(board), "--json"]).output)[
        "rules"
    ][0]
    assert status["generations"][0]["index_stale"] is True
    assert status["next"] == (
        f"aggregator rebuild likes_per_post --table {TABLE} (the leaderboard flag changed: "
        "indexes the existing aggregates)"
    )

    # THEN rebuild indexes the existing aggregates, and top reads the index
    rebuilt = cli.invoke(main, ["rebuild", "likes_per_post", *common, "-d", str(board)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rebuilt.output.strip() == (
        "rebuild likes_per_post: generation 1 (likes_per_post) is built with this definition; "
        "leaderboard index entries written for its 3 existing aggregates"
    )
    assert _indexed_items(ddb, rules) == {f"POST#{p}": "likes_per_post" for p in likes}
    store = AggregateStore(ddb, TABLE, rules)
    assert store.index_complete("likes_per_post")
    assert [(a.key, a.value) for a in store.top("likes_per_post", 3)] == expected
    again = cli.invoke(main, ["rebuild", "likes_per_post", *common, "-d", str(board)])
    assert "nothing to rebuild" in again.output

    # turning it off again: the entries go with a rebuild, once the handler runs without
    assert cli.invoke(main, ["run", *common, "-d", str(plain)]).exit_code == 0
    status = json.loads(cli.invoke(main, ["status", *common, "-d", str(plain), "--json"]).output)
    assert status["rules"][0]["next"] == (
        f"aggregator rebuild likes_per_post --table {TABLE} (the leaderboard flag changed: "
        "removes the index entries of the existing aggregates)"
    )
    off = cli.invoke(main, ["rebuild", "likes_per_post", *common, "-d", str(plain)])
    assert off.exit_code == 0, off.output
    assert "leaderboard index entries removed from its 3 existing aggregates" in off.output
    assert _indexed_items(ddb, rules) == {}
    plain_store = AggregateStore(ddb, TABLE, load_rules(plain))
    assert [(a.key, a.value) for a in plain_store.top("likes_per_post", 3)] == expected
    ddb.delete_table(TableName=TABLE)

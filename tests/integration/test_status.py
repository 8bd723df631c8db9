"""``aggregator status`` through a rule's life on DynamoDB Local: new, pending with its fences
and a dead letter, active after the backfill, a changed definition, a removed rule; and the
warning ``query`` gives on a rule that is still pending."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.table import create_table
from tests.factories import ddb_json
from tests.integration.harness import without_genesis

pytestmark = pytest.mark.integration

TABLE = "lifecycle"
HEADER = "version: 1\ntable: {partition_key: PK, sort_key: SK}\nrules:\n"
LIKES = '  - {name: likes_per_post, match: {SK: {prefix: "LIKE#USER#"}}, key: "{PK}"}\n'
WEIGHT = (
    '  - {name: weight_per_post, match: {SK: {prefix: "LIKE#USER#"}}, key: "{PK}",\n'
    "     delta: {attribute: weight}}\n"
)


def _rules(directory: Path, *rules: str) -> Path:
    directory.mkdir()
    (directory / "rules.yaml").write_text(HEADER + "".join(rules))
    return directory


def _status(common: list[str], rules: Path) -> dict[str, dict]:
    result = CliRunner().invoke(main, ["status", *common, "-d", str(rules), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["table"] == TABLE
    return {r["rule"]: r for r in report["rules"]}


def _generations(report: dict) -> list[tuple]:
    return [
        (g["generation"], g["status"], g["fenced_shards"], g["dead_letters"])
        for g in report["generations"]
    ]


def test_status_through_a_rules_life(ddb, dynamodb_local, tmp_path):
    rules = _rules(tmp_path / "rules", LIKES, WEIGHT)
    create_table(ddb, TABLE, layout=load_rules(rules).layout)
    without_genesis(ddb, TABLE, load_rules(rules).layout)  # a table with older items
    for user, weight in (("u1", 2), ("u2", 3), ("u3", "heavy")):
        like = {"PK": "POST#a", "SK": f"LIKE#USER#{user}", "weight": weight}
        ddb.put_item(TableName=TABLE, Item=ddb_json(like))
    common = ["--table", TABLE, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()

    # nothing deployed yet
    before = _status(common, rules)
    assert [(r["definition"], r["generations"]) for r in before.values()] == [("new", [])] * 2
    assert before["likes_per_post"]["next"].startswith("deploy the rules (sam deploy)")

    # the runner registers both rules, pending from their fences; the string weight is a
    # dead letter of weight_per_post
    assert cli.invoke(main, ["run", *common, "-d", str(rules)]).exit_code == 0
    pending = _status(common, rules)
    assert _generations(pending["likes_per_post"]) == [(1, "pending", 1, 0)]
    assert _generations(pending["weight_per_post"]) == [(1, "pending", 1, 1)]
    assert pending["weight_per_post"]["dead_letters"] == 1
    assert {r["next"] for r in pending.values()} == {f"aggregator backfill --table {TABLE}"}
    assert [(r["builds"], r["serving"]) for r in pending.values()] == [(1, 1)] * 2

    # query warns that a pending rule's aggregates are incomplete
    got = cli.invoke(main, ["query", "get", "likes_per_post", "POST#a", *common, "-d", str(rules)])
    assert got.exit_code == 0, got.output
    assert got.stdout == "likes_per_post POST#a: 3\n"
    assert got.stderr.startswith("warning: rule 'likes_per_post' is pending: its aggregates do")

    # after the backfill: active, nothing to do but the dead letter
    backfill = ["backfill", *common, "-d", str(rules), "--stream-lag", "0"]
    assert cli.invoke(main, backfill).exit_code == 0
    again = cli.invoke(main, backfill)  # nothing left to do is no failure
    assert (again.exit_code, again.output) == (
        0,
        "nothing to backfill: every rule is active (aggregator status shows each rule's state)\n",
    )
    active = _status(common, rules)
    assert _generations(active["likes_per_post"]) == [(1, "active", 1, 0)]
    assert active["likes_per_post"]["next"] == ""
    assert active["weight_per_post"]["next"] == f"aggregator dead-letters --table {TABLE}"
    got = cli.invoke(main, ["query", "get", "likes_per_post", "POST#a", *common, "-d", str(rules)])
    assert (got.exit_code, got.stderr) == (0, "")

    # explain a live item: the bad weight is the dead letter's cause
    explained = cli.invoke(
        main,
        ["explain", *common, "-d", str(rules), "--key", "PK=POST#a", "--key", "SK=LIKE#USER#u3"],
        env={"COLUMNS": "200"},
    )
    assert explained.exit_code == 0, explained.output
    text = " ".join(explained.output.split())
    assert "likes_per_post: matched" in text
    assert "key POST#a (sort key likes_per_post#POST%23a): +1" in text
    assert "weight_per_post: matched, but cannot be evaluated (wrong-type)" in text
    missing = cli.invoke(main, ["explain", *common, "-d", str(rules), "--key", "PK=POST#a"])
    assert missing.exit_code == 1
    assert missing.stderr.strip() == (
        f"error: --key: table '{TABLE}' is keyed by PK, SK (the rules' table: section); give "
        "--key PK=... --key SK=..."
    )

    # a changed definition, a removed rule
    changed = _rules(tmp_path / "changed", LIKES.replace('"{PK}"', '"{PK}#x"'), WEIGHT)
    report = _status(common, changed)["likes_per_post"]
    assert (report["definition"], report["builds"], report["serving"]) == ("changed", None, 1)
    assert report["next"] == f"aggregator rebuild likes_per_post --table {TABLE}"
    removed = _status(common, _rules(tmp_path / "removed", WEIGHT))
    assert list(removed) == ["weight_per_post", "likes_per_post"]
    assert removed["likes_per_post"]["definition"] == "removed"
    assert removed["likes_per_post"]["next"] == (
        f"aggregator drop-rule likes_per_post --table {TABLE} (deploy without it first)"
    )

    # the table for people: one row per rule
    shown = cli.invoke(main, ["status", *common, "-d", str(rules)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "rules on lifecycle" in text
    assert "likes_per_post" in text and "weight_per_post" in text and "active" in text
    ddb.delete_table(TableName=TABLE)


def test_a_derived_rule_added_to_an_active_source_says_what_can_complete_it(
    ddb, dynamodb_local, tmp_path
):
    table = "derived-late"
    rules = _rules(tmp_path / "rules", LIKES)
    create_table(ddb, table, layout=load_rules(rules).layout)
    common = ["--table", table, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    assert cli.invoke(main, ["run", *common, "-d", str(rules)]).exit_code == 0
    assert (
        cli.invoke(main, ["backfill", *common, "-d", str(rules), "--stream-lag", "0"]).exit_code
        == 0
    )
    later = _rules(
        tmp_path / "later",
        LIKES,
        '  - {name: posts_by_likes, source: likes_per_post, key: "{value}"}\n',
    )
    assert cli.invoke(main, ["run", *common, "-d", str(later)]).exit_code == 0
    result = CliRunner().invoke(main, ["status", *common, "-d", str(later), "--json"])
    report = {r["rule"]: r for r in json.loads(result.output)["rules"]}
    assert report["posts_by_likes"]["next"].startswith(
        "none can complete it: a derived rule counts the changes of 'likes_per_post'"
    )
    ddb.delete_table(TableName=table)

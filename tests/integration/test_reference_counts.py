"""Reference counts (likes per post, in the layout of the "DynamoDB Reference Counts" article):
a tally drifted on purpose is reported by ``reconcile``, fixed once by ``reconcile --repair``,
and a second ``reconcile`` is clean; a key that moves between the checks is never repaired."""

from __future__ import annotations

import shutil
from decimal import Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from aggregator.operations import reconcile as reconcile_module
from aggregator.operations.reconcile import reconcile
from tests.conftest import ROOT
from tests.factories import ddb_json
from tests.integration.harness import article_table, without_genesis

pytestmark = pytest.mark.integration

# post -> users who like it (ground truth, written as items below)
LIKES = {"a91f": ["7c20", "11aa", "42bb"], "b002": ["7c20"], "c3d4": []}


@pytest.fixture
def social(ddb, dynamodb_local, tmp_path):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    shutil.copy(ROOT / "definitions" / "reference_counts.yaml", rules_dir)
    shutil.copy(ROOT / "definitions" / "layouts" / "PK_SK.yaml", rules_dir / "table.yaml")
    rules = load_rules(rules_dir)
    create_table(ddb, "social", layout=rules.layout)
    without_genesis(ddb, "social", rules.layout)  # the lifecycle of a table with older items
    for post, users in LIKES.items():
        item = {"PK": f"POST#{post}", "SK": "META", "body": "hello", "authorId": "u1"}
        ddb.put_item(TableName="social", Item=ddb_json(item))
        for user in users:
            like = {"PK": f"POST#{post}", "SK": f"LIKE#USER#{user}", "likedAt": 1750636800}
            ddb.put_item(TableName="social", Item=ddb_json(like))
    common = ["--table", "social", "--endpoint-url", dynamodb_local.endpoint_url]
    result = CliRunner().invoke(main, ["run", *common, "-d", str(rules_dir)])
    assert result.exit_code == 0, result.output
    # each backfill segment takes an entry of a post's checkpoint map: a bounded number of them
    result = CliRunner().invoke(
        main, ["backfill", *common, "-d", str(rules_dir), "--stream-lag", "0", "--segments", "5"]
    )
    assert result.exit_code == 1
    assert "rule(s) like_tally keep their sums on the application's items" in result.stderr
    assert result.stderr.strip().endswith("give --segments 4 or fewer")
    # the rule is pending until backfilled (reconcile leaves pending rules alone); the stream
    # held every like, so the backfill counts each at its state before its INSERT: nothing
    result = CliRunner().invoke(
        main, ["backfill", *common, "-d", str(rules_dir), "--stream-lag", "0"]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "like_tally, posts_by_likes, likes_per_post active; 7 items scanned" in said
    yield rules, rules_dir, common
    ddb.delete_table(TableName="social")


def test_reconcile_refuses_rules_pending_a_backfill(ddb, dynamodb_local, tmp_path):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    shutil.copy(ROOT / "definitions" / "reference_counts.yaml", rules_dir)
    shutil.copy(ROOT / "definitions" / "layouts" / "PK_SK.yaml", rules_dir / "table.yaml")
    create_table(ddb, "pending", layout=load_rules(rules_dir).layout)
    without_genesis(ddb, "pending", load_rules(rules_dir).layout)
    common = ["--table", "pending", "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    assert cli.invoke(main, ["run", *common, "-d", str(rules_dir)]).exit_code == 0
    args = ["reconcile", *common, "-d", str(rules_dir), "--settle", "0"]
    result = cli.invoke(main, args)
    # every rule is pending: nothing could be checked, and reconcile says so (never "0 drifting")
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "error: rule(s) like_tally (pending), posts_by_likes (pending), likes_per_post (pending) "
        "do not count the items from before their fences yet, so their aggregates cannot be "
        "checked: run `aggregator backfill` first"
    ]
    result = cli.invoke(main, [*args, "--rules", "likes_per_post"])
    assert result.exit_code == 1
    assert "rule 'likes_per_post' is pending" in result.output
    ddb.delete_table(TableName="pending")


def test_reconcile_reports_a_drifted_tally_and_repair_fixes_it_once(ddb, social):
    rules, rules_dir, common = social
    store = AggregateStore(ddb, "social", rules)
    assert {a.key: a.value for a in store.list("likes_per_post")} == {
        f"POST#{p}": Decimal(len(u)) for p, u in LIKES.items() if u
    }
    # the same counts on the posts' META items (like_tally), ranked by posts_by_likes
    for post, users in LIKES.items():
        meta = ddb.get_item(TableName="social", Key=ddb_json({"PK": f"POST#{post}", "SK": "META"}))
        assert Decimal(meta["Item"].get("likeTally", {"N": "0"})["N"]) == len(users), post
    assert [(a.key, a.value) for a in store.top("posts_by_likes", 5) if a.value] == [
        ("POST#a91f", 3),
        ("POST#b002", 1),
    ]
    # GIVEN a tally that drifts (a stray write adds 5 likes to one post)
    ddb.update_item(
        TableName="social",
        Key=rules.layout.aggregate_key(store.sort_key("likes_per_post", "POST#a91f")),
        UpdateExpression="ADD #v :five",
        ExpressionAttributeNames={"#v": "value"},
        ExpressionAttributeValues={":five": {"N": "5"}},
    )
    cli = CliRunner()
    args = ["reconcile", *common, "-d", str(rules_dir), "--settle", "0"]
    # WHEN reconcile checks: it reports exactly that key and exits 1
    result = cli.invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "POST#a91f" in result.output and "-5" in result.output
    assert "POST#b002" not in result.output
    # 2 keys of each rule (the posts with likes)
    assert "6 keys checked over 7 items (2 check(s)): 1 drifting, 0 moving, 0 repaired" in (
        " ".join(result.output.split())
    )
    # THEN --repair fixes it, once
    result = cli.invoke(main, [*args, "--repair"])
    assert result.exit_code == 0, result.output
    assert "1 drifting" not in result.output and "1 repaired" in result.output
    assert store.get("likes_per_post", "POST#a91f").value == 3
    # and a second reconcile is clean
    result = cli.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "0 drifting, 0 moving, 0 repaired" in " ".join(result.output.split())


def test_a_key_that_moves_between_the_checks_is_reported_not_repaired(ddb, social, monkeypatch):
    rules, _, _ = social
    store = AggregateStore(ddb, "social", rules)
    key = rules.layout.aggregate_key(store.sort_key("likes_per_post", "POST#b002"))

    def bump():
        ddb.update_item(
            TableName="social",
            Key=key,
            UpdateExpression="ADD #v :one",
            ExpressionAttributeNames={"#v": "value"},
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    bump()  # drift: 2 stored for 1 like
    # the aggregate moves again while reconcile waits between its checks
    monkeypatch.setattr(reconcile_module.time, "sleep", lambda seconds: bump())
    report = reconcile(rules, ddb, "social", repair=True, settle_seconds=1)
    assert [(d.key, d.expected, d.stored, d.status) for d in report.drifts] == [
        ("POST#b002", Decimal(1), Decimal(3), "moving")
    ]
    assert store.get("likes_per_post", "POST#b002").value == 3  # untouched
    assert not report.clean


def test_targets_that_do_not_exist_are_reported_apart_and_never_waited_on(ddb, social, monkeypatch):
    """Likes of a post never created and of a post deleted after its likes are an expected state
    (their deltas go to the ledger): reconcile does not wait on them, counts them on a line of
    their own and exits 0; a tally drifted on purpose beside them is still found and repaired."""
    rules, rules_dir, common = social
    # GIVEN likes that point at posts that do not exist: two of a post never created, and the
    # one like of b002, whose META item goes
    for user in ("7c20", "11aa"):
        like = {"PK": "POST#ghost", "SK": f"LIKE#USER#{user}", "likedAt": 1750636800}
        ddb.put_item(TableName="social", Item=ddb_json(like))
    ddb.delete_item(TableName="social", Key=ddb_json({"PK": "POST#b002", "SK": "META"}))
    cli = CliRunner()
    assert cli.invoke(main, ["run", *common, "-d", str(rules_dir)]).exit_code == 0
    store = AggregateStore(ddb, "social", rules)
    ledger = {a.key: a.value for a in store.list("like_tally") if a.value}
    assert ledger == {"POST#ghost#META": 2}  # b002's like was counted before its post went
    sleeps: list[float] = []
    monkeypatch.setattr(reconcile_module.time, "sleep", sleeps.append)
    args = ["reconcile", *common, "-d", str(rules_dir), "--settle", "600"]
    missing_line = (
        "reconcile: 2 key(s) of like_tally whose target item does not exist: expected, not "
        "drift (their deltas go to the ledger: aggregator query list like_tally)"
    )
    # WHEN reconcile checks: no table, no wait (one check), one line for the missing targets
    result = cli.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert sleeps == []
    said = " ".join(result.output.split())
    assert "┃" not in said  # no table
    # 7 likes and 2 META items: likes_per_post 4 keys (a91f, b002, ghost), like_tally 3
    # (a91f, b002, ghost), posts_by_likes 1 (a91f; b002 retracted with its META item)
    assert said == (
        "reconcile: 8 keys checked over 8 items (1 check(s)): 0 drifting, 0 moving, 0 repaired "
        + missing_line
    )
    # GIVEN real drift beside them: a stray write adds 5 to a tally that exists
    ddb.update_item(
        TableName="social",
        Key=ddb_json({"PK": "POST#a91f", "SK": "META"}),
        UpdateExpression="ADD likeTally :five",
        ExpressionAttributeValues={":five": {"N": "5"}},
    )
    # (posts_by_likes, which ranks the tallies, follows it through the stream)
    assert cli.invoke(main, ["run", *common, "-d", str(rules_dir)]).exit_code == 0
    # THEN reconcile still finds it (after --settle), and reports the missing targets apart
    sleeps.clear()  # (the stream runner's polls)
    result = cli.invoke(main, args)
    assert result.exit_code == 1, result.output
    assert sleeps == [600]
    rows = [line for line in result.output.splitlines() if "│" in line]
    assert len(rows) == 1 and "POST#a91f#META" in rows[0] and "drift" in rows[0], rows
    said = " ".join(result.output.split())
    assert "(2 check(s)): 1 drifting, 0 moving, 0 repaired " + missing_line in said
    # --repair fixes it, once; then everything is clean again, in one check
    result = cli.invoke(main, [*args, "--repair"])
    assert result.exit_code == 0, result.output
    assert "1 drifting" not in result.output and "1 repaired" in result.output
    meta = ddb.get_item(TableName="social", Key=ddb_json({"PK": "POST#a91f", "SK": "META"}))
    assert meta["Item"]["likeTally"] == {"N": str(len(LIKES["a91f"]))}
    assert cli.invoke(main, ["run", *common, "-d", str(rules_dir)]).exit_code == 0
    sleeps.clear()  # (the stream runner's polls)
    result = cli.invoke(main, args)
    assert result.exit_code == 0 and sleeps == [], result.output
    assert "(1 check(s)): 0 drifting, 0 moving, 0 repaired " + missing_line in (
        " ".join(result.output.split())
    )


def test_a_reader_sees_an_incomplete_tally_while_pending_and_the_manifest_says_so(
    ddb, dynamodb_local, tmp_path
):
    """Between the deployment of a target rule and its backfill, the tally on the item counts
    only what changed since the rule's fences: a plain GetItem cannot tell (an unlike of a post
    liked before shows -1). The rule's state can: AggregateStore.serving_status, one read of the
    manifest (cached), and query get warns; after the backfill the tally is exact and active."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    shutil.copy(ROOT / "definitions" / "reference_counts.yaml", rules_dir)
    shutil.copy(ROOT / "definitions" / "layouts" / "PK_SK.yaml", rules_dir / "table.yaml")
    rules = load_rules(rules_dir)
    article_table(ddb, "readers", stream=False)  # the application's, from before the framework
    ddb.put_item(TableName="readers", Item=ddb_json({"PK": "POST#a91f", "SK": "META"}))
    for user in ("7c20", "11aa", "42bb"):
        like = {"PK": "POST#a91f", "SK": f"LIKE#USER#{user}", "likedAt": 1750636800}
        ddb.put_item(TableName="readers", Item=ddb_json(like))
    common = ["--table", "readers", "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    prepared = cli.invoke(main, ["prepare-table", *common, "-d", str(rules_dir)])
    assert prepared.exit_code == 0, prepared.output
    assert cli.invoke(main, ["run", *common, "-d", str(rules_dir)]).exit_code == 0
    # the application takes a like back while the rule is pending
    ddb.delete_item(TableName="readers", Key=ddb_json({"PK": "POST#a91f", "SK": "LIKE#USER#11aa"}))
    assert cli.invoke(main, ["run", *common, "-d", str(rules_dir)]).exit_code == 0

    def tally() -> Decimal:
        item = ddb.get_item(
            TableName="readers",
            Key=ddb_json({"PK": "POST#a91f", "SK": "META"}),
            ConsistentRead=True,
        )["Item"]
        return Decimal(item["likeTally"]["N"])

    assert tally() == -1  # what a plain GetItem reads: nothing on the item says it is partial
    store = AggregateStore(ddb, "readers", rules)
    assert store.serving_status("like_tally") == "pending"
    got = cli.invoke(
        main, ["query", "get", "like_tally", "POST#a91f", *common, "-d", str(rules_dir)]
    )
    assert got.exit_code == 0 and "like_tally" in got.stderr and "backfill" in got.stderr
    backfill = cli.invoke(main, ["backfill", *common, "-d", str(rules_dir), "--stream-lag", "0"])
    assert backfill.exit_code == 0, backfill.output
    assert tally() == 2
    assert AggregateStore(ddb, "readers", rules).serving_status("like_tally") == "active"
    ddb.delete_table(TableName="readers")

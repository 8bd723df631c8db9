"""Counts on the application's own items (rule ``target``), on the layout of the "DynamoDB
Reference Counts" article: a PK/SK table made with plain boto3, posts with a ``META`` item, one
``LIKE#USER#<id>`` item per like written with one conditional ``PutItem`` and removed with one
conditional ``DeleteItem`` (no transaction). Likes and unlikes race the stream runner, which
crashes mid-batch, delivers batches twice and is throttled on the ``META`` items; the truth is
counted from the table's own items, independently of the engine."""

from __future__ import annotations

import random
import re
import shutil
import time
from collections import Counter
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.cli.template import target_condition
from aggregator.core.exceptions import QueryError
from aggregator.core.rules import load_rules
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.modes import WriterOptions
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import to_lambda_record
from aggregator.dynamodb.targets import rule_token
from aggregator.operations.reconcile import reconcile
from aggregator.runtime.processor import create_processor
from tests.conftest import ROOT
from tests.integration.harness import SOAK, article_table, table_items

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

POSTS = [f"POST#{i:02d}" for i in range(8)]
GHOST = "POST#ghost"  # liked, never created


def make_table(ddb, name: str) -> str:
    """The article's table, made with plain boto3 (keys and a stream; no index)."""
    arn = article_table(ddb, name)
    assert arn is not None
    return arn


def like(ddb, name: str, post: str, user: int) -> bool:
    try:
        ddb.put_item(
            TableName=name,
            Item={"PK": {"S": post}, "SK": {"S": f"LIKE#USER#{user}"}, "likedAt": {"N": "1"}},
            ConditionExpression="attribute_not_exists(SK)",
        )
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
        return False
    return True


def unlike(ddb, name: str, post: str, user: int) -> bool:
    try:
        ddb.delete_item(
            TableName=name,
            Key={"PK": {"S": post}, "SK": {"S": f"LIKE#USER#{user}"}},
            ConditionExpression="attribute_exists(SK)",
        )
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
        return False
    return True


class PolicyTwin:
    """Passes calls through to DynamoDB, checking each request on an application item against
    the role's ``TargetAttributesOnly`` statement as IAM would evaluate it (Developer Guide,
    "Using IAM policy conditions for fine-grained access control"): ``UpdateItem`` or
    ``GetItem`` only, every top-level attribute named (``dynamodb:Attributes``, key included)
    among the statement's, ``ReturnValues`` ``NONE`` or ``UPDATED_OLD``, no whole-item read.
    Attributes are read from the expressions' ``#name`` placeholders, which the framework uses
    for every attribute (a literal name in an expression would escape this twin)."""

    def __init__(self, client, layout, allowed: list[str]) -> None:
        self._client = client
        self.layout = layout
        self.allowed = set(allowed)
        self.checked = Counter()

    def _check(self, operation: str, request: dict) -> None:
        if self.layout.is_reserved(request["Key"]):
            return
        assert operation in ("update_item", "get_item"), operation
        placeholders = request.get("ExpressionAttributeNames", {})
        expressions = " ".join(
            request.get(e, "")
            for e in ("UpdateExpression", "ConditionExpression", "ProjectionExpression")
        )
        # a path's top-level attribute counts (a.b names a), as IAM's dynamodb:Attributes does
        tops = {placeholders[m] for m in re.findall(r"(?<![.\w])(#\w+)", expressions)}
        names = tops | set(request["Key"])
        assert names <= self.allowed, names - self.allowed
        assert request.get("ReturnValues", "NONE") in ("NONE", "UPDATED_OLD")
        assert "ReturnValuesOnConditionCheckFailure" not in request
        if operation == "get_item":
            assert request.get("ProjectionExpression")
        self.checked[operation] += 1

    def update_item(self, **request):
        self._check("update_item", request)
        return self._client.update_item(**request)

    def get_item(self, **request):
        self._check("get_item", request)
        return self._client.get_item(**request)

    def put_item(self, **request):
        assert self.layout.is_reserved(request["Item"]), request["Item"]
        return self._client.put_item(**request)

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.mark.parametrize("mode", ["exactly-once", "window", "sharded"])
def test_like_tallies_on_meta_items_are_exact_under_faults(
    ddb, streams, dynamodb_local, tmp_path, mode
):
    """``sharded``: exactly-once with ``write_shards: 4`` on like_tally (a hot parent: the
    likes go to partials in the aggregates' partition, rolled up into the META item)."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    text = (ROOT / "definitions" / "reference_counts.yaml").read_text()
    if mode == "sharded":
        text = text.replace(
            "      attribute: likeTally\n", "      attribute: likeTally\n    write_shards: 4\n"
        )
        assert "write_shards: 4" in text
    (rules_dir / "reference_counts.yaml").write_text(text)
    shutil.copy(ROOT / "definitions" / "layouts" / "PK_SK.yaml", rules_dir / "table.yaml")
    rules = load_rules(rules_dir)
    name = f"social-{mode}"
    stream_arn = make_table(ddb, name)
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url, "-d", str(rules_dir)]
    cli = CliRunner()
    result = cli.invoke(main, ["prepare-table", *common])  # the leaderboard index
    assert result.exit_code == 0, result.output
    for post in POSTS:
        ddb.put_item(
            TableName=name,
            Item={"PK": {"S": post}, "SK": {"S": "META"}, "body": {"S": "hello"}},
        )

    policy = target_condition(rules)["Condition"]["ForAllValues:StringEquals"]
    twin = PolicyTwin(ddb, rules.layout, policy["dynamodb:Attributes"])
    client = FaultInjectingClient(twin, layout=rules.layout, throttle={"META": 6})
    faults = RunnerFaults(client=client)
    # In the window mode only a window's final invocation writes, and how many windows close
    # depends on the wall clock (windows follow the records' creation times): every delivery is
    # armed there until the four crashes have happened.
    faults.crash = lambda n: 3 if client.crashes < 4 and (mode == "window" or n % 2 == 1) else None
    faults.duplicate = lambda n: n % 3 == 0
    write_mode = "exactly-once" if mode == "sharded" else mode
    processor = create_processor(rules, client, name, mode=write_mode)
    runner = StreamRunner(processor, streams, stream_arn, batch_size=25, faults=faults)

    rng = random.Random(19)
    liked: set[tuple[str, int]] = set()
    missing_targets = partial_inputs = 0
    for round_ in range(6):
        for _ in range(60 if SOAK else 30):  # likes and unlikes per round
            post = rng.choice([*POSTS, GHOST])
            user = rng.randrange(12)
            if (post, user) in liked and rng.random() < 0.4:
                assert unlike(ddb, name, post, user)
                liked.discard((post, user))
            elif (post, user) not in liked:
                assert like(ddb, name, post, user)
                liked.add((post, user))
        if round_ == 2:  # a post is deleted; its likes stay, and more arrive
            ddb.delete_item(TableName=name, Key={"PK": {"S": POSTS[3]}, "SK": {"S": "META"}})
        if round_ == 5:  # the last like of a post goes
            for post, user in sorted(liked):
                if post == POSTS[0]:
                    assert unlike(ddb, name, post, user)
                    liked.discard((post, user))
        stats = runner.run()
        assert stats.failures == 0
        missing_targets += stats.write.missing_targets
        partial_inputs += stats.partial_inputs
    assert client.crashes == 4
    assert twin.checked["update_item"] > 0 and twin.checked["get_item"] > 0
    # with write_shards the META items are written from the partials' stream records only
    assert (partial_inputs > 0) is (mode == "sharded")

    items = table_items(ddb, name)
    likes = Counter(i["PK"]["S"] for i in items if i["SK"]["S"].startswith("LIKE#USER#"))
    metas = {i["PK"]["S"]: i for i in items if i["SK"]["S"] == "META"}
    assert likes == Counter(post for post, _ in liked)  # the truth, from the items themselves
    # the deleted post was never re-created, the ghost never created
    assert set(metas) == set(POSTS) - {POSTS[3]}
    for post, meta in metas.items():
        assert Decimal(meta.get("likeTally", {"N": "0"})["N"]) == likes[post], post
        assert set(meta) <= {"PK", "SK", "body", "likeTally", "aggregator_checkpoints"}
        assert len(meta.get("aggregator_checkpoints", {}).get("M", {})) <= 16
    assert "likeTally" in metas[POSTS[0]] and metas[POSTS[0]]["likeTally"]["N"] == "0"

    # the leaderboard of posts by likeTally reads the attribute the handler writes
    store = AggregateStore(ddb, name, rules)
    top = {a.key: a.value for a in store.top("posts_by_likes", 20) if a.value}
    assert top == {p: Decimal(n) for p, n in likes.items() if p in metas and n}
    # get reads the tally where it is kept: one GetItem of the post
    before = store.requests
    assert store.get("like_tally", POSTS[1]).value == likes[POSTS[1]]
    assert store.requests == before + 1
    assert store.get("like_tally", POSTS[3]) is None  # deleted: never re-created
    if mode == "window":  # and through the CLI
        result = cli.invoke(main, ["query", "get", "like_tally", POSTS[1], *common])
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"like_tally {POSTS[1]}#META: {likes[POSTS[1]]} (likeTally of the target item)\n"
        )
        result = cli.invoke(main, ["query", "get", "like_tally", POSTS[3], *common])
        assert result.exit_code == 1
        assert "the target item does not exist" in result.stdout
        result = cli.invoke(main, ["query", "list", "like_tally", *common])
        assert result.exit_code == 0 and f"{GHOST}#META" in result.stdout
        # its sums are on the posts: top points at the rule that ranks them
        result = cli.invoke(main, ["query", "top", "like_tally", *common])
        assert result.exit_code == 1
        assert "rank them with a leaderboard rule whose delta reads 'likeTally'" in result.stderr
        result = cli.invoke(main, ["validate", str(rules_dir), "--json"])
        assert "target likeTally on {PK} / META" in result.stdout
    # the ledger: what found no item, per target key (the ghost's likes, the deleted post's)
    ledger = {a.key: a.value for a in store.list("like_tally") if a.value}
    assert ledger[f"{GHOST}#META"] == likes[GHOST]
    assert f"{POSTS[3]}#META" in ledger
    assert missing_targets > 0

    # reconcile: clean, then a tampered tally is found and repaired once
    report = reconcile(rules, ddb, name, rule_names=["like_tally"], settle_seconds=0)
    assert report.clean, report.drifts
    assert report.drifts == [] and report.checks == 1  # nothing to wait on
    # the ghost (never created) and the deleted post: their likes point at no item
    missing = {d.key: (d.expected, d.status) for d in report.missing_targets}
    assert missing == {
        f"{post}#META": (Decimal(likes[post]), "no target")
        for post in (GHOST, POSTS[3])
        if likes[post]
    }
    victim = POSTS[1]
    ddb.update_item(
        TableName=name,
        Key={"PK": {"S": victim}, "SK": {"S": "META"}},
        UpdateExpression="ADD likeTally :n",
        ExpressionAttributeValues={":n": {"N": "5"}},
    )
    report = reconcile(rules, ddb, name, rule_names=["like_tally"], settle_seconds=0)
    drifts = {d.key: (d.expected, d.stored, d.status) for d in report.drifts}
    assert drifts[f"{victim}#META"] == (likes[victim], likes[victim] + 5, "drift")
    report = reconcile(rules, ddb, name, rule_names=["like_tally"], repair=True, settle_seconds=0)
    assert {d.key: d.status for d in report.drifts}[f"{victim}#META"] == "repaired"
    meta = ddb.get_item(TableName=name, Key={"PK": {"S": victim}, "SK": {"S": "META"}})["Item"]
    assert Decimal(meta["likeTally"]["N"]) == likes[victim]
    ddb.delete_table(TableName=name)


def test_two_rules_targeting_one_item_keep_their_own_checkpoints(ddb, streams, tmp_path):
    """likeTally and commentTally on one META item, written in the same batches from the same
    shard, each twice (every batch delivered twice): both exact."""
    (tmp_path / "rules.yaml").write_text(
        "table: {partition_key: PK, sort_key: SK}\n"
        "rules:\n"
        "  - name: likes\n"
        "    match: {SK: {prefix: 'LIKE#'}}\n"
        "    target: {partition_key: '{PK}', sort_key: META, attribute: likeTally}\n"
        "  - name: comments\n"
        "    match: {SK: {prefix: 'COMMENT#'}}\n"
        "    target: {partition_key: '{PK}', sort_key: META, attribute: commentTally}\n"
    )
    rules = load_rules(tmp_path / "rules.yaml")
    stream_arn = make_table(ddb, "two-rules")
    ddb.put_item(TableName="two-rules", Item={"PK": {"S": "POST#1"}, "SK": {"S": "META"}})
    for i in range(7):
        like(ddb, "two-rules", "POST#1", i)
        ddb.put_item(
            TableName="two-rules",
            Item={"PK": {"S": "POST#1"}, "SK": {"S": f"COMMENT#{i}"}},
        )
    unlike(ddb, "two-rules", "POST#1", 0)
    client = FaultInjectingClient(ddb, layout=rules.layout)
    faults = RunnerFaults(client=client)
    faults.duplicate = lambda n: True
    processor = create_processor(rules, client, "two-rules", mode="exactly-once")
    stats = StreamRunner(processor, streams, stream_arn, batch_size=5, faults=faults).run()
    assert stats.duplicates > 0
    meta = ddb.get_item(TableName="two-rules", Key={"PK": {"S": "POST#1"}, "SK": {"S": "META"}})
    assert meta["Item"]["likeTally"] == {"N": "6"}
    assert meta["Item"]["commentTally"] == {"N": "7"}
    assert len(meta["Item"]["aggregator_checkpoints"]["M"]) == 2  # one per (rule, shard)
    ddb.delete_table(TableName="two-rules")


@pytest.mark.parametrize("mode", ["exactly-once", "at-least-once"])
def test_a_tally_that_is_not_a_number_goes_to_the_ledger_and_never_blocks_the_shard(
    ddb, streams, tmp_path, mode
):
    """The application wrote likeTally = "lots" on a post: ADD cannot use it (a
    ValidationException). Its likes go to the ledger, the shard moves on, get says why, and once
    the item is fixed reconcile --repair brings the tally back."""
    (tmp_path / "rules.yaml").write_text(
        "table: {partition_key: PK, sort_key: SK}\n"
        "rules:\n"
        "  - name: likes\n"
        "    match: {SK: {prefix: 'LIKE#'}}\n"
        "    target: {partition_key: '{PK}', sort_key: META, attribute: likeTally}\n"
    )
    rules = load_rules(tmp_path / "rules.yaml")
    name = f"lots-{mode}"
    stream_arn = make_table(ddb, name)
    ddb.put_item(TableName=name, Item={"PK": {"S": "POST#1"}, "SK": {"S": "META"}})
    ddb.put_item(
        TableName=name,
        Item={"PK": {"S": "POST#2"}, "SK": {"S": "META"}, "likeTally": {"S": "lots"}},
    )
    for post in ("POST#1", "POST#2"):
        like(ddb, name, post, 1)
        like(ddb, name, post, 2)
    processor = create_processor(rules, ddb, name, mode=mode)
    runner = StreamRunner(processor, streams, stream_arn, batch_size=10)
    stats = runner.run()
    assert stats.failures == 0 and stats.write.unusable_targets == 1

    def meta(post: str) -> dict:
        key = {"PK": {"S": post}, "SK": {"S": "META"}}
        return ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]

    assert meta("POST#1")["likeTally"] == {"N": "2"} and meta("POST#2")["likeTally"] == {
        "S": "lots"
    }
    store = AggregateStore(ddb, name, rules)
    assert {a.key: a.value for a in store.list("likes")} == {"POST#2#META": 2}  # the ledger
    with pytest.raises(
        QueryError, match="likeTally of the target item POST#2#META is not a number"
    ):
        store.get("likes", "POST#2")
    assert store.get("likes", "POST#1#META").value == 2  # the key as list shows it, too
    # a checkpoint map the application overwrote with text reads as such, not as a tally of 0
    ddb.put_item(
        TableName=name,
        Item={"PK": {"S": "POST#9"}, "SK": {"S": "META"}, "aggregator_checkpoints": {"S": "x"}},
    )
    with pytest.raises(
        QueryError, match="aggregator_checkpoints of the target item POST#9#META is not a map"
    ):
        store.get("likes", "POST#9")
    ddb.delete_item(TableName=name, Key={"PK": {"S": "POST#9"}, "SK": {"S": "META"}})
    # reconcile --repair cannot ADD to text: it says what to fix (it failed with
    # "UpdateItem failed (ValidationException)", naming no item)
    report = reconcile(rules, ddb, name, rule_names=["likes"], repair=True, settle_seconds=0)
    statuses = {d.key: d.status for d in report.drifts}
    assert statuses["POST#2#META"] == "likeTally is not a number: fix the item"
    # the application fixes the item: reconcile --repair restores the tally, once
    ddb.update_item(
        TableName=name,
        Key={"PK": {"S": "POST#2"}, "SK": {"S": "META"}},
        UpdateExpression="REMOVE likeTally",
    )
    like(ddb, name, "POST#2", 3)
    assert runner.run().failures == 0
    assert meta("POST#2")["likeTally"] == {"N": "1"}
    report = reconcile(rules, ddb, name, rule_names=["likes"], repair=True, settle_seconds=0)
    assert {d.key: d.status for d in report.drifts}["POST#2#META"] == "repaired"
    assert meta("POST#2")["likeTally"] == {"N": "3"}
    ddb.delete_table(TableName=name)


def test_drop_rule_removes_the_attribute_and_its_checkpoints_and_rebuild_says_what_to_do(
    ddb, streams, dynamodb_local, tmp_path
):
    layout = "table: {partition_key: PK, sort_key: SK}\n"
    tally = (
        "  - name: likes\n"
        "    match: {SK: {prefix: 'LIKE#'}}\n"
        "    target: {partition_key: '{PK}', sort_key: META, attribute: likeTally}\n"
    )
    comments = (
        "  - name: comments\n"
        "    match: {SK: {prefix: 'COMMENT#'}}\n"
        "    target: {partition_key: '{PK}', sort_key: META, attribute: commentTally}\n"
    )
    both, changed, only_comments = (tmp_path / d for d in ("both", "changed", "comments"))
    for folder, text in (
        (both, tally + comments),
        (changed, tally.replace("LIKE#", "LIKE#USER#") + comments),
        (only_comments, comments),
    ):
        folder.mkdir()
        (folder / "rules.yaml").write_text(layout + "rules:\n" + text)
    name = "dropping"
    make_table(ddb, name)
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    assert cli.invoke(main, ["run", *common, "-d", str(both)]).exit_code == 0
    backfill = ["backfill", *common, "-d", str(both), "--stream-lag", "0"]
    assert cli.invoke(main, backfill).exit_code == 0
    for post in ("POST#1", "POST#2"):
        ddb.put_item(TableName=name, Item={"PK": {"S": post}, "SK": {"S": "META"}})
        like(ddb, name, post, 1)
        ddb.put_item(TableName=name, Item={"PK": {"S": post}, "SK": {"S": "COMMENT#1"}})
    like(ddb, name, "POST#gone", 1)  # a ledger entry
    assert cli.invoke(main, ["run", *common, "-d", str(both)]).exit_code == 0

    def meta(post: str) -> dict:
        key = {"PK": {"S": post}, "SK": {"S": "META"}}
        return ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]

    assert meta("POST#1")["likeTally"] == {"N": "1"}
    assert len(meta("POST#1")["aggregator_checkpoints"]["M"]) == 2

    # a changed definition cannot be rebuilt in place: the message says what to do instead
    result = cli.invoke(main, ["rebuild", "likes", *common, "-d", str(changed)])
    assert result.exit_code == 1
    assert result.output.startswith("error: rule 'likes' keeps its sums in 'likeTally' of ")
    assert (
        "run `aggregator drop-rule likes`" in result.output and len(result.output.splitlines()) == 1
    )

    # the rule removed from the definitions: drop-rule says what it will remove from your items
    result = cli.invoke(
        main, ["drop-rule", "likes", *common, "-d", str(only_comments), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "the attribute likeTally (and the rule's checkpoint map entries) on every " in " ".join(
        result.output.split()
    )
    # and clears its attribute and map entries
    result = cli.invoke(main, ["drop-rule", "likes", *common, "-d", str(only_comments), "--yes"])
    assert result.exit_code == 0, result.output
    assert "2 items' target attribute removed" in " ".join(result.output.split())
    for post in ("POST#1", "POST#2"):
        item = meta(post)
        assert "likeTally" not in item and item["commentTally"] == {"N": "1"}
        (entry,) = item["aggregator_checkpoints"]["M"]  # the comments rule's
        assert not entry.startswith(rule_token("likes"))
    ledger = ddb.query(
        TableName=name,
        KeyConditionExpression="PK = :a AND begins_with(SK, :r)",
        ExpressionAttributeValues={":a": {"S": "AGGREGATES"}, ":r": {"S": "likes#"}},
    )
    assert ledger["Items"] == []
    # the last target rule of the items dropped too: no empty checkpoint map is left on them
    neither = tmp_path / "neither"
    neither.mkdir()
    (neither / "rules.yaml").write_text(
        layout + "rules:\n  - {name: posts, match: {SK: META}, key: '{PK}'}\n"
    )
    result = cli.invoke(main, ["drop-rule", "comments", *common, "-d", str(neither), "--yes"])
    assert result.exit_code == 0, result.output
    for post in ("POST#1", "POST#2"):
        assert set(meta(post)) == {"PK", "SK"}
    ddb.delete_table(TableName=name)


LIKES_ONLY = (
    "table: {partition_key: PK, sort_key: SK}\n"
    "rules:\n"
    "  - name: likes\n"
    "    match: {SK: {prefix: 'LIKE#'}}\n"
    "    target: {partition_key: '{PK}', sort_key: META, attribute: likeTally}\n"
)


def test_a_replay_after_the_post_was_deleted_does_not_count_its_likes_again(
    ddb, dynamodb_local, tmp_path
):
    """Issue 35's reproduction: a post with two likes, counted on it; the post deleted; the
    whole stream delivered again (``run --from-start``). The likes reached the post, so the
    ledger must not hold them (it held 2 before the delete's checkpoints were carried to it); a
    like made after the delete, which found no post, stays in the ledger exactly once."""
    (tmp_path / "rules.yaml").write_text(LIKES_ONLY)
    rules = load_rules(tmp_path / "rules.yaml")
    name = "replayed"
    make_table(ddb, name)
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
    cli = CliRunner()
    meta_key = {"PK": {"S": "POST#x"}, "SK": {"S": "META"}}

    def run(*extra: str) -> None:
        result = cli.invoke(main, ["run", *common, "-d", str(tmp_path / "rules.yaml"), *extra])
        assert result.exit_code == 0, result.output

    def ledger() -> dict[str, Decimal]:
        return {a.key: a.value for a in AggregateStore(ddb, name, rules).list("likes")}

    def ledger_items() -> list[dict]:
        return [
            i
            for i in table_items(ddb, name)
            if i["PK"]["S"] == "AGGREGATES" and i["SK"]["S"].startswith("likes#")
        ]

    ddb.put_item(TableName=name, Item={**meta_key, "body": {"S": "hello"}})
    like(ddb, name, "POST#x", 1)
    like(ddb, name, "POST#x", 2)
    run()
    meta = ddb.get_item(TableName=name, Key=meta_key, ConsistentRead=True)["Item"]
    assert meta["likeTally"] == {"N": "2"}
    ddb.delete_item(TableName=name, Key=meta_key)
    run()
    run("--from-start")
    assert ledger().get("POST#x#META", 0) == 0  # 2 before the delete's checkpoints were carried
    # the delete's REMOVE carried the post's checkpoint to the ledger item, which has no value
    (item,) = ledger_items()
    assert "value" not in item and any(a.startswith("c#") for a in item)
    assert item["rule"] == {"S": "likes"} and item["key"] == {"S": "POST#x#META"}
    assert int(item["ttl"]["N"]) > time.time() + 24 * 3600  # gone after the retention
    assert ledger() == {"POST#x#META": 0}
    # the ledger as people read it: nothing, and says why (not "nothing counted yet")
    for command in ("list", "histogram"):
        shown = cli.invoke(main, ["query", command, "likes", *common, "-d", str(tmp_path)])
        assert shown.exit_code == 0, shown.output
        assert "every delta found its target item" in shown.output, shown.output
    # a like after the delete found no post: the ledger's, once, replayed or not
    like(ddb, name, "POST#x", 3)
    run()
    (item,) = ledger_items()
    assert item["value"] == {"N": "1"} and "ttl" not in item  # a delta removes the TTL
    run("--from-start")
    assert ledger() == {"POST#x#META": 1}
    result = cli.invoke(main, ["query", "list", "likes", *common, "-d", str(tmp_path)])
    assert result.exit_code == 0 and "POST#x#META │     1" in result.output, result.output
    ddb.delete_table(TableName=name)


def _cli_run(tmp_path, name: str, endpoint: str):
    """``aggregator run`` of ``rules.yaml`` in ``tmp_path`` on table ``name`` (extra options)."""
    cli = CliRunner()
    common = ["--table", name, "--endpoint-url", endpoint, "-d", str(tmp_path / "rules.yaml")]

    def run(*extra: str) -> None:
        result = cli.invoke(main, ["run", *common, *extra])
        assert result.exit_code == 0, result.output

    return run


def _tally(ddb, name: str, key: dict) -> Decimal | None:
    """The post's ``likeTally`` (read strongly consistently), ``None`` while it has none."""
    item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    return Decimal(item["likeTally"]["N"]) if "likeTally" in item else None


def test_a_re_created_post_does_not_get_the_likes_counted_on_the_deleted_one(
    ddb, dynamodb_local, tmp_path
):
    """A post with two likes, counted on it; the post deleted (its checkpoint carried to the
    ledger) and created again with no tally; the whole stream delivered again. The new post's
    first write of the shard reads the ledger's checkpoint: the two likes are accounted for
    (on the old post), so the new post gets 0 of them, not 2; a like made afterwards counts."""
    (tmp_path / "rules.yaml").write_text(LIKES_ONLY)
    rules = load_rules(tmp_path / "rules.yaml")
    name = "recreated"
    make_table(ddb, name)
    run = _cli_run(tmp_path, name, dynamodb_local.endpoint_url)
    meta_key = {"PK": {"S": "POST#x"}, "SK": {"S": "META"}}

    def tally() -> Decimal | None:
        return _tally(ddb, name, meta_key)

    ddb.put_item(TableName=name, Item={**meta_key, "body": {"S": "hello"}})
    like(ddb, name, "POST#x", 1)
    like(ddb, name, "POST#x", 2)
    run()
    assert tally() == 2
    ddb.delete_item(TableName=name, Key=meta_key)
    run()
    ddb.put_item(TableName=name, Item={**meta_key, "body": {"S": "again"}})
    run()
    assert tally() is None  # nothing new for it: the application's item as written
    run("--from-start")
    assert tally() == 0  # 2 before; the entry seeded from the ledger is written with ADD 0
    ledger = {a.key: a.value for a in AggregateStore(ddb, name, rules).list("likes")}
    assert ledger.get("POST#x#META", 0) == 0
    like(ddb, name, "POST#x", 3)
    run()
    run("--from-start")
    assert tally() == 1
    ddb.delete_table(TableName=name)


def test_likes_in_the_ledger_before_the_post_existed_are_not_added_to_it_when_delivered_again(
    ddb, dynamodb_local, tmp_path
):
    """Two likes of a post not created yet go to the ledger; the post is then created, and the
    stream delivered again before any new batch of the shard wrote the post. The post's first
    write of the shard meets the ledger's checkpoint: the likes stay in the ledger only (2),
    the post gets none of them; a later like reaches the post once."""
    (tmp_path / "rules.yaml").write_text(LIKES_ONLY)
    rules = load_rules(tmp_path / "rules.yaml")
    name = "early-likes"
    make_table(ddb, name)
    run = _cli_run(tmp_path, name, dynamodb_local.endpoint_url)
    meta_key = {"PK": {"S": "POST#y"}, "SK": {"S": "META"}}

    def tally() -> Decimal | None:
        return _tally(ddb, name, meta_key)

    def ledger() -> dict[str, Decimal]:
        return {a.key: a.value for a in AggregateStore(ddb, name, rules).list("likes")}

    like(ddb, name, "POST#y", 1)
    like(ddb, name, "POST#y", 2)
    run()
    assert ledger() == {"POST#y#META": 2}
    ddb.put_item(TableName=name, Item=meta_key)
    run("--from-start")
    assert tally() == 0  # 2 before: counted in the ledger and on the post
    assert ledger() == {"POST#y#META": 2}
    like(ddb, name, "POST#y", 3)
    run()
    run("--from-start")
    assert tally() == 1 and ledger() == {"POST#y#META": 2}
    ddb.delete_table(TableName=name)


def stream_records(streams, arn: str) -> tuple[str, list[dict]]:
    """Every record of the stream's one shard, in Lambda's shape (DynamoDB Local: one shard)."""
    (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records: list[dict] = []
    while iterator:
        page = streams.get_records(ShardIterator=iterator)
        records += [to_lambda_record(r, arn) for r in page["Records"]]
        if not page["Records"]:
            break
        iterator = page.get("NextShardIterator")
    return shard["ShardId"], records


def test_a_failed_ledger_carry_holds_back_the_deleted_posts_deltas_and_retries_from_them(
    ddb, streams, tmp_path
):
    """A batch delivered again that holds a post's likes, counted on it before, and its delete:
    the carry is written before the likes reach the ledger. When it fails (throttled past the
    retries), the likes aimed at the post wait too, and the batch is retried from the first of
    them; the retry then counts nothing that reached the post."""
    (tmp_path / "rules.yaml").write_text(LIKES_ONLY)
    rules = load_rules(tmp_path / "rules.yaml")
    name = "carry-fails"
    arn = make_table(ddb, name)
    meta_key = {"PK": {"S": "POST#x"}, "SK": {"S": "META"}}
    ddb.put_item(TableName=name, Item=meta_key)
    like(ddb, name, "POST#x", 1)
    like(ddb, name, "POST#x", 2)
    shard_id, records = stream_records(streams, arn)
    first = create_processor(rules, ddb, name).process_event(
        {"Records": records, "shardId": shard_id}
    )
    assert first.response["batchItemFailures"] == []
    assert ddb.get_item(TableName=name, Key=meta_key)["Item"]["likeTally"] == {"N": "2"}
    ddb.delete_item(TableName=name, Key=meta_key)
    # the whole stream again, the post's delete in the same batch as its likes
    _, records = stream_records(streams, arn)
    assert [r["eventName"] for r in records] == ["INSERT", "INSERT", "INSERT", "MODIFY", "REMOVE"]
    ledger_key = "likes#POST%23x#META"
    client = FaultInjectingClient(ddb, layout=rules.layout, throttle={ledger_key: 1})
    options = WriterOptions(throttle_retries=0, backoff_seconds=0.001)
    processor = create_processor(rules, client, name, writer_options=options)
    failed = processor.process_event({"Records": records, "shardId": shard_id})
    like_1 = records[1]["dynamodb"]["SequenceNumber"]
    assert failed.response["batchItemFailures"] == [{"itemIdentifier": like_1}]
    assert failed.write.failed_items == 2  # the carry, and the likes held back with it
    ledger = {"PK": {"S": "AGGREGATES"}, "SK": {"S": ledger_key}}
    assert "Item" not in ddb.get_item(TableName=name, Key=ledger, ConsistentRead=True)
    retried = processor.process_event({"Records": records[1:], "shardId": shard_id})
    assert retried.response["batchItemFailures"] == []
    assert retried.write.ledger_carries == 1
    item = ddb.get_item(TableName=name, Key=ledger, ConsistentRead=True)["Item"]
    assert "value" not in item  # nothing of the two likes: they reached the post
    # the carry again (the REMOVE delivered a third time) changes nothing
    again = processor.process_event({"Records": records[-1:], "shardId": shard_id})
    assert (again.write.ledger_carries, again.write.already_applied) == (0, 1)
    assert ddb.get_item(TableName=name, Key=ledger, ConsistentRead=True)["Item"] == item
    ddb.delete_table(TableName=name)

"""Rebuild and drop-rule on DynamoDB Local: a rule whose definition changes is built as a new
generation while readers keep the old one, readers switch in one write, and the retired and the
removed generations are deleted. Expected values are computed here from the table's items with
plain Python (counts and sums per owner), not with the rules."""

from __future__ import annotations

import time
from collections import defaultdict
from decimal import Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet, load_rules, rule
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import create_table
from aggregator.operations.backfill import Backfill
from aggregator.operations.drop import DropRule
from aggregator.operations.rebuild import Rebuild
from tests.factories import ddb_json
from tests.integration.harness import delete, deploy, final_items, put

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

V1 = rule("per_owner", key="{owner}", leaderboard=True)  # paths per owner
V2 = rule("per_owner", key="{owner}", delta={"attribute": "points"}, leaderboard=True)
OTHER = rule("everything", key="ALL")
OLD, NEW = RuleSet.of(V1, OTHER), RuleSet.of(V2, OTHER)


def writes(ddb, name, start, n):
    for i in range(start, start + n):
        put(ddb, name, {"pk": f"P{i % 5}", "sk": f"PATH#{i}", "owner": "abc"[i % 3], "points": i})
    for i in range(start, start + n, 4):  # moves to another owner, new points
        put(
            ddb,
            name,
            {"pk": f"P{i % 5}", "sk": f"PATH#{i}", "owner": "abc"[(i + 1) % 3], "points": 2 * i},
        )
    for i in range(start + 1, start + n, 5):
        delete(ddb, name, f"P{i % 5}", f"PATH#{i}")


def truth(ddb, name, *, points):
    out = defaultdict(Decimal)
    for item in final_items(ddb, name):
        out[item["owner"]] += Decimal(item["points"]) if points else 1
    return {k: v for k, v in out.items() if v}


def read(store, rule_name="per_owner"):
    return {a.key: a.value for a in store.list(rule_name) if a.value}


def test_a_changed_rule_is_rebuilt_as_a_new_generation_and_readers_switch_at_once(
    ddb, streams, table
):
    name, arn = table
    writes(ddb, name, 0, 30)
    deploy(ddb, streams, name, arn, OLD)
    Backfill(OLD, TableStream(ddb, streams, name, arn), stream_lag_seconds=0).run()
    writes(ddb, name, 30, 10)
    deploy(ddb, streams, name, arn, OLD)
    assert read(AggregateStore(ddb, name, OLD)) == truth(ddb, name, points=False)

    # a changed definition without a rebuild is refused
    with pytest.raises(ConfigError, match=r"per_owner changed definition.*aggregator rebuild"):
        deploy(ddb, streams, name, arn, NEW)
    rebuild = Rebuild(
        NEW, TableStream(ddb, streams, name, arn), "per_owner", wait_seconds=0, stream_lag_seconds=0
    )
    first = rebuild.run()
    assert (first.outcome, first.serving, first.target) == ("requested", "per_owner", "per_owner@2")
    # the old definition still deploys (and counts generation 1) while the new one is awaited
    writes(ddb, name, 40, 10)
    deploy(ddb, streams, name, arn, OLD)
    counts_at_deploy = truth(ddb, name, points=False)

    deploy(ddb, streams, name, arn, NEW)  # takes generation 2 up: pending, fenced
    assert Manifest(ddb, name, NEW.layout).load()["per_owner@2"].status == "pending"
    writes(ddb, name, 50, 10)
    deploy(ddb, streams, name, arn, NEW)
    reader = AggregateStore(ddb, name, NEW, generation_cache_seconds=0)
    assert read(reader) == counts_at_deploy  # generation 1, as of the deployment

    done = rebuild.run()
    assert (done.outcome, done.serving, done.target) == ("switched", "per_owner", "per_owner@2")
    assert done.backfill is not None and done.backfill.items_scanned > 0
    writes(ddb, name, 60, 10)
    deploy(ddb, streams, name, arn, NEW)
    sums = truth(ddb, name, points=True)
    assert read(reader) == sums
    top = reader.top("per_owner", 3)
    assert [(a.key, a.value) for a in top] == sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))
    assert reader.manifest_reads >= 2  # the pointer is read again once the cache is stale
    # the other rule never changed and was never touched
    assert read(reader, "everything") == {"ALL": Decimal(len(final_items(ddb, name)))}
    # generation 1 stays, unchanged, until dropped; its definition is refused from now on
    assert read(AggregateStore(ddb, name, NEW, generations={})) == counts_at_deploy
    with pytest.raises(ConfigError, match="retired by a rebuild"):
        deploy(ddb, streams, name, arn, OLD)
    assert (
        Rebuild(NEW, TableStream(ddb, streams, name, arn), "per_owner").run().outcome == "unchanged"
    )

    # drop-rule with the rule still deployed deletes the retired generation only; a killed
    # drop leaves it "dropping" (its definition refused), and running it again finishes it
    def killed(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        DropRule(NEW, ddb, name, "per_owner", on_deleted=killed).run()
    assert Manifest(ddb, name, NEW.layout).load()["per_owner"].status == "dropping"
    with pytest.raises(ConfigError, match="being dropped"):
        deploy(ddb, streams, name, arn, OLD)
    dropped = DropRule(NEW, ddb, name, "per_owner").run()
    assert dropped.generations == ["per_owner"]
    assert dropped.fences_removed >= 1
    assert read(AggregateStore(ddb, name, NEW, generations={})) == {}
    assert read(reader) == sums
    assert set(Manifest(ddb, name, NEW.layout).load()) == {"per_owner@2", "everything"}
    with pytest.raises(ConfigError, match="no retired generation"):
        DropRule(NEW, ddb, name, "per_owner")

    # once removed from the definitions, every generation goes
    remaining = RuleSet.of(OTHER)
    deploy(ddb, streams, name, arn, remaining)
    gone = DropRule(remaining, ddb, name, "per_owner").run()
    assert gone.generations == ["per_owner@2"] and gone.items_deleted == len(sums)
    assert read(AggregateStore(ddb, name, NEW, generations={"per_owner": 2})) == {}
    states, serving = Manifest(ddb, name, NEW.layout).load_all()
    assert set(states) == {"everything"} and serving == {}
    # done: a second drop finds nothing, and says so (a misspelt name is not "dropped")
    with pytest.raises(ConfigError, match="has no rule 'per_owner'"):
        DropRule(remaining, ddb, name, "per_owner")
    # the rule can come back as a new rule
    deploy(ddb, streams, name, arn, NEW)
    assert Manifest(ddb, name, NEW.layout).load()["per_owner"].status == "pending"


def test_a_rebuild_is_refused_for_new_derived_and_unknown_rules(ddb, streams, table):
    name, arn = table
    hist = rule("by_count", source="per_owner", key="{value}")
    deploy(ddb, streams, name, arn, RuleSet.of(OTHER))
    with pytest.raises(ConfigError, match="not deployed: a new rule is backfilled"):
        Rebuild(NEW, TableStream(ddb, streams, name, arn), "per_owner").run()
    with pytest.raises(ConfigError, match="source of a derived rule"):
        Rebuild(RuleSet.of(V2, hist), TableStream(ddb, streams, name, arn), "per_owner")
    with pytest.raises(ConfigError, match="no rule named"):
        Rebuild(NEW, TableStream(ddb, streams, name, arn), "nope")
    with pytest.raises(ConfigError, match="no retired generation"):
        DropRule(RuleSet.of(OTHER), ddb, name, "everything")


RULE_FILE = """version: 1
table: {{partition_key: PK, sort_key: SK}}
rules:
  - name: likes_per_post
    match: {{SK: {{prefix: "LIKE#USER#"}}}}
    key: "{{PK}}"
{delta}"""


def test_the_commands_rebuild_and_drop_a_rule_on_a_live_table(ddb, dynamodb_local, tmp_path):

    rules_file = tmp_path / "likes.yaml"
    rules_file.write_text(RULE_FILE.format(delta=""))
    name = f"likes-{time.monotonic_ns()}"
    create_table(ddb, name, layout=load_rules(rules_file).layout)
    weights = {("a91f", "7c20"): 3, ("a91f", "11aa"): 1, ("b002", "7c20"): 5}
    for (post, user), weight in weights.items():
        like = {"PK": f"POST#{post}", "SK": f"LIKE#USER#{user}", "weight": weight}
        ddb.put_item(TableName=name, Item=ddb_json(like))
    cli = CliRunner()
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url, "-d", str(rules_file)]

    def ok(*args):
        result = cli.invoke(main, [*args, *common])
        assert result.exit_code == 0, result.output + result.stderr
        return " ".join(result.output.split())

    ok("run")
    ok("backfill", "--stream-lag", "0")
    assert ok("query", "get", "likes_per_post", "POST#a91f") == "likes_per_post POST#a91f: 2"
    rules_file.write_text(RULE_FILE.format(delta="    delta: {attribute: weight}\n"))
    refused = cli.invoke(main, ["run", *common])
    assert refused.exit_code == 1
    assert "changed definition under the same name" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "generation 2 (likes_per_post@2) requested; no handler" in ok(
        "rebuild", "likes_per_post", "--wait", "0"
    )
    ok("run")
    out = ok("rebuild", "likes_per_post", "--stream-lag", "0")
    assert "likes_per_post@2 active" in out
    assert (
        "readers switched from generation 1 (likes_per_post) to generation 2 (likes_per_post@2)"
        in out
    )
    assert ok("query", "get", "likes_per_post", "POST#a91f") == "likes_per_post POST#a91f: 4"
    assert ok("query", "get", "likes_per_post", "POST#b002") == "likes_per_post POST#b002: 5"
    # drop-rule says what it would delete, asks (no terminal here: --yes is needed), deletes
    assert ok("drop-rule", "likes_per_post", "--dry-run") == (
        f"drop-rule likes_per_post: likes_per_post (2 aggregate items) on table {name}: would "
        "be deleted (dry run; nothing deleted)"
    )
    nosuch = cli.invoke(main, ["drop-rule", "likes_per_pots", *common, "--yes"])
    assert nosuch.exit_code == 1
    assert nosuch.stderr == (
        f"error: table {name!r} has no rule 'likes_per_pots': no generation in its manifest and "
        "no aggregates (aggregator status lists the rules it has)\n"
    )
    unasked = cli.invoke(main, ["drop-rule", "likes_per_post", *common])
    assert unasked.exit_code == 1
    assert unasked.stderr == (
        f"error: drop-rule likes_per_post: likes_per_post (2 aggregate items) on table {name}: "
        "pass --yes to delete them (no terminal to ask on)\n"
    )
    assert ok("query", "get", "likes_per_post", "POST#a91f") == "likes_per_post POST#a91f: 4"
    out = ok("drop-rule", "likes_per_post", "--yes")
    assert "drop-rule likes_per_post: likes_per_post dropped; 2 aggregate items" in out
    ddb.delete_table(TableName=name)


def test_write_sharded_rules_rebuild_and_drop_with_their_partials(ddb, streams, table):
    """A rule that gains write_shards is a new definition (where it keeps its aggregates
    changed): it is rebuilt like any other, and dropping the retired generation and then the
    rule deletes the partials' item collections too."""
    name, arn = table
    plain = RuleSet.of(V1, OTHER)
    sharded = RuleSet.of(
        rule(
            "per_owner", key="{owner}", leaderboard=True, leaderboard_partitions=2, write_shards=3
        ),
        OTHER,
    )
    writes(ddb, name, 0, 30)
    deploy(ddb, streams, name, arn, plain)
    assert Rebuild(
        sharded, TableStream(ddb, streams, name, arn), "per_owner", wait_seconds=0
    ).run().outcome == ("requested")
    before = sorted(truth(ddb, name, points=False).values())[::-1][:2]
    deploy(ddb, streams, name, arn, sharded)  # takes generation 2 up
    # readers still read generation 1, whose index entries are not spread
    assert [a.value for a in AggregateStore(ddb, name, sharded).top("per_owner", 2)] == before
    writes(ddb, name, 30, 20)  # written through partials
    deploy(ddb, streams, name, arn, sharded)
    rebuild = Rebuild(
        sharded, TableStream(ddb, streams, name, arn), "per_owner", stream_lag_seconds=0
    )
    assert rebuild.run().outcome == "switched"
    deploy(ddb, streams, name, arn, sharded)
    store = AggregateStore(ddb, name, sharded)
    expected = truth(ddb, name, points=False)
    assert read(store) == expected
    assert [a.value for a in store.top("per_owner", 2)] == sorted(expected.values())[::-1][:2]

    def partial_collections() -> set[str]:
        items = ddb.scan(TableName=name, ConsistentRead=True)["Items"]
        return {i["pk"]["S"] for i in items if i["pk"]["S"].startswith("AGGREGATES#")}

    assert partial_collections() == {f"AGGREGATES#per_owner@2#{o}" for o in expected}
    DropRule(sharded, ddb, name, "per_owner").run()  # the retired generation 1
    assert read(store) == expected
    remaining = RuleSet.of(OTHER)
    deploy(ddb, streams, name, arn, remaining)
    DropRule(remaining, ddb, name, "per_owner").run()
    assert partial_collections() == set()

"""Dead letters on DynamoDB Local: a bad item counts nothing and heals when the application
fixes it (no backfill, no replay); the listing tells open from healed letters and clears the
healed; replay applies, exactly once, only letters of which nothing applied."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.engine import RecordFailure
from aggregator.core.exceptions import FailureCause
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.deadletters import (
    DeadLetterWriter,
    list_dead_letters,
    replay_dead_letters,
)
from tests.factories import stream_record
from tests.integration.harness import delete, pipeline, put, stored

pytestmark = pytest.mark.integration

# two rules read points: a bad item has two letters, and its item is read once for both
POINTS = RuleSet.of(
    rule("points", match={"sk": {"prefix": "PATH#"}}, key="{owner}", delta={"attribute": "points"}),
    rule("all_points", match={"sk": {"prefix": "PATH#"}}, key="ALL", delta={"attribute": "points"}),
)
RULE_FILE = """\
version: 1
rules:
  - name: points
    match: {sk: {prefix: "PATH#"}}
    key: "{owner}"
    delta: {attribute: points}
  - name: all_points
    match: {sk: {prefix: "PATH#"}}
    key: ALL
    delta: {attribute: points}
"""


def _cli(*args: str, endpoint: str, rules: Path | None = None):
    extra = ["-d", str(rules)] if rules is not None else []
    return CliRunner().invoke(
        main, [*args, "--endpoint-url", endpoint, *extra], env={"COLUMNS": "250"}
    )


def _letters_json(name: str, endpoint: str, rules: Path) -> list[tuple]:
    listed = _cli("dead-letters", "--table", name, "--json", endpoint=endpoint, rules=rules)
    assert listed.exit_code == 0, listed.output
    found = sorted(
        (d["item_key"]["sk"], d["attribute"], d["cause"], d["image"], d["state"], d["state_detail"])
        for d in json.loads(listed.stdout)
        if d["rule"] == "points"
    )
    # all_points's letters are the same items in the same states
    assert found == sorted(
        (d["item_key"]["sk"], d["attribute"], d["cause"], d["image"], d["state"], d["state_detail"])
        for d in json.loads(listed.stdout)
        if d["rule"] == "all_points"
    )
    return found


def test_bad_items_count_nothing_and_heal_when_fixed(dynamodb_local, ddb, streams, table, tmp_path):
    name, arn = table
    endpoint = dynamodb_local.endpoint_url
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "points.yaml").write_text(RULE_FILE)
    run = pipeline(ddb, streams, name, arn, rules=POINTS).runner.run

    # GIVEN good items, an item whose points are a string, one that breaks later, one deleted bad
    put(ddb, name, {"pk": "P", "sk": "PATH#1", "owner": "ann", "points": 2})
    put(ddb, name, {"pk": "P", "sk": "PATH#2", "owner": "ann", "points": "12.5"})  # bad
    put(ddb, name, {"pk": "P", "sk": "PATH#3", "owner": "bob", "points": 4})
    put(ddb, name, {"pk": "P", "sk": "PATH#4", "owner": "bob", "points": "x"})  # bad
    run()
    # THEN the bad items count nothing, and each is a dead letter that is open
    assert stored(ddb, name, POINTS) == {
        "points": {"ann": Decimal(2), "bob": Decimal(4)},
        "all_points": {"ALL": Decimal(6)},
    }
    assert _letters_json(name, endpoint, rules_dir) == [
        ("PATH#2", "points", "wrong-type", "NewImage", "open", _open("points", "str")),
        ("PATH#4", "points", "wrong-type", "NewImage", "open", _open("points", "str")),
    ]
    listing = _cli("dead-letters", "--table", name, endpoint=endpoint, rules=rules_dir)
    assert listing.exit_code == 0, listing.output
    assert "4 dead letter(s): 4 open" in listing.output
    assert listing.output.rstrip().splitlines()[-1] == (
        "wrong-type: fix the item (or delete it): its aggregate heals when it is written; "
        "then: aggregator dead-letters --clear-healed"
    )

    # WHEN the application fixes one bad item, deletes the other and breaks a good one
    put(ddb, name, {"pk": "P", "sk": "PATH#2", "owner": "ann", "points": Decimal("12.5")})
    delete(ddb, name, "P", "PATH#4")
    put(ddb, name, {"pk": "P", "sk": "PATH#3", "owner": "bob", "points": "four"})
    run()
    # THEN the fix adds its points, the delete retracts nothing, the broken item is retracted:
    # each aggregate is the sum over the items as they are, bad ones counting nothing
    assert stored(ddb, name, POINTS) == {
        "points": {"ann": Decimal("14.5")},
        "all_points": {"ALL": Decimal("14.5")},
    }
    assert _letters_json(name, endpoint, rules_dir) == [
        ("PATH#2", "points", "wrong-type", "NewImage", "healed", "item fixed"),
        ("PATH#3", "points", "wrong-type", "NewImage", "open", _open("points", "str")),
        ("PATH#4", "points", "wrong-type", "NewImage", "healed", "item deleted"),
    ]

    # a replay never applies a bad item's letter (its record's other image applied already)
    replay = _cli(
        "replay-dead-letters", "--table", name, "--min-age", "0", endpoint=endpoint, rules=rules_dir
    )
    assert replay.exit_code == 0, replay.output
    assert "replayed 0" in replay.output and "6 letter(s) of bad items left alone" in replay.output
    assert stored(ddb, name, POINTS)["points"] == {"ann": Decimal("14.5")}

    # --clear-healed deletes the healed letters only
    cleared = _cli(
        "dead-letters", "--table", name, "--clear-healed", endpoint=endpoint, rules=rules_dir
    )
    assert cleared.exit_code == 0, cleared.output
    assert "cleared 4 healed dead letter(s); 2 left" in cleared.output
    assert [d.item_key for d in list_dead_letters(ddb, name)] == [{"pk": "P", "sk": "PATH#3"}] * 2

    # and fixing the last one heals bob's total with no backfill
    put(ddb, name, {"pk": "P", "sk": "PATH#3", "owner": "bob", "points": 5})
    run()
    assert stored(ddb, name, POINTS) == {
        "points": {"ann": Decimal("14.5"), "bob": Decimal(5)},
        "all_points": {"ALL": Decimal("19.5")},
    }
    assert _letters_json(name, endpoint, rules_dir)[0][4:] == ("healed", "item fixed")


def _open(attribute: str, kind: str) -> str:
    return f"delta attribute {attribute!r} is {kind}, not a number"


def test_replay_applies_a_letter_of_which_nothing_applied_once(dynamodb_local, ddb, table):
    # GIVEN a letter of which nothing applied (as a sum past 38 digits leaves, or a letter of an
    # earlier release, which failed a record as a whole)
    name, _ = table
    raw = stream_record(
        "INSERT", None, {"pk": "P", "sk": "PATH#1", "owner": "ann", "points": 3}, seq=7
    )
    failure = RecordFailure(
        "7",
        "e7",
        "points",
        "the batch's sum needs more than 38 digits",
        raw,
        FailureCause.LIMIT_EXCEEDED,
    )
    DeadLetterWriter(ddb, name).write([failure], shard_id="shard-1")
    (letter,) = list_dead_letters(ddb, name)
    assert (letter.image, letter.replayable) == (None, True)

    # WHEN it is replayed: not before 25 h by default (Lambda may deliver its batch again)
    waiting = replay_dead_letters(ddb, name, POINTS)
    assert (waiting.too_recent, waiting.replayed) == (1, 0)
    later = replay_dead_letters(ddb, name, POINTS, clock=lambda: time.time() + 25 * 3600 + 1)
    # THEN it applies once, and a second replay finds nothing
    assert (later.replayed, later.still_failing) == (1, [])
    assert stored(ddb, name, POINTS)["points"] == {"ann": Decimal(3)}
    again = replay_dead_letters(ddb, name, POINTS, min_age_seconds=0)
    assert (again.replayed, again.already_replayed) == (0, 0)
    assert stored(ddb, name, POINTS)["points"] == {"ann": Decimal(3)}
    assert list(list_dead_letters(ddb, name)) == []

"""Dead letters: listed, then replayed exactly once after the rules are fixed."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.deadletters import list_dead_letters, replay_dead_letters
from tests.integration.harness import pipeline, put, stored

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

BROKEN = RuleSet.of(
    rule("points", match={"sk": {"prefix": "PATH#"}}, key="{owner}", delta={"attribute": "points"})
)
FIXED = RuleSet.of(
    rule(
        "points",
        match={"sk": {"prefix": "PATH#"}},
        key="{owner}",
        delta={"attribute": "points"},
        description="points, now also for paths that carry them as a bonus",
    )
)
COUNTING = RuleSet.of(rule("points", match={"sk": {"prefix": "PATH#"}}, key="{owner}"))


def test_replay_applies_each_dead_letter_once(dynamodb_local, ddb, streams, table):
    name, arn = table
    put(ddb, name, {"pk": "P1", "sk": "PATH#1", "owner": "ann", "points": 2})
    put(ddb, name, {"pk": "P1", "sk": "PATH#2", "owner": "ann"})  # no points: dead letter
    put(ddb, name, {"pk": "P2", "sk": "PATH#3", "points": 4})  # no owner: dead letter
    pipeline(ddb, streams, name, arn, rules=BROKEN).runner.run()
    assert stored(ddb, name, BROKEN) == {"points": {"ann": Decimal(2)}}

    letters = list(list_dead_letters(ddb, name))
    assert [(d.rule, d.cause, d.replayable, d.reason) for d in letters] == [
        ("points", "missing-attribute", True, "NewImage: delta attribute 'points' is missing"),
        ("points", "missing-attribute", True, "NewImage: key attribute 'owner' is missing"),
    ]
    result = CliRunner().invoke(
        main,
        ["dead-letters", "--table", name, "--endpoint-url", dynamodb_local.endpoint_url],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0
    assert "2 dead letter(s), 2 replayable" in result.output
    assert "cause" in result.output and "replayable" in result.output  # the table's columns
    # each letter names its item's key and the failing attribute (below, in JSON: the table's
    # cells wrap at the terminal's width), and says how to repair it
    assert result.output.rstrip().splitlines()[-1] == (
        "missing-attribute: fix the item, then: aggregator reconcile --repair --rules points"
    )
    listed = CliRunner().invoke(
        main,
        ["dead-letters", "--table", name, "--endpoint-url", dynamodb_local.endpoint_url, "--json"],
    )
    assert listed.exit_code == 0, listed.output
    assert [
        (d["rule"], d["item_key"], d["attribute"], d["cause"], d["replayable"])
        for d in json.loads(listed.output)
    ] == [
        ("points", {"pk": "P1", "sk": "PATH#2"}, "points", "missing-attribute", True),
        ("points", {"pk": "P2", "sk": "PATH#3"}, "owner", "missing-attribute", True),
    ]

    # replaying with rules that still fail changes nothing and keeps both
    # by default letters younger than 25 h wait: Lambda may still deliver their batch again
    result = CliRunner().invoke(
        main,
        ["replay-dead-letters", "--table", name, "--endpoint-url", dynamodb_local.endpoint_url],
        env={"AGGREGATOR_DEFINITIONS": str(ROOT / "definitions" / "cloud_adventure.yaml")},
    )
    assert result.exit_code == 0, result.output
    assert "replayed 0, no change 0, already replayed 0, too recent 2, still failing 0" in (
        result.output
    )
    waiting = replay_dead_letters(ddb, name, COUNTING)
    assert (waiting.too_recent, waiting.replayed, waiting.still_failing) == (2, 0, [])
    later = replay_dead_letters(ddb, name, BROKEN, clock=lambda: time.time() + 25 * 3600 + 1)
    assert (later.too_recent, later.replayed, len(later.still_failing)) == (0, 0, 2)
    still = replay_dead_letters(ddb, name, BROKEN, min_age_seconds=0)
    assert (still.replayed, len(still.still_failing)) == (0, 2)

    # the fixed rule (count paths) evaluates ann's record; bob's has no owner and stays
    first = replay_dead_letters(ddb, name, COUNTING, min_age_seconds=0)
    assert (first.replayed, first.already_replayed, len(first.still_failing)) == (1, 0, 1)
    assert stored(ddb, name, COUNTING) == {"points": {"ann": Decimal(3)}}
    second = replay_dead_letters(ddb, name, COUNTING, min_age_seconds=0)
    assert (second.replayed, len(second.still_failing)) == (0, 1)
    assert stored(ddb, name, COUNTING) == {"points": {"ann": Decimal(3)}}
    assert [d.reason for d in list_dead_letters(ddb, name)] == [
        "NewImage: key attribute 'owner' is missing"
    ]

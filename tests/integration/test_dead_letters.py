"""Dead letters: listed, then replayed exactly once after the rules are fixed."""

from __future__ import annotations

from decimal import Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.deadletters import list_dead_letters, replay_dead_letters
from tests.integration.harness import pipeline, put, stored

pytestmark = pytest.mark.integration

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

    # replaying with rules that still fail changes nothing and keeps both
    still = replay_dead_letters(ddb, name, BROKEN)
    assert (still.replayed, len(still.still_failing)) == (0, 2)

    # the fixed rule (count paths) evaluates ann's record; bob's has no owner and stays
    first = replay_dead_letters(ddb, name, COUNTING)
    assert (first.replayed, first.already_replayed, len(first.still_failing)) == (1, 0, 1)
    assert stored(ddb, name, COUNTING) == {"points": {"ann": Decimal(3)}}
    second = replay_dead_letters(ddb, name, COUNTING)
    assert (second.replayed, len(second.still_failing)) == (0, 1)
    assert stored(ddb, name, COUNTING) == {"points": {"ann": Decimal(3)}}
    assert [d.reason for d in list_dead_letters(ddb, name)] == [
        "NewImage: key attribute 'owner' is missing"
    ]

"""The backfill function's entry point (aggregator.backfill_handler): it hands the task to
``run_task`` with the invocation's remaining time, refuses other events and other Regions, and
writes nothing then."""

from __future__ import annotations

from typing import Any

import pytest

from aggregator import backfill_handler
from aggregator.core.exceptions import ConfigError
from aggregator.dynamodb.tablecheck import HomeRegionError


class Context:
    function_name = "backfill"
    memory_limit_in_mb = 1769
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:backfill"
    aws_request_id = "r-1"

    def get_remaining_time_in_millis(self) -> int:
        return 123_000


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGGREGATOR_TABLE_NAME", "orders")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    backfill_handler.reset()


def test_a_task_runs_with_the_invocations_remaining_time(env, monkeypatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(backfill_handler, "_rules_and_table", lambda settings: ("R", "T"))

    def run_task(request, *, rules, table, remaining_seconds):
        seen.update(request=request, rules=rules, table=table, remaining=remaining_seconds)
        return {"done": False}

    monkeypatch.setattr(backfill_handler, "run_task", run_task)
    event = {"aggregator_backfill": {"task": "scan", "backfill_id": "b", "segment": 3}}
    assert backfill_handler.handler(event, Context()) == {"done": False}
    assert seen == {
        "request": {"task": "scan", "backfill_id": "b", "segment": 3},
        "rules": "R",
        "table": "T",
        "remaining": 123.0,
    }


def test_an_event_that_is_no_task_is_refused(env) -> None:
    with pytest.raises(ConfigError, match="not a backfill task"):
        backfill_handler.handler({"Records": []}, Context())


def test_outside_the_home_region_nothing_runs(env, monkeypatch) -> None:
    monkeypatch.setenv("AGGREGATOR_HOME_REGION", "us-east-1")
    monkeypatch.setattr(
        backfill_handler, "_rules_and_table", lambda settings: pytest.fail("built a client")
    )
    event = {"aggregator_backfill": {"task": "start"}}
    with pytest.raises(HomeRegionError):
        backfill_handler.handler(event, Context())

"""The backfill's state machine definition, executed (not only linted) by moto's interpreter of
the Amazon States Language (``mock_aws(config={"stepfunctions": {"execute_state_machine":
True}})``), Distributed Maps and the Parallel state included.

moto runs a Lambda task by calling Lambda, which it runs only in Docker; here its call
(``lambda_eval_utils._invoke_lambda_function``, what the ``arn:aws:states:::lambda:invoke``
integration calls) is replaced by :class:`FakeBackfill`, a stand-in of the task contract with a
tiny in-memory protocol: a segment needs 2 or 3 invocations, the collector is fenced at its
second call and done only at its first call after ``scan_end``, a join or reduce bucket needs 2
or 3. Each invocation is recorded in order; the tests check the order the protocol needs and that
every loop invokes its task again, with the same input, until it is done.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

from aggregator.deploy.backfill_machine import (
    EXECUTION_INPUT,
    FUNCTION_ARN_PLACEHOLDER,
    MAP_STATES,
    TASK_REFUSALS,
    TRANSIENT_LAMBDA_ERRORS,
    backfill_definition,
)

FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:backfill"
ROLE_ARN = "arn:aws:iam::123456789012:role/backfill-state-machine"
SEGMENTS, JOIN_BUCKETS, REDUCE_BUCKETS, WORKERS = 5, 3, 2, 2
EXECUTION = {
    "backfill_id": None,
    "rules": ["likes_by_post"],
    "segments": SEGMENTS,
    "join_buckets": JOIN_BUCKETS,
    "reduce_buckets": REDUCE_BUCKETS,
    "workers": WORKERS,
    "max_rcu": None,
    "stream_lag_seconds": 1,
}
BACKFILL_ID = "bf-0001"


def needed(task: str, key: int) -> int:
    """Invocations a segment or bucket needs before it is done: 2 or 3."""
    return 2 + (key + len(task)) % 2


@dataclass
class Call:
    seq: int
    task: str
    key: int | None  # the segment or bucket
    payload: dict[str, Any]
    response: dict[str, Any]


@dataclass
class FakeBackfill:
    """The backfill function's task contract over an in-memory protocol state."""

    fail: tuple[str, int] | None = None
    """``(task, key)`` whose first invocation the task refuses (``ConfigError``)."""
    throttle: tuple[str, int] | None = None
    """``(task, key)`` whose first invocation Lambda refuses (TooManyRequestsException)."""
    calls: list[Call] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    counts: dict[tuple[str, int | None], int] = field(default_factory=dict)
    """Invocations by ``(task, key)``, refused ones included."""
    scan_ended: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, parameters: dict[str, Any], region: str, state_credentials: Any) -> Any:
        assert parameters["FunctionName"] == FUNCTION_ARN
        payload = json.loads(parameters["Payload"])
        event = payload["aggregator_backfill"]
        task = event["task"]
        key = event.get("segment", event.get("bucket"))
        with self.lock:
            attempt = self.counts.get((task, key), 0)
            self.counts[(task, key)] = attempt + 1
            self.running[task] = self.running.get(task, 0) + 1
            self.peak[task] = max(self.peak.get(task, 0), self.running[task])
        try:
            if self.throttle == (task, key) and attempt == 0:
                raise ClientError(
                    {
                        "Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"},
                        "ResponseMetadata": {"HTTPStatusCode": 429, "RequestId": "r"},
                    },
                    "Invoke",
                )
            if self.fail == (task, key) and attempt == 0:
                # a task's refusal (its class name is the error's name, as Lambda reports it)
                error = {"errorType": "ConfigError", "errorMessage": "refused"}
                return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": error}
            time.sleep(0.005)  # long enough for the map's workers to overlap
            with self.lock:
                answered = len(self.of(task, key))  # invocations the contract saw
                response = self._respond(task, key, event, answered)
                self.calls.append(Call(len(self.calls), task, key, payload, response))
            return {"StatusCode": 200, "Payload": response}
        finally:
            with self.lock:
                self.running[task] -= 1

    def _respond(self, task: str, key: int | None, event: dict[str, Any], answered: int) -> Any:
        if task == "start":
            return {
                "backfill_id": BACKFILL_ID,
                "segments": list(range(event["segments"])),
                "join_buckets": list(range(event["join_buckets"])),
                "reduce_buckets": list(range(event["reduce_buckets"])),
                "workers": event["workers"],
            }
        assert event["backfill_id"] == BACKFILL_ID, event
        if task == "collect":
            # fenced from the second call on; done at the first call after the scan's end
            fenced = answered >= 1
            done = fenced and self.scan_ended
            if not done:
                time.sleep(0.005)  # a collector uses its invocation, it does not spin
            return {"done": done, "fenced": fenced}
        if task == "scan_end":
            self.scan_ended = True
            return {"done": True}
        if task == "finish":
            return {"done": True, "summary": {"aggregates": 7}}
        assert key is not None
        return {"done": answered + 1 >= needed(task, key)}

    # what happened

    def of(self, task: str, key: int | None = None) -> list[Call]:
        return [c for c in self.calls if c.task == task and (key is None or c.key == key)]

    def first(self, task: str) -> int:
        return min(c.seq for c in self.of(task))

    def last(self, task: str) -> int:
        return max(c.seq for c in self.of(task))


@pytest.fixture
def sfn() -> Iterator[Any]:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.client("stepfunctions", region_name="us-east-1")


def run(
    sfn: Any, fake: FakeBackfill, monkeypatch: pytest.MonkeyPatch, execution: dict[str, Any]
) -> dict[str, Any]:
    """Create the state machine from the definition, run one execution to its end; its
    ``DescribeExecution`` with the history's event types under ``"events"``."""
    monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", fake.invoke)
    definition = json.dumps(backfill_definition()).replace(FUNCTION_ARN_PLACEHOLDER, FUNCTION_ARN)
    machine = sfn.create_state_machine(name="backfill", definition=definition, roleArn=ROLE_ARN)
    arn = sfn.start_execution(
        stateMachineArn=machine["stateMachineArn"], input=json.dumps(execution)
    )["executionArn"]
    deadline = time.monotonic() + 30
    while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution did not end"
        time.sleep(0.05)
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return {**described, "events": [e["type"] for e in events]}


def test_the_definition_runs_the_protocol_in_order(
    sfn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBackfill(throttle=("join", 1))
    ended = run(sfn, fake, monkeypatch, EXECUTION)
    assert ended["status"] == "SUCCEEDED", ended
    calls = fake.calls

    # start first, with the execution's input
    assert calls[0].task == "start"
    assert calls[0].payload == {"aggregator_backfill": {"task": "start", **EXECUTION}}
    assert [c.task for c in calls].count("start") == 1

    # the collector is fenced before any scan: no scan before its fenced answer
    fenced = min(c.seq for c in fake.of("collect") if c.response["fenced"])
    assert fake.first("scan") > fenced
    # every segment scanned until done, exactly as many times as it needed; then scan_end
    for segment in range(SEGMENTS):
        scans = fake.of("scan", segment)
        assert [c.response["done"] for c in scans] == [False] * (needed("scan", segment) - 1) + [
            True
        ]
    (scan_end,) = fake.of("scan_end")
    assert scan_end.seq > fake.last("scan")
    # the collector goes on through the scan and is done only after scan_end
    collector_done = [c.seq for c in fake.of("collect") if c.response["done"]]
    assert len(collector_done) == 1 and collector_done[0] > scan_end.seq
    assert collector_done[0] == fake.last("collect")
    # join only after the collector is done; reduce after every join; finish last
    assert fake.first("join") > collector_done[0]
    for task, count in (("join", JOIN_BUCKETS), ("reduce", REDUCE_BUCKETS)):
        for bucket in range(count):
            assert len(fake.of(task, bucket)) == needed(task, bucket), (task, bucket)
            assert fake.of(task, bucket)[-1].response["done"] is True
    assert fake.first("reduce") > fake.last("join")
    assert calls[-1].task == "finish" and len(fake.of("finish")) == 1

    # every invocation of a loop had the same input
    by_loop: dict[tuple[str, int | None, bool], set[str]] = {}
    for call in calls:
        fence = bool(call.payload["aggregator_backfill"].get("until_fenced"))
        by_loop.setdefault((call.task, call.key, fence), set()).add(json.dumps(call.payload))
    assert all(len(inputs) == 1 for inputs in by_loop.values()), by_loop
    # the fence loop asks the collector to return once fenced; the collector's own loop does not
    assert {k for k in by_loop if k[0] == "collect"} == {
        ("collect", None, True),
        ("collect", None, False),
    }
    assert json.loads(next(iter(by_loop[("scan", 3, False)]))) == {
        "aggregator_backfill": {"task": "scan", "backfill_id": BACKFILL_ID, "segment": 3}
    }

    # the throttled invocation was retried (the transient error is not a call of the contract)
    assert fake.counts[("join", 1)] == needed("join", 1) + 1
    # the maps ran as Distributed Maps (Map Runs), at most `workers` items at once
    assert ended["events"].count("MapRunStarted") == len(MAP_STATES)
    assert ended["events"].count("MapRunSucceeded") == len(MAP_STATES)
    for task in ("scan", "join", "reduce"):
        assert fake.peak[task] <= WORKERS, (task, fake.peak)
    # the output: the input, start's answer, finish's summary
    output = json.loads(ended["output"])
    assert {key: output[key] for key in EXECUTION_INPUT} == EXECUTION
    assert output["backfill"] == {
        "backfill_id": BACKFILL_ID,
        "segments": list(range(SEGMENTS)),
        "join_buckets": list(range(JOIN_BUCKETS)),
        "reduce_buckets": list(range(REDUCE_BUCKETS)),
        "workers": WORKERS,
    }
    assert output["finish"] == {"summary": {"aggregates": 7}}


def test_a_tasks_refusal_fails_the_execution_without_a_retry(
    sfn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBackfill(fail=("scan_end", None))
    ended = run(sfn, fake, monkeypatch, EXECUTION)
    assert ended["status"] == "FAILED"
    assert fake.counts[("scan_end", None)] == 1  # not retried: a refusal is final
    assert not fake.of("join") and not fake.of("finish")


def test_a_failed_item_is_not_retried_and_fails_its_map_run(
    sfn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child execution that fails is counted as a failed item of its Map Run, and the Map Run
    tolerates none (``ToleratedFailureCount: 0``). moto 5.2.5 counts the failure but never
    fails a Map Run over its tolerance (AWS does: Step Functions Developer Guide, "Setting
    failure thresholds for Distributed Map states"), so the execution goes on here: what is
    checked is the count, and the tolerance the definition declares."""
    fake = FakeBackfill(fail=("scan", 2))
    ended = run(sfn, fake, monkeypatch, EXECUTION)
    assert fake.counts[("scan", 2)] == 1
    (scan_run, *_) = sfn.list_map_runs(executionArn=ended["executionArn"])["mapRuns"]
    described = sfn.describe_map_run(mapRunArn=scan_run["mapRunArn"])
    assert described["itemCounts"]["failed"] == 1
    assert described["toleratedFailurePercentage"] == 0
    assert described["toleratedFailureCount"] == 0


def test_the_definition_names_what_the_contract_needs() -> None:
    """What the execution above cannot tell: the retried errors, the map's mode, and that the
    function's ARN is the only substitution."""
    definition = backfill_definition()
    text = json.dumps(definition)
    assert text.count("${") == text.count(FUNCTION_ARN_PLACEHOLDER) > 0
    assert json.dumps(backfill_definition("arn:x")).count("arn:x") == text.count(
        FUNCTION_ARN_PLACEHOLDER
    )

    def states(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, state in node["States"].items():
            yield name, state
            for branch in state.get("Branches", []):
                yield from states(branch)
            if "ItemProcessor" in state:
                yield from states(state["ItemProcessor"])

    every = dict(states(definition))
    tasks = {name: s for name, s in every.items() if s["Type"] == "Task"}
    assert len(tasks) == 8  # start, fence, collect, scan, scan_end, join, reduce, finish
    for state in tasks.values():
        refused, transient, died, other = state["Retry"]
        # a task's refusal is final; every other error is retried (a retry is harmless)
        assert refused == {"ErrorEquals": list(TASK_REFUSALS), "MaxAttempts": 0}
        assert transient["ErrorEquals"] == list(TRANSIENT_LAMBDA_ERRORS)
        assert transient["BackoffRate"] > 1 and transient["MaxAttempts"] >= 3
        # an invocation that died (out of memory, timed out) resumes from its last commit
        assert died["ErrorEquals"] == ["Lambda.Unknown"] and died["MaxAttempts"] >= 1
        assert other["ErrorEquals"] == ["States.ALL"] and other["MaxAttempts"] >= 1
    maps = {name: s for name, s in every.items() if s["Type"] == "Map"}
    assert set(maps) == set(MAP_STATES)
    for name, state in maps.items():
        assert state["ItemProcessor"]["ProcessorConfig"] == {
            "Mode": "DISTRIBUTED",
            "ExecutionType": "STANDARD",
        }
        assert state["MaxConcurrencyPath"] == "$.backfill.workers"
        assert state["ItemsPath"] == f"$.backfill.{MAP_STATES[name]}"
        assert state["ResultPath"] is None  # the children's outputs are dropped
        assert state["ToleratedFailureCount"] == 0

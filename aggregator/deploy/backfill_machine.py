"""The backfill's state machine: its Amazon States Language definition, one source for the SAM
template (``template.yaml``'s ``BackfillStateMachine``, rendered by ``aggregator template``) and
the CDK construct.

The shape (the task contract of the distributed backfill: each task is one invocation of the
backfill function with the event ``{"aggregator_backfill": {"task": ..., "backfill_id": ...}}``)::

    Start -> Fence (collect until fenced)
          -> ScanAndCollect: Parallel[ Collect until done ;
                                       Scan: Map(segments){ scan until done } -> ScanEnd ]
          -> Join: Map(join buckets){ join until done }
          -> Reduce: Map(reduce buckets){ reduce until done }
          -> Finish

Every loop is a ``Task`` followed by a ``Choice`` on the task's ``done`` (``fenced`` for the
fence): back to the same ``Task``, with the same input (the task's result goes to a path of its
own, ``ResultPath``), or on. The three maps are Distributed Maps (``ItemProcessor.ProcessorConfig``
``Mode: DISTRIBUTED``, ``ExecutionType: STANDARD``): each item runs as a child workflow execution
with its own history, so the number of segments and buckets does not bound the parent's history
(an inline Map's iterations would all count against the parent's 25,000 events), and
``MaxConcurrencyPath: $.backfill.workers`` bounds how many run at once (Step Functions
Developer Guide, "Map state", ``MaxConcurrencyPath``; "Using Map state in Distributed mode").

Sources: Step Functions Developer Guide, "Step Functions service quotas" (25,000 events in an
execution's history; 256 KiB of input or output per state; a Standard execution lasts at most one
year), "Handling transient Lambda service exceptions" (the errors retried here), "Map state in
Distributed mode" and "ResultWriter" (a Map Run's result is the array of its child executions'
outputs unless exported to S3: each child here outputs ``{}`` and the map discards it, so 10,000
segments add 30 KB); Lambda Developer Guide, "Lambda quotas" (a function runs 900 seconds at
most: every task stops itself well within that, and loops).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EXECUTION_INPUT",
    "FUNCTION_ARN_PLACEHOLDER",
    "FUNCTION_ARN_VARIABLE",
    "LAMBDA_INVOKE",
    "MAP_STATES",
    "TRANSIENT_LAMBDA_ERRORS",
    "backfill_definition",
]

FUNCTION_ARN_VARIABLE = "BackfillFunctionArn"
"""The name the definition gives the function's ARN: ``DefinitionSubstitutions`` (CloudFormation,
``AWS::StepFunctions::StateMachine``) replaces ``${BackfillFunctionArn}`` with it."""
FUNCTION_ARN_PLACEHOLDER = "${" + FUNCTION_ARN_VARIABLE + "}"

LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
"""The optimized Lambda integration: a synchronous ``Invoke``, the function's response under
``Payload`` (Step Functions Developer Guide, "Invoke an AWS Lambda function with Step
Functions"). The partition-less form is valid in every partition."""

TRANSIENT_LAMBDA_ERRORS = (
    "Lambda.ClientExecutionTimeoutException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
)
"""Lambda's transient errors, retried with exponential backoff (Step Functions Developer Guide,
"Handling transient Lambda service exceptions"; ``TooManyRequestsException``: the account's or
the function's concurrency is exhausted). A task's own error (a refusal, ``ConfigError``) fails
the execution; ``start`` resumes the backfill under way when it is started again."""

TASK_REFUSALS = ("ConfigError", "HomeRegionError")
"""A task's own refusals (its message says what to do): never retried, they fail the execution."""

RETRY: list[dict[str, Any]] = [
    {"ErrorEquals": list(TASK_REFUSALS), "MaxAttempts": 0},
    {
        "ErrorEquals": list(TRANSIENT_LAMBDA_ERRORS),
        "IntervalSeconds": 2,
        "MaxAttempts": 6,
        "BackoffRate": 2,
        "MaxDelaySeconds": 60,
        "JitterStrategy": "FULL",
    },
    {
        "ErrorEquals": ["Lambda.Unknown"],
        "IntervalSeconds": 1,
        "MaxAttempts": 3,
        "BackoffRate": 2,
    },
    {
        "ErrorEquals": ["States.ALL"],
        "IntervalSeconds": 5,
        "MaxAttempts": 3,
        "BackoffRate": 3,
        "JitterStrategy": "FULL",
    },
]
"""The retriers, first match wins (Step Functions Developer Guide, "Handling errors in Step
Functions workflows"): a task's refusal (:data:`TASK_REFUSALS`) never; Lambda's transient
errors six more times, 2, 4, 8, ... seconds apart (at most 60, fully jittered); an invocation
that died (``Lambda.Unknown``: "out-of-memory errors and function timeouts", Step Functions
Developer Guide, "Handle Lambda service exceptions") three more times, 1 s apart and doubling;
any other error of a task (a request DynamoDB kept refusing after the client's own retries, a
connection lost) three more times, 5, 15, 45 s apart. Every task makes a retry harmless: it
resumes from its last commit (:mod:`aggregator.operations.backfill.distributed`, "Killed
tasks")."""

EXECUTION_INPUT = (
    "backfill_id",
    "rules",
    "segments",
    "join_buckets",
    "reduce_buckets",
    "workers",
    "max_rcu",
    "stream_lag_seconds",
)
"""The keys of the execution's input, every one present (``null`` where the contract allows it:
``backfill_id``, to begin a new backfill rather than resume the one ``aggregator backfill
--on-aws`` began; ``rules``; ``max_rcu``)."""

MAP_STATES = {"Scan": "segments", "Join": "join_buckets", "Reduce": "reduce_buckets"}
"""Each Distributed Map state and the list it maps over (``start``'s response, under
``$.backfill``)."""


def _task(
    function_arn: str, task: str, *, extra: dict[str, Any] | None = None, returns: tuple[str, ...]
) -> dict[str, Any]:
    """A ``Task`` state invoking ``task`` for the backfill in ``$.backfill_id`` (a map's item) or
    ``$.backfill.backfill_id``; ``returns``: the response's keys kept as the task's result."""
    return {
        "Type": "Task",
        "Resource": LAMBDA_INVOKE,
        "Parameters": {
            "FunctionName": function_arn,
            "Payload": {"aggregator_backfill": {"task": task, **(extra or {})}},
        },
        "ResultSelector": {f"{key}.$": f"$.Payload.{key}" for key in returns},
        "Retry": RETRY,
    }


def _loop(
    function_arn: str,
    task: str,
    *,
    name: str,
    backfill_id: str,
    extra: dict[str, Any] | None = None,
    until: str = "done",
    then: dict[str, Any],
    returns: tuple[str, ...] = ("done",),
) -> dict[str, dict[str, Any]]:
    """``name`` (the ``Task``), ``name + "Done?"`` (a ``Choice`` on ``$.<name>.<until>``, back to
    the task until true) and ``then``, the state that follows it (under ``name + "Done"``)."""
    state = _task(
        function_arn, task, extra={"backfill_id.$": backfill_id, **(extra or {})}, returns=returns
    )
    return {
        name: {**state, "ResultPath": f"$.{name.lower()}", "Next": f"{name}Done?"},
        f"{name}Done?": {
            "Type": "Choice",
            "Choices": [
                {
                    "Variable": f"$.{name.lower()}.{until}",
                    "BooleanEquals": True,
                    "Next": f"{name}Done",
                }
            ],
            "Default": name,
        },
        f"{name}Done": then,
    }


def _map(function_arn: str, name: str, task: str, item: str, *, then: str) -> dict[str, Any]:
    """A Distributed Map over ``$.backfill.<MAP_STATES[name]>``: one child execution per item,
    ``task`` until done; at most ``$.backfill.workers`` at once."""
    child = _loop(
        function_arn,
        task,
        name=f"{name}Item",
        backfill_id="$.backfill_id",
        extra={f"{item}.$": f"$.{item}"},
        # a child's output is part of the map's result (discarded): keep it two bytes long
        then={"Type": "Pass", "Result": {}, "End": True},
    )
    return {
        "Type": "Map",
        "Label": name,
        "ItemsPath": f"$.backfill.{MAP_STATES[name]}",
        "ItemSelector": {
            "backfill_id.$": "$.backfill.backfill_id",
            f"{item}.$": "$$.Map.Item.Value",
        },
        # the backfill's own setting (start's answer), which its read budget is shared by
        "MaxConcurrencyPath": "$.backfill.workers",
        # a failed item (a task's error other than Lambda's transient ones) fails the map
        "ToleratedFailureCount": 0,
        "ItemProcessor": {
            "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
            "StartAt": f"{name}Item",
            "States": child,
        },
        "ResultPath": None,
        "Next": then,
    }


def backfill_definition(function_arn: str = FUNCTION_ARN_PLACEHOLDER) -> dict[str, Any]:
    """The backfill's state machine definition (Amazon States Language, JSONPath).

    Parameters
    ----------
    function_arn
        The backfill function's ARN; by default the placeholder ``${BackfillFunctionArn}``,
        which the state machine's ``DefinitionSubstitutions`` replace.

    Returns
    -------
    dict
        The definition, ``json.dumps``-able. Its execution takes the input
        ``{"backfill_id": id | null, "rules": [...] | null, "segments": S, "join_buckets": H,
        "reduce_buckets": R, "workers": W, "max_rcu": N | null, "stream_lag_seconds": L}``
        (:data:`EXECUTION_INPUT`). ``start`` gets all of it (with a ``backfill_id``, the one
        ``aggregator backfill --on-aws`` began, it resumes that one and its settings stand) and
        answers ``{"backfill_id", "workers", "segments": [0..S-1], "join_buckets": [0..H-1],
        "reduce_buckets": [0..R-1]}``, kept as ``$.backfill``; ``workers`` (1 or more) is each
        map's ``MaxConcurrency``, the backfill's own (its read budget is shared by that many).
        The execution's output is its input with ``backfill`` and ``finish``
        (``{"summary": ...}``, ``finish``'s).

    Notes
    -----
    What bounds a run, with the default quotas (sources in the module docstring):

    - the parent execution's history holds the fence loop and the collector's loop (7 events an
      invocation: entered, scheduled, started, succeeded, exited, and the ``Choice``'s two),
      besides a fixed ~60: about 3,500 collector invocations, 35 days of 15-minute ones (each
      invocation must use its time, not return at once);
    - each child execution holds one segment's or bucket's loop: about 3,500 invocations;
    - the lists of segments and buckets travel in the state's data, 256 KiB at most: some
      40,000 numbers in all;
    - a Standard execution lasts at most one year.
    """
    backfill_id = "$.backfill.backfill_id"
    collect_branch = {
        "StartAt": "Collect",
        "States": _loop(
            function_arn,
            "collect",
            name="Collect",
            backfill_id=backfill_id,
            returns=("done", "fenced"),
            then={"Type": "Succeed"},
        ),
    }
    scan_branch = {
        "StartAt": "Scan",
        "States": {
            "Scan": _map(function_arn, "Scan", "scan", "segment", then="ScanEnd"),
            "ScanEnd": {
                **_task(
                    function_arn,
                    "scan_end",
                    extra={"backfill_id.$": backfill_id},
                    returns=("done",),
                ),
                "ResultPath": None,
                "End": True,
            },
        },
    }
    start = _task(
        function_arn,
        "start",
        extra={f"{key}.$": f"$.{key}" for key in EXECUTION_INPUT},
        returns=("backfill_id", "workers", *MAP_STATES.values()),
    )
    finish = _task(
        function_arn, "finish", extra={"backfill_id.$": backfill_id}, returns=("summary",)
    )
    return {
        "Comment": (
            "ddb-aggregator's distributed backfill: scan segments and stream collector, "
            "join, reduce (aggregator.deploy.backfill_machine)"
        ),
        "StartAt": "Start",
        "States": {
            "Start": {**start, "ResultPath": "$.backfill", "Next": "Fence"},
            # the collector fences every shard before the scan starts
            **_loop(
                function_arn,
                "collect",
                name="Fence",
                backfill_id=backfill_id,
                extra={"until_fenced": True},
                until="fenced",
                returns=("done", "fenced"),
                then={"Type": "Pass", "Next": "ScanAndCollect"},
            ),
            "ScanAndCollect": {
                "Type": "Parallel",
                "Branches": [collect_branch, scan_branch],
                "ResultPath": None,
                "Next": "Join",
            },
            "Join": _map(function_arn, "Join", "join", "bucket", then="Reduce"),
            "Reduce": _map(function_arn, "Reduce", "reduce", "bucket", then="Finish"),
            "Finish": {**finish, "ResultPath": "$.finish", "End": True},
        },
    }

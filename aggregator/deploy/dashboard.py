"""The CloudWatch dashboard of a deployed aggregator: one source for the SAM template's
``Dashboard`` (the ``dashboard`` region, rendered by ``aggregator template``) and the CDK
construct's.

:func:`dashboard_body` is the ``DashboardBody`` as the text of an ``Fn::Sub`` (CloudFormation User
Guide, "AWS::CloudWatch::Dashboard"; the body's structure: CloudWatch API Reference, "Dashboard
Body Structure and Syntax"), with three variables the caller binds: ``${Function}`` (the stream
function's name), ``${TableName}`` (the table's name) and ``${Service}`` (the metrics' ``service``
dimension, the stack's name), plus the pseudo parameter ``${AWS::Region}``. The widgets, every
metric a minute:

- **Iterator age**: Lambda's ``IteratorAge`` (Maximum) of the function, how far behind the
  stream it reads (Lambda Developer Guide, "Using CloudWatch metrics with Lambda": stream
  event source metrics);
- **Records and batches**: the handler's ``RecordsReceived`` and ``SelfWritesSkipped`` (its
  embedded metrics, :mod:`aggregator.runtime.telemetry`) and Lambda's ``Invocations`` (one a
  batch);
- **Dead letters**: ``DeadLetters`` and ``MalformedRecords``;
- **Modelled WCU per rule**: ``ModelledWCUByRule`` with dimension ``Rule``, one line per rule
  of the rule set (the writes of its aggregate items:
  :func:`~aggregator.runtime.telemetry.emit_metrics`), and the whole batch's ``ModelledWCU``;
- **Throttles**: Lambda's ``Throttles`` of the function, DynamoDB's ``WriteThrottleEvents`` and
  ``ReadThrottleEvents`` of the table (DynamoDB Developer Guide, "DynamoDB Metrics and
  dimensions") and the writer's ``ThrottleRetries``;
- **Duration and errors**: Lambda's ``Duration`` (average and maximum, milliseconds, left axis)
  and ``Errors`` (a count, right axis).
"""

from __future__ import annotations

import json
from typing import Any

from aggregator.core.rules import RuleSet

__all__ = ["DASHBOARD_VARIABLES", "METRICS_NAMESPACE", "dashboard_body", "dashboard_widgets"]

METRICS_NAMESPACE = "DdbAggregator"
"""The handler's metrics' namespace (the template's ``POWERTOOLS_METRICS_NAMESPACE``)."""
DASHBOARD_VARIABLES = ("Function", "TableName", "Service")
"""The ``Fn::Sub`` variables :func:`dashboard_body` uses, besides ``${AWS::Region}``."""

_PERIOD_SECONDS = 60
_WIDTH, _HEIGHT = 12, 6


def _ours(name: str, **extra: str) -> list[Any]:
    dimensions: list[str] = ["service", "${Service}"]
    for key, value in extra.items():
        dimensions += [key, value]
    return [METRICS_NAMESPACE, name, *dimensions]


def _lambda(name: str, stat: str | None = None, *, right: bool = False) -> list[Any]:
    """A Lambda metric of the function; ``right``: on the widget's right axis (a count
    beside milliseconds)."""
    metric: list[Any] = ["AWS/Lambda", name, "FunctionName", "${Function}"]
    options: dict[str, str] = {}
    if stat is not None:
        options["stat"] = stat
    if right:
        options["yAxis"] = "right"
    if options:
        metric.append(options)
    return metric


def _widget(title: str, metrics: list[list[Any]], stat: str, x: int, y: int) -> dict[str, Any]:
    return {
        "type": "metric",
        "x": x,
        "y": y,
        "width": _WIDTH,
        "height": _HEIGHT,
        "properties": {
            "title": title,
            "region": "${AWS::Region}",
            "view": "timeSeries",
            "stacked": False,
            "stat": stat,
            "period": _PERIOD_SECONDS,
            "metrics": metrics,
        },
    }


def dashboard_widgets(rules: RuleSet) -> list[dict[str, Any]]:
    """The widgets (module docstring), two a row, as the body's ``widgets`` list."""
    per_rule = [_ours("ModelledWCUByRule", Rule=r.name) for r in rules]
    specs: list[tuple[str, list[list[Any]], str]] = [
        ("Iterator age (ms)", [_lambda("IteratorAge")], "Maximum"),
        (
            "Records and batches per minute",
            [
                _ours("RecordsReceived"),
                _ours("SelfWritesSkipped"),
                _lambda("Invocations"),
            ],
            "Sum",
        ),
        ("Dead letters", [_ours("DeadLetters"), _ours("MalformedRecords")], "Sum"),
        ("Modelled WCU per rule", [*per_rule, _ours("ModelledWCU")], "Sum"),
        (
            "Throttles",
            [
                _lambda("Throttles"),
                ["AWS/DynamoDB", "WriteThrottleEvents", "TableName", "${TableName}"],
                ["AWS/DynamoDB", "ReadThrottleEvents", "TableName", "${TableName}"],
                _ours("ThrottleRetries"),
            ],
            "Sum",
        ),
        (
            "Duration (ms, left) and errors (right)",
            [
                _lambda("Duration", "Average"),
                _lambda("Duration", "Maximum"),
                _lambda("Errors", "Sum", right=True),
            ],
            "Average",
        ),
    ]
    return [
        _widget(title, metrics, stat, (i % 2) * _WIDTH, (i // 2) * _HEIGHT)
        for i, (title, metrics, stat) in enumerate(specs)
    ]


def dashboard_body(rules: RuleSet) -> str:
    """The ``DashboardBody`` as ``Fn::Sub`` text (module docstring): compact JSON."""
    return json.dumps({"widgets": dashboard_widgets(rules)}, separators=(",", ":"))

"""ddb-aggregator: live aggregates inside one DynamoDB table, maintained from its stream.

Public API::

    from aggregator import load_rules, rule, RuleSet, Engine, AggregateStore

See the documentation (``docs/``, ``make docs``) for the rule reference and the guarantees of
each write mode.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__ below
    from aggregator.core.engine import (
        AggregateRef,
        BatchDeltas,
        CoalescedDelta,
        Engine,
        RecordFailure,
    )
    from aggregator.core.exceptions import (
        AggregatorError,
        ConfigError,
        DynamoDBLocalError,
        EvaluationError,
        EventError,
        QueryError,
        RuleError,
        RunnerError,
        WriteError,
    )
    from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
    from aggregator.core.records import StreamRecord
    from aggregator.core.rules import Bucket, Rule, RuleSet, Window, load_rules, rule
    from aggregator.core.windows import Granularity, parse_duration
    from aggregator.deploy.filters import check_template, filter_criteria
    from aggregator.dynamodb.modes import make_writer
    from aggregator.dynamodb.query import Aggregate, AggregateStore, HistogramBucket, WindowResult
    from aggregator.dynamodb.writer import AtLeastOnceWriter, WriteResult, WriteStats
    from aggregator.runtime.processor import BatchOutcome, StreamProcessor

_EXPORTS: dict[str, str] = {
    "Aggregate": "aggregator.dynamodb.query",
    "AggregateRef": "aggregator.core.engine",
    "AggregateStore": "aggregator.dynamodb.query",
    "AggregatorError": "aggregator.core.exceptions",
    "AtLeastOnceWriter": "aggregator.dynamodb.writer",
    "BatchDeltas": "aggregator.core.engine",
    "BatchOutcome": "aggregator.runtime.processor",
    "Bucket": "aggregator.core.rules",
    "CoalescedDelta": "aggregator.core.engine",
    "ConfigError": "aggregator.core.exceptions",
    "DEFAULT_LAYOUT": "aggregator.core.layout",
    "DynamoDBLocalError": "aggregator.core.exceptions",
    "Engine": "aggregator.core.engine",
    "EvaluationError": "aggregator.core.exceptions",
    "EventError": "aggregator.core.exceptions",
    "Granularity": "aggregator.core.windows",
    "HistogramBucket": "aggregator.dynamodb.query",
    "QueryError": "aggregator.core.exceptions",
    "RecordFailure": "aggregator.core.engine",
    "Rule": "aggregator.core.rules",
    "RuleError": "aggregator.core.exceptions",
    "RuleSet": "aggregator.core.rules",
    "RunnerError": "aggregator.core.exceptions",
    "StreamProcessor": "aggregator.runtime.processor",
    "StreamRecord": "aggregator.core.records",
    "TableLayout": "aggregator.core.layout",
    "Window": "aggregator.core.rules",
    "WindowResult": "aggregator.dynamodb.query",
    "WriteError": "aggregator.core.exceptions",
    "WriteResult": "aggregator.dynamodb.writer",
    "WriteStats": "aggregator.dynamodb.writer",
    "check_template": "aggregator.deploy.filters",
    "filter_criteria": "aggregator.deploy.filters",
    "load_rules": "aggregator.core.rules",
    "make_writer": "aggregator.dynamodb.modes",
    "parse_duration": "aggregator.core.windows",
    "rule": "aggregator.core.rules",
}
"""Where each public name lives: imported on first use (PEP 562), so importing one part of
the package (the Lambda handler, :mod:`aggregator.handler`) loads only what that part uses."""

__all__ = [
    "DEFAULT_LAYOUT",
    "Aggregate",
    "AggregateRef",
    "AggregateStore",
    "AggregatorError",
    "AtLeastOnceWriter",
    "BatchDeltas",
    "BatchOutcome",
    "Bucket",
    "CoalescedDelta",
    "ConfigError",
    "DynamoDBLocalError",
    "Engine",
    "EvaluationError",
    "EventError",
    "Granularity",
    "HistogramBucket",
    "QueryError",
    "RecordFailure",
    "Rule",
    "RuleError",
    "RuleSet",
    "RunnerError",
    "StreamProcessor",
    "StreamRecord",
    "TableLayout",
    "Window",
    "WindowResult",
    "WriteError",
    "WriteResult",
    "WriteStats",
    "check_template",
    "filter_criteria",
    "load_rules",
    "make_writer",
    "parse_duration",
    "rule",
]

__version__ = "0.3.0"


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (and cached in this module)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'aggregator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

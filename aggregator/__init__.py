"""ddb-aggregator: live aggregates inside one DynamoDB table, maintained from its stream.

Public API: the names in ``__all__``, importable from the package itself::

    from aggregator import load_rules, rule, RuleSet, AggregateStore, StreamProcessor, make_writer

The public modules are this package, :mod:`aggregator.handler` (the Lambda entry point) and
:mod:`aggregator.cdk` (the CDK construct); every other module is internal and may change in any
release. Names this package used to export that are internal (the engine's batch types, the
concrete writer classes, the writer's counters) still resolve, with a ``DeprecationWarning``
naming the module they live in (:data:`_DEPRECATED`).

See the documentation (``docs/``, ``make docs``) for the rule reference and the guarantees of
each write mode.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__ below
    from aggregator.core.engine import Engine
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
    from aggregator.dynamodb.batch import UnprocessedKeysError
    from aggregator.dynamodb.errors import AwsConnectionError, AwsError, AwsRequestError
    from aggregator.dynamodb.modes import WriterOptions, make_writer
    from aggregator.dynamodb.query import Aggregate, AggregateStore, HistogramBucket, WindowResult
    from aggregator.dynamodb.writer import Writer, WriteResult
    from aggregator.runtime.processor import BatchOutcome, StreamProcessor

_EXPORTS: dict[str, str] = {
    "Aggregate": "aggregator.dynamodb.query",
    "AwsConnectionError": "aggregator.dynamodb.errors",
    "AwsError": "aggregator.dynamodb.errors",
    "AwsRequestError": "aggregator.dynamodb.errors",
    "UnprocessedKeysError": "aggregator.dynamodb.batch",
    "AggregateStore": "aggregator.dynamodb.query",
    "AggregatorError": "aggregator.core.exceptions",
    "BatchOutcome": "aggregator.runtime.processor",
    "Bucket": "aggregator.core.rules",
    "ConfigError": "aggregator.core.exceptions",
    "DEFAULT_LAYOUT": "aggregator.core.layout",
    "DynamoDBLocalError": "aggregator.core.exceptions",
    "Engine": "aggregator.core.engine",
    "EvaluationError": "aggregator.core.exceptions",
    "EventError": "aggregator.core.exceptions",
    "Granularity": "aggregator.core.windows",
    "HistogramBucket": "aggregator.dynamodb.query",
    "QueryError": "aggregator.core.exceptions",
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
    "WriterOptions": "aggregator.dynamodb.modes",
    "Writer": "aggregator.dynamodb.writer",
    "check_template": "aggregator.deploy.filters",
    "filter_criteria": "aggregator.deploy.filters",
    "load_rules": "aggregator.core.rules",
    "make_writer": "aggregator.dynamodb.modes",
    "parse_duration": "aggregator.core.windows",
    "rule": "aggregator.core.rules",
}
"""Where each public name lives: imported on first use (PEP 562), so importing one part of
the package (the Lambda handler, :mod:`aggregator.handler`) loads only what that part uses."""

_DEPRECATED: dict[str, tuple[str, str]] = {
    "AggregateRef": ("aggregator.core.deltas", ""),
    "AtLeastOnceWriter": (
        "aggregator.dynamodb.writer",
        "; to get a writer, call aggregator.make_writer('at-least-once', ...)",
    ),
    "BatchDeltas": ("aggregator.core.deltas", ""),
    "CoalescedDelta": ("aggregator.core.deltas", ""),
    "RecordFailure": ("aggregator.core.deltas", ""),
    "WriteStats": ("aggregator.dynamodb.write_stats", ""),
}
"""Names the package used to export that are internal: each still resolves, with a
``DeprecationWarning`` naming its module (and, where there is one, the public way instead)."""

__all__ = [
    "DEFAULT_LAYOUT",
    "Aggregate",
    "AggregateStore",
    "AggregatorError",
    "AwsConnectionError",
    "AwsError",
    "AwsRequestError",
    "BatchOutcome",
    "Bucket",
    "ConfigError",
    "DynamoDBLocalError",
    "Engine",
    "EvaluationError",
    "EventError",
    "Granularity",
    "HistogramBucket",
    "QueryError",
    "Rule",
    "RuleError",
    "RuleSet",
    "RunnerError",
    "StreamProcessor",
    "StreamRecord",
    "TableLayout",
    "UnprocessedKeysError",
    "Window",
    "WindowResult",
    "WriteError",
    "WriteResult",
    "Writer",
    "WriterOptions",
    "check_template",
    "filter_criteria",
    "load_rules",
    "make_writer",
    "parse_duration",
    "rule",
]

__version__ = "0.3.0"


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (and cached in this module); a
    deprecated one (:data:`_DEPRECATED`), with a ``DeprecationWarning``."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if name in _DEPRECATED:  # not cached, so every use warns
        module, instead = _DEPRECATED[name]
        warnings.warn(
            f"aggregator.{name} is internal and no longer exported: "
            f"import it from {module} (from {module} import {name}){instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'aggregator' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names and the module's own attributes (no typing or import helpers)."""
    return sorted({*__all__, "__version__", "__doc__", "__name__", "__file__", "__path__"})

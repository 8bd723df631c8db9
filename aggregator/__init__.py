"""ddb-aggregator: live aggregates inside one DynamoDB table, maintained from its stream.

Public API::

    from aggregator import load_rules, rule, RuleSet, Engine, AggregateStore

See the README for the rule reference and the guarantees of each write mode.
"""

from aggregator.core.engine import AggregateRef, BatchDeltas, CoalescedDelta, Engine, RecordFailure
from aggregator.core.exceptions import (
    AggregatorError,
    ConfigError,
    DynamoDBLocalError,
    EvaluationError,
    QueryError,
    RuleError,
    RunnerError,
    WriteError,
)
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import StreamRecord
from aggregator.core.rules import Bucket, Rule, RuleSet, Window, load_rules, rule
from aggregator.core.windows import Granularity, parse_duration
from aggregator.dynamodb.modes import make_writer
from aggregator.dynamodb.query import Aggregate, AggregateStore, HistogramBucket, WindowResult
from aggregator.dynamodb.writer import AtLeastOnceWriter, WriteResult, WriteStats
from aggregator.runtime.filters import check_template, filter_criteria
from aggregator.runtime.processor import BatchOutcome, StreamProcessor

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

__version__ = "0.1.0"

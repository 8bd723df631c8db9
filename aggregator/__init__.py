"""ddb-aggregator: live aggregates inside one DynamoDB table, maintained from its stream.

Public API::

    from aggregator import load_rules, rule, RuleSet, Engine, AggregateStore

See the README for the rule reference and the guarantees of each write mode.
"""

from .config import DEFAULT_LAYOUT, TableLayout
from .engine import AggregateRef, BatchDeltas, CoalescedDelta, Engine, RecordFailure
from .exceptions import (
    AggregatorError,
    ConfigError,
    DynamoDBLocalError,
    EvaluationError,
    QueryError,
    RuleError,
    RunnerError,
    WriteError,
)
from .filters import check_template, filter_criteria
from .processor import BatchOutcome, StreamProcessor
from .query import Aggregate, AggregateStore, HistogramBucket, WindowResult
from .records import StreamRecord
from .rules import Bucket, Rule, RuleSet, Window, load_rules, rule
from .windows import Granularity, parse_duration
from .writer import AtLeastOnceWriter, WriteResult, WriteStats, make_writer

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

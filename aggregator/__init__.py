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
from .processor import BatchOutcome, StreamProcessor
from .query import Aggregate, AggregateStore
from .records import StreamRecord
from .rules import Rule, RuleSet, load_rules, rule
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
    "CoalescedDelta",
    "ConfigError",
    "DynamoDBLocalError",
    "Engine",
    "EvaluationError",
    "QueryError",
    "RecordFailure",
    "Rule",
    "RuleError",
    "RuleSet",
    "RunnerError",
    "StreamProcessor",
    "StreamRecord",
    "TableLayout",
    "WriteError",
    "WriteResult",
    "WriteStats",
    "load_rules",
    "make_writer",
    "rule",
]

__version__ = "0.1.0"

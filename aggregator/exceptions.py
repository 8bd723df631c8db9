"""Exceptions raised by ddb-aggregator: one root, one subclass per area."""


class AggregatorError(Exception):
    """Root of every error this package raises on purpose."""


class RuleError(AggregatorError):
    """A rule file or rule definition is invalid (message names file, rule and field)."""


class EvaluationError(AggregatorError):
    """A rule could not be evaluated on an image (missing attribute, wrong type)."""


class WriteError(AggregatorError):
    """Applying deltas to the aggregates partition failed."""


class QueryError(AggregatorError):
    """Reading aggregates failed or the request was invalid."""


class RunnerError(AggregatorError):
    """The local stream runner could not make progress."""


class DynamoDBLocalError(AggregatorError):
    """DynamoDB Local could not be installed or started."""


class ConfigError(AggregatorError):
    """The handler or CLI configuration (environment variables, options) is invalid."""

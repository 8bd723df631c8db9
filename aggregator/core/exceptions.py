"""Exceptions raised by ddb-aggregator: one root, one subclass per area."""

from enum import StrEnum


class AggregatorError(Exception):
    """Root of every error this package raises on purpose."""


class RuleError(AggregatorError):
    """A rule file or rule definition is invalid (message names file, rule and field)."""


class FailureCause(StrEnum):
    """Why a (stream record, rule) was dead-lettered; the ``Cause`` dimension of the
    ``DeadLettersByCause`` metric and the ``cause`` attribute of dead-letter items."""

    MISSING_ATTRIBUTE = "missing-attribute"
    """A key, delta or time attribute the rule needs is absent."""
    WRONG_TYPE = "wrong-type"
    """An attribute the rule reads has a type the rule cannot use (a list as key, a string as
    delta)."""
    INVALID_VALUE = "invalid-value"
    """An attribute value is not valid: a number that is not finite or not a number
    (``{"N": "NaN"}``, ``"abc"``, ``""``), a value in malformed DynamoDB JSON, a time that is
    not a time."""
    LIMIT_EXCEEDED = "limit-exceeded"
    """A DynamoDB limit would be broken: an aggregate sort key over 1,024 bytes, a sum over 38
    significant digits."""
    MISSING_IMAGE = "missing-image"
    """The record lacks the image its event needs (stream view type not NEW_AND_OLD_IMAGES)."""
    MALFORMED_RECORD = "malformed-record"
    """The stream record itself is malformed (no ``dynamodb``, no ``eventName``, a non-numeric
    sequence number, an image that is not a mapping...): no rule can read it, and it cannot be
    replayed."""


class EvaluationError(AggregatorError):
    """A rule could not be evaluated on an image (missing attribute, wrong type, invalid value).

    ``cause`` classifies it (:class:`FailureCause`)."""

    def __init__(self, message: str, cause: FailureCause = FailureCause.INVALID_VALUE) -> None:
        super().__init__(message)
        self.cause = cause


class EventError(AggregatorError):
    """The Lambda event is not a DynamoDB stream event at all (no ``Records`` list, records of
    another event source): nothing in it can be dead-lettered, so the invocation fails."""


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

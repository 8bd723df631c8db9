"""The AWS errors of the framework: the one list of throttling codes, :func:`error_code`, and the
project errors every request of :class:`~aggregator.dynamodb.client.RequestClient` raises in
place of botocore's.

No public function of the package lets a raw botocore error escape: a failed request raises
:class:`AwsRequestError` (the service answered with an error: a ``ClientError`` too, carrying the
same ``response`` and ``operation_name``) or :class:`AwsConnectionError` (the request did not get
an answer: a ``BotoCoreError`` too); both are :class:`AwsError`, an
:class:`~aggregator.core.exceptions.AggregatorError`, and keep the botocore error as their
``__cause__``.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.exceptions import AggregatorError

__all__ = [
    "THROTTLING_ERRORS",
    "AwsConnectionError",
    "AwsError",
    "AwsRequestError",
    "error_code",
    "wrap_error",
]

THROTTLING_ERRORS = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "LimitExceededException",
    }
)
"""Error codes of throttled requests: safe to retry with backoff (DynamoDB API Reference,
"Common errors" and the errors of each operation; ``TooManyRequestsException`` and
``Throttling`` are the Lambda and IAM-style spellings). The one list: the request client
retries them (:class:`~aggregator.dynamodb.client.RequestClient`), the CLI says the request was
throttled."""


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ``ClientError`` (:class:`AwsRequestError` included), else the
    exception's type name."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return type(exc).__name__


class AwsError(AggregatorError):
    """An AWS request of the framework failed (:class:`AwsRequestError`,
    :class:`AwsConnectionError`); ``__cause__`` is botocore's error.

    Attributes
    ----------
    operation
        The operation, as AWS names it (``"GetItem"``, ``"GetRecords"``).
    code
        The AWS error code (``"AccessDeniedException"``), or the botocore exception's type
        name when the request got no answer (``"EndpointConnectionError"``).
    """

    operation: str
    code: str


class AwsRequestError(AwsError, ClientError):
    """The service answered a request with an error.

    A ``botocore.exceptions.ClientError`` as well, with the same ``response``,
    ``operation_name`` and message, so code that tests ``ClientError`` or its error code keeps
    working; ``__cause__`` is the original error.
    """

    def __init__(self, error_response: Any, operation_name: str) -> None:
        ClientError.__init__(self, error_response, operation_name)
        self.operation = operation_name
        self.code = error_code(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return AwsRequestError, (self.response, self.operation_name)


class AwsConnectionError(AwsError, BotoCoreError):
    """A request got no answer from the service (no region, no credentials, an endpoint that
    cannot be reached, a timeout, invalid parameters: any ``BotoCoreError``).

    A ``botocore.exceptions.BotoCoreError`` as well: its ``kwargs`` are the original's plus
    ``message``, ``operation`` and ``code``; the message is the original's; ``__cause__`` is the
    original error.
    """

    fmt = "{message}"

    def __init__(self, **kwargs: Any) -> None:
        BotoCoreError.__init__(self, **kwargs)
        self.operation = str(kwargs.get("operation", ""))
        self.code = str(kwargs.get("code", ""))


def wrap_error(exc: ClientError | BotoCoreError, operation: str) -> AwsError:
    """The project error for botocore's ``exc``, raised by a request of ``operation`` (as AWS
    names it); the caller raises it ``from exc``. A project error is returned as it is."""
    if isinstance(exc, AwsError):
        return exc
    if isinstance(exc, ClientError):
        return AwsRequestError(exc.response, exc.operation_name or operation)
    return AwsConnectionError(
        **{**exc.kwargs, "message": str(exc), "operation": operation, "code": type(exc).__name__}
    )

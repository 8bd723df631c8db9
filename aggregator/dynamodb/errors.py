"""Error codes of AWS requests that the framework treats alike (one list for every module)."""

from __future__ import annotations

from botocore.exceptions import ClientError

__all__ = ["THROTTLING_ERRORS", "error_code"]

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
``Throttling`` are the Lambda and IAM-style spellings). The writers retry them on top of
botocore's own retries; the CLI says the request was throttled."""


def error_code(exc: BaseException) -> str:
    """The error code of a botocore ``ClientError`` (else the exception's type name)."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return type(exc).__name__

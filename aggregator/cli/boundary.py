"""The error boundary of every command: :func:`describe_error`, the exit codes and
:class:`AggregatorGroup`.

Errors never show a traceback. :class:`AggregatorGroup` (the boundary every command runs
through) prints one line per problem on stderr and exits with

* 1 for expected problems: the package's own errors (:class:`AggregatorError`), AWS errors
  (``ClientError`` with the operation, the error code and a hint; no region, no credentials, an
  endpoint that cannot be reached, invalid request parameters), see :func:`describe_error`;
* 2 for click's usage errors (printed by click) and for unexpected exceptions, reported as
  ``error: internal error: <type>: <message>``; with ``AGGREGATOR_DEBUG=1`` those propagate, so
  the traceback shows;
* 130 after Ctrl-C (``interrupted``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import click
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from rich.text import Text

from aggregator.cli.clients import META_CLIENTS, SERVICE_NAMES, is_loopback
from aggregator.cli.options import META_TABLE
from aggregator.cli.output import err_console
from aggregator.core.exceptions import AggregatorError
from aggregator.core.text import bound, quote
from aggregator.dynamodb.errors import THROTTLING_ERRORS, AwsError

DEBUG_ENV = "AGGREGATOR_DEBUG"
"""Environment variable: ``1`` lets unexpected exceptions propagate with their traceback."""
EXIT_ERROR = 1
"""Exit code for expected problems (bad input, AWS errors)."""
EXIT_INTERNAL = 2
"""Exit code for unexpected exceptions (a bug); click uses 2 for usage errors as well."""
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as shells report it."""


MESSAGE_CHARS = 300
"""Longest AWS message (or exception text) quoted in an error line."""


_STREAM_OPERATIONS = frozenset({"DescribeStream", "GetRecords", "GetShardIterator", "ListStreams"})
_CREDENTIAL_CODES = {
    "UnrecognizedClientException": "the AWS credentials were not recognised",
    "InvalidClientTokenId": "the AWS credentials were not recognised",
    "InvalidSignatureException": "the request signature was rejected (wrong secret key?)",
    "SignatureDoesNotMatch": "the request signature was rejected (wrong secret key?)",
    "MissingAuthenticationTokenException": "the request carried no credentials",
    "ExpiredTokenException": "the AWS credentials have expired",
    "ExpiredToken": "the AWS credentials have expired",
}
_SERVER_CODES = frozenset(
    {"InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException"}
)


def aws_cause(exc: BaseException) -> ClientError | BotoCoreError | None:
    """The AWS SDK error ``exc`` is, or wraps through ``raise ... from`` (``__cause__``, any
    depth), if any. An error merely raised while another was handled (``__context__``) is not
    taken as wrapping it: its own message is the deliberate one. The request client's wrappers
    (:class:`~aggregator.dynamodb.errors.AwsError`, a ``ClientError`` or ``BotoCoreError``
    themselves) give way to botocore's error they carry, so the line is the one botocore's
    error gives."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        wrapper = isinstance(current, AwsError) and current.__cause__ is not None
        if isinstance(current, ClientError | BotoCoreError) and not wrapper:
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


def _target(meta: Mapping[str, Any], operation: str | None) -> tuple[str, str, str]:
    """``(table, region, endpoint)`` as known to the command, for messages."""
    table = meta.get(META_TABLE)
    service = "dynamodbstreams" if operation in _STREAM_OPERATIONS else "dynamodb"
    clients = meta.get(META_CLIENTS, {})
    region, endpoint = clients.get(service) or clients.get("dynamodb") or (None, None)
    return (
        f"table {quote(table)}" if table else "the table",
        region or "(unknown region)",
        endpoint or "(unknown endpoint)",
    )


def _describe_client_error(exc: ClientError, meta: Mapping[str, Any]) -> str:
    error = exc.response.get("Error", {})
    code = str(error.get("Code") or "UnknownError")
    message = bound(str(error.get("Message") or ""), MESSAGE_CHARS)
    operation = exc.operation_name or "request"
    retries = exc.response.get("ResponseMetadata", {}).get("RetryAttempts")
    after = f", still after {retries} retries" if retries else " after retries"
    table, region, endpoint = _target(meta, exc.operation_name)
    head = f"{operation} failed ({code})"
    aws = f" ({message})" if message else ""
    if code == "ResourceNotFoundException":
        subject = f"the stream of {table}" if operation in _STREAM_OPERATIONS else table
        return (
            f"{head}: {subject} not found in region {region} at endpoint {endpoint}; "
            "does the table exist, and are the region (AWS_REGION) and --endpoint-url right?"
        )
    if code in ("AccessDeniedException", "AccessDenied"):
        return (
            f"{head}: access denied{aws}; do the credentials in use have permission for "
            f"dynamodb:{operation} on {table} in region {region}?"
        )
    if code in _CREDENTIAL_CODES:
        return (
            f"{head}: {_CREDENTIAL_CODES[code]}{aws}; check or refresh the credentials "
            "(AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, aws sso "
            "login), or pass --endpoint-url for DynamoDB Local"
        )
    if code in THROTTLING_ERRORS:
        return (
            f"{head}: throttled by DynamoDB on {table}{after}; retry later, or raise the "
            "table's capacity (or switch it to on-demand)"
        )
    if code == "ValidationException":
        return f"{head}: invalid request: {message or 'no details given'}"
    if code == "ResourceInUseException":
        return (
            f"{head}: {table} already exists or is being created, updated or deleted{aws}; "
            "wait until it is ACTIVE or choose another name"
        )
    if code in _SERVER_CODES:
        return f"{head}: DynamoDB failed{after}{aws}; retry later"
    return f"{head}: {message or 'no message'}"


def _describe_botocore_error(exc: BotoCoreError) -> str:
    """One line for botocore's ``exc``, naming the service whose client or call failed: the one
    :func:`~aggregator.cli.clients.make_client` noted in ``kwargs["service_name"]`` (an
    EventBridge client of ``run --event-bus``), else DynamoDB."""
    text = bound(str(exc), MESSAGE_CHARS)
    service = SERVICE_NAMES.get(str(exc.kwargs.get("service_name")), "DynamoDB")
    events = service == SERVICE_NAMES["events"]
    if isinstance(exc, NoRegionError):
        if events:
            return (
                "no AWS region for EventBridge: set AWS_REGION (the event bus's region), or "
                "AGGREGATOR_EVENTS_ENDPOINT_URL for another endpoint"
            )
        return "no AWS region: set AWS_REGION or pass --endpoint-url for DynamoDB Local"
    if isinstance(exc, NoCredentialsError):
        return (
            "no AWS credentials: configure a profile (aws configure, AWS_PROFILE) or set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass --endpoint-url for DynamoDB Local"
        )
    if isinstance(exc, PartialCredentialsError | ProfileNotFound):
        return f"AWS credentials: {text}; check AWS_PROFILE and the AWS config files"
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        url = str(exc.kwargs.get("endpoint_url") or "(unknown endpoint)")
        host = urlsplit(url).hostname or ""
        if not is_loopback(host):
            advice = "check the network (DNS, proxy) and the region"
        elif events:
            advice = "is an EventBridge endpoint running there? (AGGREGATOR_EVENTS_ENDPOINT_URL)"
        else:
            advice = "is DynamoDB Local running? (aggregator local --port <port> starts it)"
        where = f"the {service} endpoint {url}"
        if isinstance(exc, ConnectTimeoutError):
            return f"cannot reach {where} (connect timeout): {advice}"
        if isinstance(exc, EndpointConnectionError):
            return f"cannot reach {where}: {advice}"
        if isinstance(exc, ReadTimeoutError):
            return f"no answer from {where} in time, after retries: {advice}"
        return f"connection to {where} failed ({text}): {advice}"
    if isinstance(exc, ParamValidationError):
        report = str(exc.kwargs.get("report") or text)
        return f"invalid request parameters: {bound('; '.join(report.splitlines()), MESSAGE_CHARS)}"
    return f"AWS SDK error ({type(exc).__name__}): {text}"


def describe_error(exc: BaseException, meta: Mapping[str, Any] | None = None) -> tuple[str, int]:
    """The error line(s) (without the ``error:`` prefix) and the exit code for ``exc``.

    Parameters
    ----------
    exc
        Any exception a command raised.
    meta
        The click context's ``meta``; :func:`~aggregator.cli.clients.make_client` and the
        ``--table`` option note the region, endpoint and table there, which messages about AWS
        errors name.

    Returns
    -------
    tuple[str, int]
        An AWS SDK error, or a package error raised from one, gives one line naming the
        operation, the error code and a hint, and exit code 1. Another :class:`AggregatorError`
        gives its message (one line per problem) and 1. Anything else gives
        ``internal error: <type>: <message>`` and 2.
    """
    meta = meta or {}
    cause = aws_cause(exc)
    if isinstance(cause, ClientError):
        return _describe_client_error(cause, meta), EXIT_ERROR
    if isinstance(cause, BotoCoreError):
        return _describe_botocore_error(cause), EXIT_ERROR
    if isinstance(exc, AggregatorError):
        return str(exc), EXIT_ERROR
    text = bound(str(exc), MESSAGE_CHARS)
    return (
        f"internal error: {type(exc).__name__}{': ' + text if text else ''} "
        f"(set {DEBUG_ENV}=1 to see the traceback)",
        EXIT_INTERNAL,
    )


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _print_error(message: str) -> None:
    """``error: <message>`` on stderr, never re-wrapped and never read as rich markup."""
    line = Text("error:", style="bold red")
    line.append(f" {message}")
    err_console.print(line, highlight=False)


def _quiet_broken_pipe() -> None:
    """After a closed pipe (``aggregator query list ... | head``), point stdout at /dev/null so
    the interpreter's final flush does not complain."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class AggregatorGroup(click.Group):
    """The boundary of every command: errors become one line on stderr and an exit code (see
    the module docstring); click's own exceptions pass through to click."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            err_console.print("interrupted", highlight=False)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _quiet_broken_pipe()
            sys.exit(EXIT_ERROR)
        except Exception as exc:
            message, code = describe_error(exc, ctx.meta)
            if code == EXIT_INTERNAL and _debug():
                raise
            _print_error(message)
            sys.exit(code)

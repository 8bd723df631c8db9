"""The Lambda entry point of a distributed backfill's tasks:
``aggregator.backfill_handler.handler(event, context)``.

The state machine of the deployed stack (``aggregator.deploy.backfill_machine``) invokes it
with ``{"aggregator_backfill": {"task": ..., ...}}``
(:func:`~aggregator.operations.backfill.distributed.run_task`). It is the framework's code
package, as the stream handler (:mod:`aggregator.handler`) is, with the same ``AGGREGATOR_*``
settings (the table, the definitions, the endpoint, the home Region); a function of its own in
the stack, with a role of its own (it scans the table) and a timeout of up to 15 minutes, so
that the stream handler neither loads the backfill nor holds its rights.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet, load_rules
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.tablecheck import HomeRegionError, home_region_refusal
from aggregator.handler import HandlerSettings, client_config
from aggregator.operations.backfill.distributed import EVENT_KEY, run_task

__all__ = ["handler", "reset"]

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "ddb-aggregator"))
_context: tuple[RuleSet, TableStream] | None = None
"""The rules and the table with its stream (built at the first task of an environment)."""


def reset() -> None:
    """Forget the cached rules and clients (tests; a changed environment)."""
    global _context
    _context = None


def _rules_and_table(settings: HandlerSettings) -> tuple[RuleSet, TableStream]:
    global _context
    if _context is None:
        import boto3

        rules = load_rules(settings.definitions)
        client = boto3.client(
            "dynamodb", endpoint_url=settings.endpoint_url, config=client_config()
        )
        described = requests_of(client).send("describe_table", TableName=settings.table_name)
        arn = described["Table"].get("LatestStreamArn")
        if not arn:
            raise ConfigError(
                f"table {settings.table_name!r} has no stream: nothing to backfill beside"
            )
        streams = boto3.client("dynamodbstreams", endpoint_url=settings.endpoint_url)
        _context = (rules, TableStream(client, streams, settings.table_name, arn))
    return _context


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run one task of a distributed backfill within the invocation's remaining time.

    Parameters
    ----------
    event
        ``{"aggregator_backfill": {"task": <task>, "backfill_id": ..., ...}}``.
    context
        The Lambda context (its remaining time bounds the task).

    Returns
    -------
    dict
        The task's response (``{"done": ...}``; ``start``: the backfill's id and the lists the
        state machine maps over).

    Raises
    ------
    HomeRegionError
        Outside the table's home Region (nothing is written).
    ConfigError
        An event that is not a task, or what the task raises (the execution fails with it).
    """
    request = event.get(EVENT_KEY)
    if not isinstance(request, dict):
        raise ConfigError(f"not a backfill task: the event has no {EVENT_KEY!r} object")
    settings = HandlerSettings.from_env()
    refusal = home_region_refusal(
        settings.table_name, region=settings.region, home_region=settings.home_region
    )
    if refusal is not None:
        raise HomeRegionError(refusal)
    rules, table = _rules_and_table(settings)
    logger.info("backfill task", extra={"request": request})
    response = run_task(
        request,
        rules=rules,
        table=table,
        remaining_seconds=context.get_remaining_time_in_millis() / 1000,
    )
    logger.info(
        "backfill task done",
        extra={"response": {k: v for k, v in response.items() if not isinstance(v, list)}},
    )
    return response

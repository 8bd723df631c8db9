"""The write modes and the writer each one uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.dynamodb.targets import TargetAtLeastOnceWriter, TargetCheckpointWriter
from aggregator.dynamodb.writer import Writer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = ["WRITE_MODES", "make_writer"]

WRITE_MODES = ("exactly-once", "window", "at-least-once")
"""Write modes (``AGGREGATOR_MODE``), the default first. ``window`` uses the exactly-once writer
and applies once per tumbling window (see :class:`aggregator.runtime.processor.StreamProcessor`)."""


def make_writer(
    mode: str,
    client: DynamoDBClient,
    table_name: str,
    *,
    layout: TableLayout = DEFAULT_LAYOUT,
    max_workers: int = 8,
    **options: Any,
) -> Writer:
    """The writer for ``mode`` (one of :data:`WRITE_MODES`).

    ``options`` go to the writer (``throttle_retries``, ``backoff_seconds``, and for the
    checkpointed modes ``checkpoint_retention_seconds``).

    Raises
    ------
    ConfigError
        For an unknown mode, listing the available ones.
    """
    if mode == "at-least-once":
        return TargetAtLeastOnceWriter(
            client, table_name, layout=layout, max_workers=max_workers, **options
        )
    if mode in ("exactly-once", "window"):
        return TargetCheckpointWriter(
            client, table_name, layout=layout, max_workers=max_workers, **options
        )
    raise ConfigError(f"unknown write mode {mode!r}; available: {', '.join(WRITE_MODES)}")

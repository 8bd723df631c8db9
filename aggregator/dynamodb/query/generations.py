"""Serving generations: which generation of each rule readers read, cached from the manifest.

``aggregator rebuild`` switches a rule's serving generation in the manifest
(:mod:`aggregator.dynamodb.manifest`) in one write. Readers read the manifest item with one
strongly consistent ``GetItem`` of its ``generations`` and ``rules`` maps, parsed by the manifest
module's own parsers (:func:`~aggregator.dynamodb.manifest.manifest_generations`,
:func:`~aggregator.dynamodb.manifest.manifest_states`), and use it for ``cache_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aggregator.core.exceptions import ConfigError, QueryError
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import RuleState, generation_name
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.control import (
    CONTROL_MOVE_ATTRIBUTE,
    CONTROL_PARTITIONS_ATTRIBUTE,
    check_control_partitions,
)
from aggregator.dynamodb.errors import AwsError
from aggregator.dynamodb.manifest import (
    MANIFEST_SORT_KEY,
    manifest_generations,
    manifest_states,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ServingGenerations"]


class ServingGenerations:
    """The serving generation and manifest state of each rule, for readers.

    Parameters
    ----------
    client, table_name, layout
        Where the manifest is (the ``manifest`` item under ``layout.control_pk``).
    generations
        Fixed generations (``{rule: generation}``, others generation 1): the manifest is then
        never read, and no rule has a recorded state.
    cache_seconds
        How long one read of the manifest is used.

    Attributes
    ----------
    reads
        Reads of the manifest so far (one ``GetItem`` each).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        layout: TableLayout,
        *,
        generations: Mapping[str, int] | None = None,
        cache_seconds: float = 60.0,
    ) -> None:
        self.client = client
        self.requester = requests_of(client)
        self.table_name = table_name
        self.layout = layout
        self.cache_seconds = cache_seconds
        self.reads = 0
        self._fixed = generations is not None
        self._generations: dict[str, int] | None = (
            None if generations is None else dict(generations)
        )
        self._read_at = 0.0
        self._states: dict[str, RuleState] = {}

    def storage_name(self, rule: str) -> str:
        """The name ``rule``'s serving generation is stored under (re-reading the manifest
        when the cached read is older than ``cache_seconds``).

        Raises
        ------
        QueryError
            When the manifest cannot be read, or records another ``control_partitions`` than
            the layout's (:func:`~aggregator.dynamodb.control.check_control_partitions`).
        """
        now = time.monotonic()
        if self._generations is None or (
            not self._fixed and now - self._read_at > self.cache_seconds
        ):
            self._generations = self._read()
            self._read_at = now
        return generation_name(rule, self._generations.get(rule, 1))

    def state(self, rule: str) -> RuleState | None:
        """The manifest state of ``rule``'s serving generation, from the cached read;
        ``None`` when the manifest does not list it."""
        stored = self.storage_name(rule)  # (re)reads the manifest first when due
        return self._states.get(stored)

    def last_state(self, rule: str) -> RuleState | None:
        """As :meth:`state`, from the last read of the manifest without reading it again (the
        read the caller's :meth:`storage_name` made, so both describe one generation); reads
        it only when it was never read."""
        if self._generations is None:
            return self.state(rule)
        return self._states.get(generation_name(rule, self._generations.get(rule, 1)))

    def any_listed(self, rule: str) -> bool:
        """Whether the manifest lists any rule at all (from the read :meth:`storage_name` of
        ``rule`` makes when due)."""
        self.storage_name(rule)
        return bool(self._states)

    def _read(self) -> dict[str, int]:
        self.reads += 1
        try:
            item = self.requester.send(
                "get_item",
                TableName=self.table_name,
                Key=self.layout.item_key(self.layout.control_pk, MANIFEST_SORT_KEY),
                ProjectionExpression="#g, #r, #c, #m",
                ExpressionAttributeNames={
                    "#g": "generations",
                    "#r": "rules",
                    "#c": CONTROL_PARTITIONS_ATTRIBUTE,
                    "#m": CONTROL_MOVE_ATTRIBUTE,
                },
                ConsistentRead=True,
            ).get("Item")
        except AwsError as exc:
            raise QueryError(f"reading the rule manifest of {self.table_name!r}: {exc}") from exc
        try:  # the top lists and floors are read where the table keeps its control items
            check_control_partitions(item, self.layout, self.table_name)
        except ConfigError as exc:
            raise QueryError(str(exc)) from None
        self._states = manifest_states(item or {})
        return manifest_generations(item or {})

"""Table layout: where the framework keeps its items inside the user's table (pure).

A rule set may declare it in a top-level ``table:`` section of one of its files (at most one)::

    table:
      partition_key: PK          # the table's key attribute names (type S)
      sort_key: SK
      aggregates_pk: AGGREGATES  # reserved partition key values
      dead_letters_pk: AGGREGATOR#DEAD_LETTERS
      runner_pk: AGGREGATOR#RUNNER
      value_attribute: value     # the counter ADD targets
      leaderboard_index: leaderboard
      leaderboard_attribute: lb
      ttl_attribute: ttl         # the table's TTL attribute (windowed rules)

Every field has the default shown (``pk``/``sk`` for the keys). The handler, the runner, the CLI,
:class:`~aggregator.dynamodb.query.AggregateStore`, the stream filters, dead letters and table
creation all take the layout from the rule set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["AGGREGATE_ATTRIBUTES", "BOOKKEEPING_ATTRIBUTES", "DEFAULT_LAYOUT", "TableLayout"]

AGGREGATE_ATTRIBUTES = ("rule", "key", "granularity", "bucket")
"""Attributes every aggregate item (or time bucket) carries besides the layout's own names."""

BOOKKEEPING_ATTRIBUTES = (
    "cause",
    "reason",
    "shard_id",
    "failed_at",
    "sequence_number",
    "replayable",
    "record",
    "record_form",
    "record_zlib",
    "record_keys",
    "record_sha256",
    "record_bytes",
    "window_start",
    "state",
)
"""Attributes of dead letters and runner positions. The table's key attributes and the layout's
own attribute names must be called like none of these nor :data:`AGGREGATE_ATTRIBUTES` (a write
would overwrite a key, or two actions would touch one attribute), nor start with ``ck#`` (the
checkpoints)."""

_AttributeName = Field(min_length=1, max_length=255)
"""DynamoDB attribute names are 1 to 255 bytes for key attributes (Developer Guide, "Supported
data types and naming rules"); checked in characters here, in bytes below."""


class TableLayout(BaseModel):
    """Where the framework keeps its items inside the user's table.

    Attributes
    ----------
    partition_key, sort_key
        Names of the table's key attributes (both type ``S``). Default ``pk`` / ``sk``.
    aggregates_pk
        Partition key value of the aggregates item collection. Default ``AGGREGATES``.
        Aggregate items have sort key ``"<rule>#<encoded key>"``.
    runner_pk, dead_letters_pk
        Partition key values of framework bookkeeping (local runner positions, dead-lettered
        records). Together with ``aggregates_pk`` these are the *reserved* partition keys: stream
        records of items under them never produce deltas (self-write filtering), and the
        template's ``FilterCriteria`` drops them before Lambda is invoked.
    value_attribute
        The counter attribute that ``ADD`` targets (``value`` is a DynamoDB reserved word, so it
        is always sent through ``ExpressionAttributeNames``).
    leaderboard_index, leaderboard_attribute
        Sparse GSI for top-N: partition key ``leaderboard_attribute`` (set to the rule name on
        items of leaderboard rules only), sort key ``value_attribute`` (N).
    ttl_attribute
        TTL attribute name (epoch seconds), used by windowed rules.

    Raises
    ------
    pydantic.ValidationError
        On construction, for empty or over-long names, key attributes named like an attribute
        the framework writes on its items (so an aggregate update could never change a key), the
        two key attributes sharing a name, or reserved partition key values that repeat.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition_key: str = Field(default="pk", min_length=1, max_length=255)
    sort_key: str = Field(default="sk", min_length=1, max_length=255)
    aggregates_pk: str = Field(default="AGGREGATES", min_length=1, max_length=1024)
    runner_pk: str = Field(default="AGGREGATOR#RUNNER", min_length=1, max_length=1024)
    dead_letters_pk: str = Field(default="AGGREGATOR#DEAD_LETTERS", min_length=1, max_length=1024)
    value_attribute: str = Field(default="value", min_length=1, max_length=255)
    leaderboard_index: str = Field(default="leaderboard", min_length=3, max_length=255)
    leaderboard_attribute: str = Field(default="lb", min_length=1, max_length=255)
    ttl_attribute: str = Field(default="ttl", min_length=1, max_length=255)

    @model_validator(mode="after")
    def _consistent(self) -> TableLayout:
        if self.partition_key == self.sort_key:
            raise ValueError(
                f"partition_key and sort_key are both {self.partition_key!r}; a table's two key "
                "attributes have different names"
            )
        written = {
            "value_attribute": self.value_attribute,
            "leaderboard_attribute": self.leaderboard_attribute,
            "ttl_attribute": self.ttl_attribute,
            **{name: name for name in (*AGGREGATE_ATTRIBUTES, *BOOKKEEPING_ATTRIBUTES)},
        }
        fixed = set(AGGREGATE_ATTRIBUTES) | set(BOOKKEEPING_ATTRIBUTES)
        for field_name in ("value_attribute", "leaderboard_attribute", "ttl_attribute"):
            name = getattr(self, field_name)
            if name in fixed:
                raise ValueError(
                    f"{field_name} {name!r} is an attribute the framework already writes on its "
                    "items; choose another name"
                )
        for field_name, name in (
            ("partition_key", self.partition_key),
            ("sort_key", self.sort_key),
        ):
            if name.startswith("ck#"):
                raise ValueError(
                    f"{field_name} {name!r}: names starting with 'ck#' are checkpoints"
                )
        for key_field in ("partition_key", "sort_key"):
            name = getattr(self, key_field)
            for field_name, attribute in written.items():
                if name == attribute:
                    what = f"the {field_name}" if field_name != attribute else "an attribute"
                    raise ValueError(
                        f"{key_field} {name!r} is also {what} the framework writes on aggregate "
                        "items; name the key attribute differently, or set that attribute's "
                        "name in the table: section"
                    )
        values = [self.value_attribute, self.leaderboard_attribute, self.ttl_attribute]
        if len(set(values)) != len(values):
            raise ValueError(
                "value_attribute, leaderboard_attribute and ttl_attribute must be different "
                f"attributes, got {values}"
            )
        reserved = self.reserved_partition_keys
        if len(set(reserved)) != len(reserved):
            raise ValueError(
                f"aggregates_pk, runner_pk and dead_letters_pk must differ, got {list(reserved)}"
            )
        for name in ("partition_key", "sort_key", "value_attribute", "leaderboard_attribute"):
            if len(getattr(self, name).encode("utf-8")) > 255:
                raise ValueError(f"{name} is over 255 bytes, DynamoDB's limit for key names")
        return self

    # -- keys ----------------------------------------------------------------------------------

    def item_key(self, partition: str, sort_key: str) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of a framework item under the reserved
        ``partition`` with sort key text ``sort_key``."""
        return {self.partition_key: {"S": partition}, self.sort_key: {"S": sort_key}}

    def aggregate_key(self, sort_key: str) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of the aggregate item whose sort key text is
        ``sort_key`` (``"<rule>#<key>"``)."""
        return self.item_key(self.aggregates_pk, sort_key)

    def partition_of(self, keys: Mapping[str, Any]) -> str | None:
        """The string value of the partition key in a key or item map (DynamoDB JSON), or
        ``None`` when it is absent or not a string."""
        value = keys.get(self.partition_key)
        return value.get("S") if isinstance(value, Mapping) else None

    def sort_key_of(self, keys: Mapping[str, Any]) -> str | None:
        """The string value of the sort key in a key or item map (DynamoDB JSON), or ``None``."""
        value = keys.get(self.sort_key)
        return value.get("S") if isinstance(value, Mapping) else None

    def is_reserved(self, keys: Mapping[str, Any]) -> bool:
        """Whether a key or item map (DynamoDB JSON) is of an item the framework owns."""
        return self.partition_of(keys) in self.reserved_partition_keys

    def aggregate_sort_key(self, keys: Mapping[str, Any]) -> str | None:
        """The ``"<rule>#<key>"`` sort key text when the key map is of an aggregate item, else
        ``None``."""
        if self.partition_of(keys) != self.aggregates_pk:
            return None
        return self.sort_key_of(keys)

    @property
    def reserved_partition_keys(self) -> tuple[str, ...]:
        """Partition key values owned by the framework, in a fixed order."""
        return (self.aggregates_pk, self.runner_pk, self.dead_letters_pk)


DEFAULT_LAYOUT = TableLayout()

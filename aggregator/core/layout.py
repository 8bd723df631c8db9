"""Table layout: where the framework keeps its items inside the user's table (pure).

A rule set may declare it in a top-level ``table:`` section of one of its files (at most one)::

    table:
      partition_key: PK          # the table's key attribute names (type S)
      sort_key: SK               # null: a table with only a partition key
      aggregates_pk: AGGREGATES  # reserved partition key values
      dead_letters_pk: AGGREGATOR#DEAD_LETTERS
      runner_pk: AGGREGATOR#RUNNER
      control_pk: AGGREGATOR#CONTROL
      value_attribute: value     # the counter ADD targets
      leaderboard_index: leaderboard
      leaderboard_attribute: lb
      ttl_attribute: ttl         # the table's TTL attribute (windowed rules)
      collection_index: aggregator-collections   # tables without a sort key only
      collection_attribute: aggregator_collection
      target_checkpoints_attribute: aggregator_checkpoints  # on items rules target
      aggregate_partitions: 1    # partition key values each rule's aggregates spread over
      control_partitions: 1      # partition key values the control items spread over

Every field has the default shown (``pk``/``sk`` for the keys). The handler, the runner, the CLI,
:class:`~aggregator.dynamodb.query.AggregateStore`, the stream filters, dead letters and table
creation all take the layout from the rule set.

Tables with only a partition key
--------------------------------
With ``sort_key: null`` the framework's items cannot share a partition key value, so each gets
its own: ``"<reserved partition>#<sort key text>"`` (an aggregate of rule ``r`` with key ``k``
is ``AGGREGATES#r#k``). Every such item also carries ``collection_attribute`` set to its
reserved partition (``AGGREGATES``, ...), the partition key of a keys-only GSI
(``collection_index``) whose sort key is the table's partition key. A query that reads an item
collection on a table with a sort key (``pk = AGGREGATES AND begins_with(sk, "r#")``) reads that
index instead, with the same condition on the full key text, and fetches the items themselves
with a strongly consistent ``BatchGetItem``: membership is eventually consistent (a GSI read),
values are not. The index is written when an item is created or deleted, never when a counter
changes (it projects keys only; Developer Guide, "Global secondary indexes": an index is written
only when an attribute it holds changes). Application items whose partition key starts with a
reserved value and ``#`` are taken for the framework's own, as ``AGGREGATES`` is on a table with
a sort key.

Spread partitions
-----------------
DynamoDB serves one partition key value from one partition, which takes up to 1,000 write
capacity units a second (Developer Guide, "Best practices for designing and using partition keys
effectively"; "Using write sharding to distribute workloads evenly" recommends a calculated
suffix). On a table with a sort key, a rule's aggregates therefore spread over
``partitions`` values (the rule's ``partitions``, by default the layout's
``aggregate_partitions``): ``AGGREGATES`` when it is 1 (the original layout, still valid), else
``AGGREGATES#<n>`` with ``n`` the CRC-32 of the aggregate's *home* modulo ``partitions``
(:meth:`TableLayout.aggregate_partition`). The home is the sort key text up to the end of the
key (``"<rule>#<encoded key>"``, without a time bucket's or a value item's suffix:
:func:`aggregate_home`), so every item of one key (its time buckets, its value items) shares a
partition key value and a read of one key stays one request. Control items spread the same way
over ``control_partitions`` values (``AGGREGATOR#CONTROL#<n>``, ``n`` the CRC-32 of the item's
sort key), except the manifest, which always stays under ``control_pk``. A partition key value
that is a reserved value, ``#`` and decimal digits is the framework's (rule names start with a
letter, so it never names a partial aggregate's collection, ``AGGREGATES#<rule>#<key>``). A table
without a sort key gives every framework item a partition key value of its own already; both
counts stay 1 there.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

__all__ = [
    "AGGREGATE_ATTRIBUTES",
    "BOOKKEEPING_ATTRIBUTES",
    "DEFAULT_LAYOUT",
    "MAX_AGGREGATE_PARTITIONS",
    "MAX_CONTROL_PARTITIONS",
    "MAX_SORT_KEY_BYTES",
    "TableLayout",
    "aggregate_home",
    "leaderboard_partition",
]

PARTIAL_PREFIX = "PARTIAL#"
"""Sort keys of partial aggregates start with it (:meth:`TableLayout.partial_key`)."""

MAX_SORT_KEY_BYTES = 1024
"""Longest sort key value, in UTF-8 bytes; also the limit of a GSI's sort key attribute
(DynamoDB Developer Guide, "Service, account, and table quotas": partition key values up to
2,048 bytes, sort key values up to 1,024)."""

AGGREGATE_ATTRIBUTES = ("rule", "key", "granularity", "bucket", "target")
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

MAX_AGGREGATE_PARTITIONS = 100
"""Most partition key values a rule's aggregates spread over (``partitions``,
``aggregate_partitions``). Each value is listed in the stream subscription's filter pattern,
which Lambda caps at 4,096 characters (Lambda Developer Guide, "Lambda event filtering")."""

MAX_CONTROL_PARTITIONS = 32
"""Most partition key values the control items spread over (``control_partitions``)."""


def _whole_number(value: Any) -> Any:
    """A YAML number (read as :class:`~decimal.Decimal`) that is whole, as an ``int``; anything
    else as it is, for the strict integer check (booleans and text are refused)."""
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return value


_AttributeName = Field(min_length=1, max_length=255)
"""DynamoDB attribute names are 1 to 255 bytes for key attributes (Developer Guide, "Supported
data types and naming rules"); checked in characters here, in bytes below."""


class TableLayout(BaseModel):
    r"""Where the framework keeps its items inside the user's table.

    Attributes
    ----------
    partition_key, sort_key
        Names of the table's key attributes (both type ``S``). Default ``pk`` / ``sk``.
        ``sort_key=None``: the table has only a partition key (module docstring).
    aggregates_pk
        Partition key value of the aggregates item collection. Default ``AGGREGATES``.
        Aggregate items have sort key ``"<rule>#<encoded key>"`` (without a sort key: partition
        key ``"AGGREGATES#<rule>#<encoded key>"``).
    runner_pk, dead_letters_pk, control_pk
        Partition key values of framework bookkeeping (local runner positions, dead-lettered
        records, and the rule manifest, fences and backfill progress:
        :mod:`aggregator.dynamodb.manifest`). Together with ``aggregates_pk`` these are the
        *reserved* partition keys: stream
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
    collection_index, collection_attribute
        Tables without a sort key only: the keys-only GSI (partition key
        ``collection_attribute``, S; sort key the table's partition key) through which the
        framework lists its item collections, and the attribute naming an item's collection.
        Application items must not carry ``collection_attribute``.
    aggregate_partitions
        How many partition key values a rule's aggregates spread over when the rule does not say
        (its ``partitions``): 1 keeps them all under ``aggregates_pk`` (module docstring,
        "Spread partitions"). Tables with a sort key only; at most
        :data:`MAX_AGGREGATE_PARTITIONS`.
    control_partitions
        How many partition key values the control items (fences, routing items, top lists,
        floors, backfill records; not the manifest) spread over. Tables with a sort key only; at
        most :data:`MAX_CONTROL_PARTITIONS`.
    target_checkpoints_attribute
        The one attribute the framework keeps on an application item that a rule ``target``\ s
        (:class:`~aggregator.core.rules.Target`): a map from stream shard token to checkpoint
        (:mod:`aggregator.dynamodb.targets`); no rule may read it.

    Raises
    ------
    pydantic.ValidationError
        On construction, for empty or over-long names, key attributes named like an attribute
        the framework writes on its items (so an aggregate update could never change a key), the
        two key attributes sharing a name, or reserved partition key values that repeat.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition_key: str = Field(default="pk", min_length=1, max_length=255)
    sort_key: str | None = Field(default="sk", min_length=1, max_length=255)
    aggregates_pk: str = Field(default="AGGREGATES", min_length=1, max_length=1024)
    runner_pk: str = Field(default="AGGREGATOR#RUNNER", min_length=1, max_length=1024)
    dead_letters_pk: str = Field(default="AGGREGATOR#DEAD_LETTERS", min_length=1, max_length=1024)
    control_pk: str = Field(default="AGGREGATOR#CONTROL", min_length=1, max_length=1024)
    value_attribute: str = Field(default="value", min_length=1, max_length=255)
    leaderboard_index: str = Field(default="leaderboard", min_length=3, max_length=255)
    leaderboard_attribute: str = Field(default="lb", min_length=1, max_length=255)
    ttl_attribute: str = Field(default="ttl", min_length=1, max_length=255)
    collection_index: str = Field(default="aggregator-collections", min_length=3, max_length=255)
    collection_attribute: str = Field(default="aggregator_collection", min_length=1, max_length=255)
    target_checkpoints_attribute: str = Field(
        default="aggregator_checkpoints", min_length=1, max_length=255
    )
    aggregate_partitions: Annotated[int, BeforeValidator(_whole_number)] = Field(
        default=1, ge=1, le=MAX_AGGREGATE_PARTITIONS, strict=True
    )
    control_partitions: Annotated[int, BeforeValidator(_whole_number)] = Field(
        default=1, ge=1, le=MAX_CONTROL_PARTITIONS, strict=True
    )

    @model_validator(mode="after")
    def _consistent(self) -> TableLayout:
        """Every check of the fields together (each raises ``ValueError`` naming its fields)."""
        self._check_keys()
        self._check_written_names()
        self._check_reserved_values()
        self._check_name_lengths()
        if self.sort_key is None and (self.aggregate_partitions > 1 or self.control_partitions > 1):
            raise ValueError(
                "aggregate_partitions and control_partitions need a table with a sort key: "
                "without one every aggregate and control item has a partition key value of its "
                "own already"
            )
        return self

    def _written(self) -> dict[str, str]:
        """The attributes the framework writes on aggregate items: field name (or the fixed
        attribute's own name) -> attribute name."""
        return {
            "value_attribute": self.value_attribute,
            "leaderboard_attribute": self.leaderboard_attribute,
            "ttl_attribute": self.ttl_attribute,
            "collection_attribute": self.collection_attribute,
            **{name: name for name in (*AGGREGATE_ATTRIBUTES, *BOOKKEEPING_ATTRIBUTES)},
        }

    def _check_keys(self) -> None:
        """The key attributes: two names, none a checkpoint's or an attribute the framework
        writes."""
        if self.partition_key == self.sort_key:
            raise ValueError(
                f"partition_key and sort_key are both {self.partition_key!r}; a table's two key "
                "attributes have different names"
            )
        written = self._written()
        for key_field in ("partition_key", "sort_key"):
            name = getattr(self, key_field)
            if name is None:
                continue
            if name.startswith(("ck#", "c#")):
                raise ValueError(
                    f"{key_field} {name!r}: names starting with 'c#' or 'ck#' are checkpoints"
                )
            for field_name, attribute in written.items():
                if name == attribute:
                    what = f"the {field_name}" if field_name != attribute else "an attribute"
                    raise ValueError(
                        f"{key_field} {name!r} is also {what} the framework writes on aggregate "
                        "items; name the key attribute differently, or set that attribute's "
                        "name in the table: section"
                    )
        if self.target_checkpoints_attribute in (self.partition_key, self.sort_key):
            raise ValueError(
                f"target_checkpoints_attribute {self.target_checkpoints_attribute!r} is a key "
                "attribute of the table; choose another name"
            )

    def _check_written_names(self) -> None:
        """The configurable attributes: not a fixed one, all different; the two indexes
        different."""
        fixed = set(AGGREGATE_ATTRIBUTES) | set(BOOKKEEPING_ATTRIBUTES)
        fields = (
            "value_attribute",
            "leaderboard_attribute",
            "ttl_attribute",
            "collection_attribute",
        )
        for field_name in fields:
            name = getattr(self, field_name)
            if name in fixed:
                raise ValueError(
                    f"{field_name} {name!r} is an attribute the framework already writes on its "
                    "items; choose another name"
                )
        values = [getattr(self, f) for f in fields]
        if len(set(values)) != len(values):
            raise ValueError(
                "value_attribute, leaderboard_attribute, ttl_attribute and collection_attribute "
                f"must be different attributes, got {values}"
            )
        if self.collection_index == self.leaderboard_index:
            raise ValueError(
                f"collection_index and leaderboard_index are both {self.collection_index!r}"
            )

    def _check_reserved_values(self) -> None:
        """The reserved partition key values: all different, and without a sort key none a
        prefix of another and all short enough to start a key."""
        reserved = self.reserved_partition_keys
        if len(set(reserved)) != len(reserved):
            raise ValueError(
                f"aggregates_pk, runner_pk, dead_letters_pk and control_pk must differ, got "
                f"{list(reserved)}"
            )
        if self.sort_key is not None:
            return
        prefixes = [f"{p}#" for p in reserved]
        for a, b in itertools.permutations(prefixes, 2):
            if b.startswith(a):
                raise ValueError(
                    f"without a sort key the reserved partition key values are prefixes "
                    f"({a!r}, {b!r}): one may not start with another followed by '#'"
                )
        longest = max(len(p.encode("utf-8")) for p in prefixes)
        if longest > MAX_SORT_KEY_BYTES // 2:
            raise ValueError(
                "without a sort key the reserved partition key values start the keys of the "
                f"framework's items: keep them under {MAX_SORT_KEY_BYTES // 2} bytes"
            )

    def _check_name_lengths(self) -> None:
        """Attribute names within DynamoDB's 255 bytes for key attribute names."""
        for name in (
            "partition_key",
            "sort_key",
            "value_attribute",
            "leaderboard_attribute",
            "collection_attribute",
            "target_checkpoints_attribute",
        ):
            if len((getattr(self, name) or "").encode("utf-8")) > 255:
                raise ValueError(f"{name} is over 255 bytes, DynamoDB's limit for key names")

    # -- keys ----------------------------------------------------------------------------------

    @property
    def has_sort_key(self) -> bool:
        """Whether the table has a sort key (else each framework item has a partition key of
        its own, ``"<reserved partition>#<sort key text>"``)."""
        return self.sort_key is not None

    @property
    def max_sort_text_bytes(self) -> int:
        """Longest sort key text (``"<rule>#<key>"``) of an aggregate item, in UTF-8 bytes:
        :data:`MAX_SORT_KEY_BYTES`, less ``"AGGREGATES#"`` without a sort key (the full partition
        key value is then the collection index's sort key, limited to the same 1,024 bytes)."""
        if self.sort_key is not None:
            return MAX_SORT_KEY_BYTES
        return MAX_SORT_KEY_BYTES - len(self.aggregates_pk.encode("utf-8")) - 1

    def key_text(self, partition: str, sort_key: str) -> str:
        """Without a sort key, the partition key value of the framework item under the reserved
        ``partition`` with sort key text ``sort_key``: ``"<partition>#<sort_key>"``."""
        return f"{partition}#{sort_key}"

    def item_fields(self, partition: str, sort_key: str) -> dict[str, str]:
        """The key attributes (plain strings) of the framework item under the reserved
        ``partition`` with sort key text ``sort_key``, plus, without a sort key, the collection
        attribute every framework item then carries."""
        if self.sort_key is not None:
            return {self.partition_key: partition, self.sort_key: sort_key}
        return {
            self.partition_key: self.key_text(partition, sort_key),
            self.collection_attribute: partition,
        }

    def item_key(self, partition: str, sort_key: str) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of a framework item under the reserved
        ``partition`` with sort key text ``sort_key``."""
        if self.sort_key is not None:
            return {self.partition_key: {"S": partition}, self.sort_key: {"S": sort_key}}
        return {self.partition_key: {"S": self.key_text(partition, sort_key)}}

    @property
    def key_attributes(self) -> tuple[str, ...]:
        """The table's key attribute names: ``(partition_key,)`` or ``(partition_key,
        sort_key)``."""
        if self.sort_key is None:
            return (self.partition_key,)
        return (self.partition_key, self.sort_key)

    def key_of(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """The primary key (DynamoDB JSON) of an item as a read returned it: its own key
        attributes, wherever it lives (a spread value, a partial's collection, the application's
        partition).

        Raises
        ------
        KeyError
            When the item lacks a key attribute (a projection that left it out).
        """
        return {name: item[name] for name in self.key_attributes}

    def target_key(self, values: tuple[str, ...]) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of an application item a rule targets, from its key
        values (``(pk,)`` or ``(pk, sk)``, :meth:`aggregator.core.rules.Target.render`)."""
        names = self.key_attributes
        return {name: {"S": value} for name, value in zip(names, values, strict=True)}

    def aggregate_key(
        self, sort_key: str, partition: str | None = None
    ) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of the aggregate item whose sort key text is
        ``sort_key`` (``"<rule>#<key>"``), under ``partition`` (:meth:`aggregate_partition`;
        default ``aggregates_pk``, the single-partition layout)."""
        return self.item_key(self.aggregates_pk if partition is None else partition, sort_key)

    # -- spread partitions ------------------------------------------------------------------------

    def aggregate_partition(self, sort_key: str, partitions: int, key_fields: int) -> str:
        """The partition key value of the aggregate item (or time bucket, or value item) whose
        sort key text is ``sort_key``, for a rule whose aggregates spread over ``partitions``
        values and whose encoded keys have ``key_fields`` ``#``-separated fields
        (:attr:`Rule.key_fields <aggregator.core.rules.Rule.key_fields>`):
        ``aggregates_pk`` when ``partitions`` is 1, else ``"<aggregates_pk>#<n>"`` with ``n`` the
        CRC-32 of :func:`aggregate_home` modulo ``partitions`` (stable across processes and
        versions)."""
        if partitions <= 1:
            return self.aggregates_pk
        home = aggregate_home(sort_key, key_fields)
        return f"{self.aggregates_pk}#{zlib.crc32(home.encode('utf-8')) % partitions}"

    def aggregate_partitions_of(self, partitions: int) -> tuple[str, ...]:
        """Every partition key value a rule spread over ``partitions`` values writes (what a
        listing of its aggregates reads, one ``Query`` each)."""
        if partitions <= 1:
            return (self.aggregates_pk,)
        return tuple(f"{self.aggregates_pk}#{n}" for n in range(partitions))

    def control_partition(self, sort_key: str) -> str:
        """The partition key value of the control item whose sort key text is ``sort_key``:
        ``control_pk`` when ``control_partitions`` is 1, else ``"<control_pk>#<n>"`` with ``n``
        the CRC-32 of the sort key modulo ``control_partitions``. The manifest is not spread:
        it is always under ``control_pk`` (:mod:`aggregator.dynamodb.manifest`)."""
        if self.control_partitions <= 1:
            return self.control_pk
        n = zlib.crc32(sort_key.encode("utf-8")) % self.control_partitions
        return f"{self.control_pk}#{n}"

    def control_key(self, sort_key: str) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of the control item with sort key text ``sort_key``
        (:meth:`control_partition`)."""
        return self.item_key(self.control_partition(sort_key), sort_key)

    def control_fields(self, sort_key: str) -> dict[str, str]:
        """The key attributes (plain strings) of the control item with sort key text
        ``sort_key``, as :meth:`item_fields` gives them."""
        return self.item_fields(self.control_partition(sort_key), sort_key)

    @property
    def control_partition_values(self) -> tuple[str, ...]:
        """Every partition key value control items live under: ``control_pk`` (the manifest,
        and every control item when ``control_partitions`` is 1), then the spread values (what
        a listing of control items reads, one ``Query`` each)."""
        if self.control_partitions <= 1:
            return (self.control_pk,)
        spread = (f"{self.control_pk}#{n}" for n in range(self.control_partitions))
        return (self.control_pk, *spread)

    def _split(self, keys: Mapping[str, Any]) -> tuple[str | None, str | None]:
        value = keys.get(self.partition_key)
        text = value.get("S") if isinstance(value, Mapping) else None
        if not isinstance(text, str):
            text = None
        if self.sort_key is not None:
            sort = keys.get(self.sort_key)
            sort_text = sort.get("S") if isinstance(sort, Mapping) else None
            return text, sort_text if isinstance(sort_text, str) else None
        if text is None:
            return None, None
        for partition in self.reserved_partition_keys:
            if text.startswith(partition) and text[len(partition) : len(partition) + 1] == "#":
                return partition, text[len(partition) + 1 :]
        return None, None

    def reserved_partition(self, value: str | None) -> str | None:
        """The reserved partition key value a partition (as :meth:`partition_of` returns it)
        belongs to: itself when reserved, ``aggregates_pk`` or ``control_pk`` for one of their
        spread values (``"<reserved>#<digits>"``, tables with a sort key), else ``None``."""
        if value is None:
            return None
        if value in self.reserved_partition_keys:
            return value
        if self.sort_key is None:
            return None
        base, sep, digits = value.rpartition("#")
        if (
            sep
            and digits.isdigit()
            and digits.isascii()
            and base
            in (
                self.aggregates_pk,
                self.control_pk,
            )
        ):
            return base
        return None

    def is_aggregates_partition(self, value: str | None) -> bool:
        """Whether a partition (as :meth:`partition_of` returns it) holds aggregates:
        ``aggregates_pk`` or one of its spread values."""
        return value is not None and self.reserved_partition(value) == self.aggregates_pk

    def is_control_partition(self, value: str | None) -> bool:
        """Whether a partition (as :meth:`partition_of` returns it) holds control items:
        ``control_pk`` or one of its spread values."""
        return value is not None and self.reserved_partition(value) == self.control_pk

    def partition_of(self, keys: Mapping[str, Any]) -> str | None:
        """The partition of a key or item map (DynamoDB JSON): the string value of the
        partition key, or, without a sort key, the reserved partition its value starts with
        (``None`` for the application's items); ``None`` when the key is absent or not a
        string."""
        return self._split(keys)[0]

    def sort_key_of(self, keys: Mapping[str, Any]) -> str | None:
        """The sort key text of a key or item map (DynamoDB JSON): the string value of the sort
        key, or, without a sort key, what follows the reserved partition and ``#``; else
        ``None``."""
        return self._split(keys)[1]

    def is_reserved(self, keys: Mapping[str, Any]) -> bool:
        """Whether a key or item map (DynamoDB JSON) is of an item the framework owns."""
        return (
            self.reserved_partition(self.partition_of(keys)) is not None
            or self.partial_total(keys) is not None
        )

    # -- partial aggregates (write sharding) -----------------------------------------------------

    def partial_key(self, sort_key: str, slot: int) -> dict[str, dict[str, str]]:
        """Key of partial ``slot`` of the aggregate ``sort_key`` (a rule with ``write_shards``):
        partition key ``"<aggregates_pk>#<sort key>"``, so all partials of one aggregate share
        an item collection, and sort key ``"PARTIAL#<slot, 3 digits>"``. Tables with a sort key
        only (rules refuse write sharding on others)."""
        assert self.sort_key is not None, "write sharding needs a table with a sort key"
        return {
            self.partition_key: {"S": f"{self.aggregates_pk}#{sort_key}"},
            self.sort_key: {"S": f"{PARTIAL_PREFIX}{slot:03d}"},
        }

    def partial_total(self, keys: Mapping[str, Any]) -> str | None:
        """The aggregate's sort key text when the key map is of a partial aggregate
        (:meth:`partial_key`), else ``None``."""
        if self.sort_key is None:
            return None
        partition, sort = self._split(keys)
        prefix = f"{self.aggregates_pk}#"
        if partition is None or sort is None or not partition.startswith(prefix):
            return None
        if self.is_aggregates_partition(partition):  # a spread value, "<aggregates_pk>#<n>"
            return None
        return partition[len(prefix) :] if sort.startswith(PARTIAL_PREFIX) else None

    def aggregate_sort_key(self, keys: Mapping[str, Any]) -> str | None:
        """The ``"<rule>#<key>"`` sort key text when the key map is of an aggregate item, else
        ``None``."""
        partition, sort_key = self._split(keys)
        return sort_key if self.is_aggregates_partition(partition) else None

    @property
    def reserved_partition_keys(self) -> tuple[str, ...]:
        """Partition key values owned by the framework, in a fixed order (prefixes, followed by
        ``#``, without a sort key)."""
        return (self.aggregates_pk, self.runner_pk, self.dead_letters_pk, self.control_pk)


DEFAULT_LAYOUT = TableLayout()


def aggregate_home(sort_key: str, key_fields: int) -> str:
    """The part of an aggregate's sort key text that chooses its partition key value: the
    rule's (storage) name and the first ``key_fields`` ``#``-separated fields of its encoded key
    (``"<rule>#<encoded key>"``), without what follows (a time bucket's
    ``"#<granularity>#<start>"``, a value item's ``"#<value>"``). Encoded key values escape
    ``#`` (:func:`~aggregator.core.rules.escape_key_part`), so ``key_fields`` is one more than
    the ``#`` in the key's literal text.

    Examples
    --------
    >>> aggregate_home("by_route#JFK#LAX#hour#2013-01-01T05", 2)
    'by_route#JFK#LAX'
    >>> aggregate_home("total#TOTAL", 1)
    'total#TOTAL'
    """
    return "#".join(sort_key.split("#", key_fields + 1)[: key_fields + 1])


def leaderboard_partition(
    rule: str, sort_key: str, partitions: int, bucket: str | None = None
) -> str:
    """The leaderboard index's partition key value of an aggregate: the rule's (storage) name,
    or with ``partitions`` > 1 ``"<rule>#<n>"`` for ``n`` = CRC-32 of the sort key modulo
    ``partitions`` (stable across processes and versions), so a rule's entries spread evenly
    over that many index partitions.

    A time bucket (``bucket``: its sort-key suffix ``"<granularity>#<bucket start>"``, as
    :meth:`~aggregator.core.rules.buckets.Bucket.suffix` gives it) is ranked among the buckets of
    the same granularity and start only: its value is ``"<rule>#<granularity>#<bucket
    start>"``, then ``#<n>`` as above. Rule names hold no ``#``, so no two of these values
    collide (``"<rule>#<n>"`` has one ``#``, a bucket's at least two)."""
    base = rule if bucket is None else f"{rule}#{bucket}"
    if partitions <= 1:
        return base
    return f"{base}#{zlib.crc32(sort_key.encode('utf-8')) % partitions}"

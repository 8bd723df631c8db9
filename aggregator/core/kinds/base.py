"""What every aggregate kind declares (pure): :class:`Kind`, :class:`Entry` and :class:`Reading`.

A kind decides three things and nothing else:

* what one item's number becomes in the table: an :class:`Entry` per contribution, i.e. which
  aggregate item it goes to (the rule's key, or the key and a *value suffix* for kinds that keep
  one item per distinct value) and the amounts added there (``value``, and ``count`` for kinds
  that keep a count of items beside the sum);
* how a reader reads a key back (:class:`Reading`: the aggregate item, or the key's value items
  in order, all or up to the first non-zero one);
* the typed fields of that reading (:meth:`Kind.fields`).

The engine, the writers, backfill, reconcile and the query layer work from these declarations
only, so a new kind is a module of its own (see :mod:`aggregator.core.kinds`) and its tests.
Every kind stays exact under the engine's delta arithmetic: an entry is added for an image that
now contributes and subtracted for one that no longer does, so an item's amounts always equal
the sum of the entries of the items as they are now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from aggregator.core.sketch import nearest_rank

__all__ = ["COUNT_ATTRIBUTE", "Entry", "Kind", "Reading", "ValueCount"]

COUNT_ATTRIBUTE = "count"
"""The attribute of an aggregate item that counts the items in it, for kinds that keep one
(:attr:`Kind.keeps_count`: ``mean``). ``count`` is a DynamoDB reserved word: every expression
names it through an expression attribute name."""


@dataclass(frozen=True, slots=True)
class Entry:
    """What one image's number adds to one aggregate item of a rule.

    ``suffix`` is appended to the aggregate's sort key as ``#<suffix>`` (``None``: the aggregate
    item itself); ``amount`` goes to the value attribute and ``count`` to :data:`COUNT_ATTRIBUTE`
    (only written by kinds with :attr:`Kind.keeps_count`).
    """

    suffix: str | None
    amount: Decimal
    count: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class Reading:
    """How a key of a kind is read.

    ``scope``: ``"item"`` reads the aggregate item (one ``GetItem``); ``"values"`` reads the
    key's value items (a ``Query`` of the sort keys that begin with the aggregate's, in
    ``order``), all of them, or with ``first_only`` only up to the first whose count is not
    zero.
    """

    scope: Literal["item", "values"] = "item"
    order: Literal["ascending", "descending"] = "ascending"
    first_only: bool = False


@dataclass(frozen=True, slots=True)
class ValueCount:
    """One value item as read: the number it stands for and how many items hold it."""

    number: Decimal
    count: Decimal


class Kind(BaseModel):
    """Base class of aggregate kinds: pydantic models (a kind's options are its fields), with
    the class-level declarations below.

    Class attributes
    ----------------
    name
        The ``kind:`` of a rule file.
    summary
        One line for ``validate`` and ``explain``.
    needs_attribute
        The rule's ``delta`` must name an attribute (a constant would make every item the
        same: a min of a constant says nothing).
    keeps_count
        The aggregate item keeps ``count`` beside ``value``, in the same write.
    per_value
        One item per distinct entry suffix under the key (``Entry.suffix`` is never ``None``);
        such items count how many items hold the value, and an item whose count falls to zero
        is given a TTL so reads do not grow (the writer's part).
    suffix_bytes
        The longest ``#<suffix>`` an entry adds to a sort key, in UTF-8 bytes.
    ranks
        The value attribute is a total that ``leaderboard`` may rank and derived rules may read.
    reading
        How a key is read back.
    headline
        The field a one-number reader shows (``value``, ``mean``, ``min``, ``max``, ``count``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ClassVar[str]
    summary: ClassVar[str]
    needs_attribute: ClassVar[bool] = False
    keeps_count: ClassVar[bool] = False
    per_value: ClassVar[bool] = False
    suffix_bytes: ClassVar[int] = 0
    ranks: ClassVar[bool] = False
    reading: ClassVar[Reading] = Reading()
    headline: ClassVar[str] = "value"

    def entry(self, number: Decimal) -> Entry:
        """The entry of one item whose rule evaluated to ``number``.

        Raises
        ------
        ArithmeticError, ValueError
            When the number cannot be used (the engine turns these into an evaluation error).
        """
        raise NotImplementedError

    def number_of(self, number: Decimal) -> Decimal:
        """The number a value item stands for, given the number its sort-key suffix holds
        (:func:`aggregator.core.sortable.number_from_sortable`): the value itself, or for a
        binned kind the bin's reported value."""
        return number

    @property
    def percentile_accuracy(self) -> Decimal:
        """How far a percentile read from the value items may be from the true one, relatively:
        0 (exact) for kinds that keep each value; a binned kind's relative accuracy."""
        return Decimal(0)

    def percentiles(
        self, values: Sequence[ValueCount], ps: Sequence[Decimal]
    ) -> tuple[list[Decimal | None], Decimal]:
        """The nearest-rank ``ps`` percentiles (:func:`aggregator.core.sketch.nearest_rank`) of
        the value items ``values`` (as read, any order; numbers as :meth:`number_of` gives them,
        so a binned kind's are its bins' reported values, within its accuracy), and how many
        values they hold."""
        ordered = sorted(((v.number, v.count) for v in values if v.count > 0), key=lambda v: v[0])
        total = Decimal(sum(n for _, n in ordered))
        return [nearest_rank(ordered, p) for p in ps], total

    def fields(
        self, value: Decimal | None, count: Decimal | None, values: Sequence[ValueCount]
    ) -> dict[str, Decimal | None]:
        """The typed fields a reader sees for one key: from the aggregate item's ``value`` and
        ``count`` (``None`` when the item does not exist) for ``scope="item"``, from the value
        items (non-zero counts, in the reading's order) for ``scope="values"``."""
        raise NotImplementedError

    def options(self) -> dict[str, object]:
        """The kind as plain data (``{"name": "distribution", "relative_accuracy": "0.01"}``),
        e.g. for a rule's fingerprint."""
        return {"name": self.name, **self.model_dump(mode="json")}

    def describe(self) -> str:
        """The kind as a rule file gives it, with its options (``distribution (relative
        accuracy 0.01)``)."""
        return self.name

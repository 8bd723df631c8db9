"""Aggregate kinds: what a rule keeps per key (pure).

=================  ================================================  ===========================
kind               keeps                                             read
=================  ================================================  ===========================
``sum`` (default)  the sum of the deltas (a count for ``delta: 1``)  one ``GetItem``
``mean``           sum and count in one item; mean = sum / count     one ``GetItem``
``min``, ``max``   one item per distinct value, counting its items   ``Query`` to the first
                                                                     non-zero value item
``distribution``   one item per log bin (relative accuracy ``a``)    ``Query`` of the key's bins
=================  ================================================  ===========================

A rule file gives the kind by name (``kind: mean``) or, with options, as a mapping
(``kind: {name: distribution, relative_accuracy: 0.005}``). Each kind is one module declaring a
:class:`~aggregator.core.kinds.base.Kind`; :data:`KINDS` lists them, and adding one is adding
its module here. Everything else (engine, writers, backfill, reconcile, queries) works from a
kind's declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aggregator.core.kinds.base import COUNT_ATTRIBUTE, Entry, Kind, Reading, ValueCount
from aggregator.core.kinds.distribution import DEFAULT_PERCENTILES, Distribution
from aggregator.core.kinds.extremes import Max, Min
from aggregator.core.kinds.mean import MEAN_CONTEXT, Mean, mean_of
from aggregator.core.kinds.sums import Sum

__all__ = [
    "COUNT_ATTRIBUTE",
    "DEFAULT_PERCENTILES",
    "KINDS",
    "MEAN_CONTEXT",
    "Distribution",
    "Entry",
    "Kind",
    "Max",
    "Mean",
    "Min",
    "Reading",
    "Sum",
    "ValueCount",
    "mean_of",
    "parse_kind",
]

KINDS: dict[str, type[Kind]] = {k.name: k for k in (Sum, Mean, Min, Max, Distribution)}
"""Every kind by its ``kind:`` name."""


def parse_kind(value: Any) -> Kind:
    """The kind a rule file gives: a name (``"mean"``), a mapping with ``name`` and the kind's
    options, or a :class:`Kind` already built.

    Raises
    ------
    ValueError
        For an unknown name (listing the known ones), a value of another type, or options the
        kind refuses (pydantic's ``ValidationError`` is a ``ValueError``).
    """
    if isinstance(value, Kind):
        return value
    options: dict[str, Any] = {}
    if isinstance(value, Mapping):
        options = {str(k): v for k, v in value.items()}
        if "name" not in options:
            raise ValueError(
                "give the kind's name: kind: {name: distribution, relative_accuracy: 0.01}"
            )
        value = options.pop("name")
    if not isinstance(value, str):
        raise ValueError(f"expected a kind name ({', '.join(KINDS)}), got {type(value).__name__}")
    cls = KINDS.get(value)
    if cls is None:
        raise ValueError(f"unknown kind {value!r}; known kinds: {', '.join(KINDS)}")
    if options and not cls.model_fields:
        raise ValueError(f"kind {value!r} takes no options, got {', '.join(sorted(options))}")
    return cls(**options)

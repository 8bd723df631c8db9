"""Where a stream shard's records of a ``write_shards: auto`` rule go: the aggregate or its
partials (pure: no I/O).

A shard's *switches* for a rule are epoch seconds, ascending: a record of the shard whose
``ApproximateCreationDateTime`` is at or after an odd number of them goes to the aggregate's
partials (the shard is *hot* for the rule then), any other record to the aggregate itself. So
the choice is a function of what never changes between deliveries of a record (its shard and its
creation time) and of switches that are persisted before any record they decide exists
(:mod:`aggregator.dynamodb.routing`): every delivery of a record makes the same choice, which is
what keeps a redelivered batch from counting twice (its checkpoint lives on the item it chose).

A switch is only ever placed in the future: at or after :func:`next_switch_seconds` of the time
it is decided, past any record the shard can hold then (DynamoDB rounds
``ApproximateCreationDateTime`` down to the second; Lambda's and DynamoDB's clocks are both set
by the Amazon Time Sync Service, and :data:`CLOCK_MARGIN_SECONDS` covers their difference).

>>> moved_at([100, 160], 99), moved_at([100, 160], 100), moved_at([100, 160], 160)
(False, True, False)
>>> next_switch_seconds(1000.25)
1002
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from decimal import Decimal

__all__ = ["CLOCK_MARGIN_SECONDS", "moved_at", "next_switch_seconds"]

CLOCK_MARGIN_SECONDS = 1
"""How far a record's ``ApproximateCreationDateTime`` may run ahead of the deciding clock, in
seconds: a switch decided at ``t`` takes effect at ``floor(t + CLOCK_MARGIN_SECONDS) + 1``."""


def moved_at(switches: Sequence[int], created_seconds: Decimal | float | int | None) -> bool:
    """Whether a record created at ``created_seconds`` (epoch seconds; ``None``: a record
    without a creation time, which only tests build) goes to the partials: an odd number of
    ``switches`` at or before it."""
    if created_seconds is None or not switches:
        return False
    return bisect.bisect_right(switches, created_seconds) % 2 == 1


def next_switch_seconds(now_seconds: float) -> int:
    """The earliest time a switch decided at ``now_seconds`` can take effect: after every
    record that can exist now, whatever second DynamoDB stamped it with."""
    return math.floor(now_seconds + CLOCK_MARGIN_SECONDS) + 1

"""The time range a read of a windowed rule asks for, and the range it answers.

:meth:`~aggregator.dynamodb.query.AggregateStore.window` and
:meth:`~aggregator.dynamodb.query.AggregateStore.percentiles` take ``start``/``end``/``last``/
``now`` as keywords; from there on the four travel as one :class:`AskedRange`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from aggregator.core.exceptions import QueryError
from aggregator.core.rules import Window
from aggregator.core.windows import Granularity

__all__ = ["AskedRange", "BucketRange", "bucket_range"]


@dataclass(frozen=True, slots=True)
class AskedRange:
    """A time range as asked of :meth:`~aggregator.dynamodb.query.AggregateStore.window`.

    Attributes
    ----------
    start, end
        ``[start, end)``, epoch seconds.
    last
        Instead of ``start``: a duration in seconds ending at ``end`` (default ``now`` rounded
        up to the second).
    now
        Epoch seconds deciding which buckets have expired; default the current time.
    """

    start: int | None = None
    end: int | None = None
    last: int | None = None
    now: float | None = None

    @property
    def given(self) -> bool:
        """Whether any of the four was given (a read of a rule without a window takes none)."""
        return any(v is not None for v in (self.start, self.end, self.last, self.now))

    def clock(self) -> float:
        """``now``, or the current time (epoch seconds)."""
        return time.time() if self.now is None else self.now

    def covering(
        self, finest: Granularity, clock: float
    ) -> tuple[tuple[int, int], tuple[int, int]]:
        """``([lo, hi), [asked start, asked end))``: the range asked (``[start, end)``, or
        ``[end - last, end)`` with ``end`` the ``clock`` rounded up to the second by default),
        and the range answered, the asked one widened out to ``finest``'s boundaries (its start
        down, its end up) so that it covers every second asked. A ``last`` that is no whole
        number of buckets widens like any other edge (``last=90`` with minute buckets covers
        two or three minutes).

        Raises
        ------
        QueryError
            For both or neither of ``start`` and ``last``, ``last`` not a positive whole number
            of seconds, ``start`` without ``end``, or ``end`` before ``start``.
        """
        start, end, last = self.start, self.end, self.last
        if (start is None) == (last is None):
            raise QueryError("give either start (with end) or last")
        if last is not None:
            if isinstance(last, bool) or not isinstance(last, int):
                raise QueryError(
                    f"last is a duration in whole seconds (an int, e.g. 86400 for a day), "
                    f"got {last!r}"
                )
            if last <= 0:
                raise QueryError(f"last must be a positive duration, got {last} s")
            asked_end = math.ceil(clock) if end is None else end
            asked = (asked_end - last, asked_end)
        else:
            assert start is not None  # exactly one of start and last (checked above)
            if end is None:
                raise QueryError("give end with start")
            if end < start:
                raise QueryError(f"end ({end}) is before start ({start})")
            asked = (start, end)
        return (finest.start(asked[0]), finest.ceil(asked[1])), asked


@dataclass(frozen=True, slots=True)
class BucketRange:
    """The buckets of one granularity a read covers: ``starts`` (epoch seconds, in time order)
    of ``granularity`` over ``[lo, hi)``, the range asked widened out to its boundaries, and
    ``clock``, the time expiry is judged at."""

    granularity: Granularity
    lo: int
    hi: int
    asked: tuple[int, int]
    clock: float

    @property
    def starts(self) -> range:
        return range(self.lo, self.hi, self.granularity.seconds)


def bucket_range(
    rule: str,
    window: Window | None,
    granularity: str | None,
    asked: AskedRange,
    *,
    most: int,
    what: str,
    why: str,
) -> BucketRange:
    """The buckets of ``granularity`` (a label the rule keeps; default the finest whose buckets
    over the range are at most ``most``, else the finest) that the range ``asked`` covers, for
    a read of ``rule`` named ``what`` that reads at most ``most`` of them (``why`` is what the
    error advises beyond that).

    Raises
    ------
    QueryError
        For a rule without a window, a granularity it does not keep, a bad range
        (:meth:`AskedRange.covering`), or more than ``most`` buckets.
    """
    if window is None:
        raise QueryError(f"rule {rule!r} has no window; {what} needs time buckets")
    kept = {g.label: g for g in window.granularities}
    if granularity is None:  # the finest whose buckets over the range are few enough
        clock = asked.clock()
        for size in sorted(window.granularities, key=lambda g: g.seconds):
            (lo, hi), _ = asked.covering(size, clock)
            if (hi - lo) // size.seconds <= most:
                granularity = size.label
                break
    label = window.finest.label if granularity is None else granularity
    if label not in kept:
        raise QueryError(f"rule {rule!r} keeps no {label!r} buckets; it keeps {', '.join(kept)}")
    size = kept[label]
    clock = asked.clock()
    (lo, hi), asked_range = asked.covering(size, clock)
    count = (hi - lo) // size.seconds
    if count > most:
        raise QueryError(
            f"the range holds {count:,} {label} buckets, more than {what} reads ({most:,}); {why}"
        )
    return BucketRange(size, lo, hi, asked_range, clock)

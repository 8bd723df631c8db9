"""The time range asked of a windowed read (aggregator.dynamodb.query.ranges.AskedRange)."""

from __future__ import annotations

import pytest

from aggregator.core.exceptions import QueryError
from aggregator.core.windows import Granularity
from aggregator.dynamodb.query.ranges import AskedRange

MINUTE = Granularity.parse("minute")


def test_last_widens_out_to_the_finest_buckets():
    # 10:30:27 -> the asked end rounds up to 10:30:27 (whole second), the answered end to 10:31
    now = 37_827.0
    answered, asked = AskedRange(last=3600).covering(MINUTE, now)
    assert asked == (37_827 - 3600, 37_827)
    assert answered == (34_200, 37_860)


@pytest.mark.parametrize("last", ["1h", 3600.0, True])
def test_last_that_is_not_whole_seconds_is_a_query_error(last):
    with pytest.raises(QueryError, match="whole seconds"):
        AskedRange(last=last).covering(MINUTE, 0.0)


def test_last_off_the_granularity_widens_like_any_edge():
    # --last 90s at 10:30:27 asks [10:28:57, 10:30:27): the minutes 10:28, 10:29 and 10:30
    now = 37_827.0
    answered, asked = AskedRange(last=90).covering(MINUTE, now)
    assert asked == (37_737, 37_827)
    assert answered == (37_680, 37_860)
    # --last 30m over hour buckets at 17:10:00 asks [16:40, 17:10): the hours 16:00 and 17:00
    answered, asked = AskedRange(last=1800).covering(Granularity.parse("hour"), 61_800.0)
    assert asked == (60_000, 61_800)
    assert answered == (57_600, 64_800)


@pytest.mark.parametrize("last", [0, -60])
def test_last_that_is_not_positive_is_refused(last):
    with pytest.raises(QueryError, match="positive duration"):
        AskedRange(last=last).covering(MINUTE, 0.0)

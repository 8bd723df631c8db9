"""Time buckets: granularities, bucket text, event times, durations, range plans, windowed rules.

Expected epochs come from ``calendar.timegm`` on hand-written UTC tuples, never from the code
under test.
"""

from __future__ import annotations

import calendar
import itertools
import re
import textwrap
from decimal import Decimal

import pytest

from aggregator.core.exceptions import EvaluationError, RuleError
from aggregator.core.rules import Bucket, Contribution, load_rules, rule
from aggregator.core.windows import (
    Granularity,
    RangePart,
    bucket_text,
    event_time_seconds,
    format_duration,
    parse_duration,
    parse_instant,
    plan_range,
)

D = Decimal
MINUTE = Granularity("minute", 60)
HOUR = Granularity("hour", 3600)
DAY = Granularity("day", 86400)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """Epoch seconds of a UTC wall-clock time, independent of the module under test."""
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))


T0 = utc(2013, 1, 1, 5)  # 2013-01-01T05:00:00Z


def test_reference_instant_is_what_the_docs_say():
    assert T0 == 1357016400


# -- Granularity -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "label", "seconds"),
    [
        ("minute", "minute", 60),
        ("hour", "hour", 3600),
        ("day", "day", 86400),
        (300, "300s", 300),
        (3600, "hour", 3600),
        (60, "minute", 60),
        (86400, "day", 86400),
        (D("3600"), "hour", 3600),
        (D("900"), "900s", 900),
        (1, "1s", 1),
    ],
)
def test_granularity_parse(value, label, seconds):
    g = Granularity.parse(value)
    assert (g.label, g.seconds) == (label, seconds)
    assert str(g) == label


@pytest.mark.parametrize("value", [0, -5, 1.5, D("1.5"), D(0), "week", "", True, False, None])
def test_granularity_parse_rejects(value):
    with pytest.raises(ValueError, match="granularity must be minute, hour, day"):
        Granularity.parse(value)


@pytest.mark.parametrize(
    ("granularity", "t", "start", "ceil"),
    [
        # exact boundary and one second either side, after 1970
        (HOUR, T0, T0, T0),
        (HOUR, T0 - 1, T0 - 3600, T0),
        (HOUR, T0 + 1, T0, T0 + 3600),
        (MINUTE, T0 + 125, T0 + 120, T0 + 180),
        (MINUTE, T0 + 120, T0 + 120, T0 + 120),
        (DAY, utc(2013, 1, 1), utc(2013, 1, 1), utc(2013, 1, 1)),
        (DAY, utc(2013, 1, 1) - 1, utc(2012, 12, 31), utc(2013, 1, 1)),
        (DAY, utc(2013, 1, 1) + 1, utc(2013, 1, 1), utc(2013, 1, 2)),
        # the epoch itself
        (HOUR, 0, 0, 0),
        (HOUR, 1, 0, 3600),
        (HOUR, -1, -3600, 0),
        # before 1970: floor goes down, ceil goes up (toward +infinity)
        (HOUR, -3600, -3600, -3600),
        (HOUR, -3599, -3600, 0),
        (HOUR, -3601, -7200, -3600),
        (DAY, utc(1969, 7, 20, 20, 17, 40), utc(1969, 7, 20), utc(1969, 7, 21)),
        (DAY, utc(1969, 7, 20), utc(1969, 7, 20), utc(1969, 7, 20)),
        (DAY, utc(1969, 7, 20) - 1, utc(1969, 7, 19), utc(1969, 7, 20)),
        (MINUTE, utc(1900, 1, 1, 0, 0, 59), utc(1900, 1, 1), utc(1900, 1, 1, 0, 1)),
        (Granularity("300s", 300), -1, -300, 0),
        (Granularity("300s", 300), -301, -600, -300),
        (Granularity("300s", 300), T0 + 299, T0, T0 + 300),
    ],
)
def test_granularity_start_and_ceil(granularity, t, start, ceil):
    assert granularity.start(t) == start
    assert granularity.ceil(t) == ceil


# -- bucket text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "text"),
    [
        (1357016400, "2013-01-01T05:00:00Z"),
        (0, "1970-01-01T00:00:00Z"),
        (-1, "1969-12-31T23:59:59Z"),
        (utc(2000, 2, 29, 13, 7, 9), "2000-02-29T13:07:09Z"),
        (utc(999, 12, 31, 23), "0999-12-31T23:00:00Z"),
        (utc(1, 1, 1), "0001-01-01T00:00:00Z"),
        (utc(9999, 12, 31, 23, 59, 59), "9999-12-31T23:59:59Z"),
    ],
)
def test_bucket_text(t, text):
    assert bucket_text(t) == text
    assert len(bucket_text(t)) == 20


def test_bucket_text_limits():
    first, last = utc(1, 1, 1), utc(9999, 12, 31, 23, 59, 59)
    assert (first, last) == (-62135596800, 253402300799)
    with pytest.raises(EvaluationError, match=re.escape("outside years 0001..9999")):
        bucket_text(first - 1)
    with pytest.raises(EvaluationError, match=re.escape("outside years 0001..9999")):
        bucket_text(last + 1)


@pytest.mark.parametrize(
    ("granularity", "first"),
    [
        (HOUR, utc(1999, 12, 31, 20)),  # across 1999-12-31T23:00Z -> 2000-01-01T00:00Z
        (MINUTE, utc(1999, 12, 31, 23, 57)),
        (DAY, utc(1969, 12, 29)),  # across the epoch
        (HOUR, utc(999, 12, 31, 21)),  # across a change in the number of year digits
        (Granularity("300s", 300), utc(2012, 12, 31, 23, 45)),
    ],
)
def test_bucket_texts_sort_as_text_in_time_order(granularity, first):
    starts = [first + i * granularity.seconds for i in range(8)]
    texts = [bucket_text(s) for s in starts]
    assert sorted(texts) == texts
    assert len(set(texts)) == len(texts)


def test_bucket_text_across_the_millennium():
    assert bucket_text(utc(1999, 12, 31, 23)) == "1999-12-31T23:00:00Z"
    assert bucket_text(utc(2000, 1, 1)) == "2000-01-01T00:00:00Z"
    assert "1999-12-31T23:00:00Z" < "2000-01-01T00:00:00Z"


# -- parse_instant ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2013-01-01T05:00:00Z", utc(2013, 1, 1, 5)),
        ("2013-01-01T05:00:00+00:00", utc(2013, 1, 1, 5)),
        ("2013-01-01T00:00:00-05:00", utc(2013, 1, 1, 5)),
        ("2013-01-01T10:30:00+05:30", utc(2013, 1, 1, 5)),
        ("2013-01-01T02:15:00+05:30", utc(2012, 12, 31, 20, 45)),
        ("2012-12-31T23:30:00-05:00", utc(2013, 1, 1, 4, 30)),
        ("2013-01-01T05:00:00.999Z", utc(2013, 1, 1, 5)),
        ("2013-01-01T05:00:59.999999+00:00", utc(2013, 1, 1, 5, 0, 59)),
        ("1969-12-31T23:59:59.5Z", -1),  # floored toward the past, not truncated toward 0
        ("1969-12-31T23:59:59Z", -1),
        ("1970-01-01T00:00:00.000001Z", 0),
        ("1960-06-15T12:00:00-05:00", utc(1960, 6, 15, 17)),
    ],
)
def test_parse_instant(text, expected):
    assert parse_instant(text) == expected


def test_parse_instant_rejects_a_naive_time_naming_the_offset():
    with pytest.raises(EvaluationError) as info:
        parse_instant("2013-01-01T05:00:00")
    message = str(info.value)
    assert "no UTC offset" in message
    assert "2013-01-01T05:00:00Z" in message


@pytest.mark.parametrize("text", ["garbage", "", "2013-13-01T00:00:00Z", "2013-01-01T25:00:00Z"])
def test_parse_instant_rejects_garbage(text):
    with pytest.raises(EvaluationError, match="is not an ISO 8601 time"):
        parse_instant(text)


# -- event_time_seconds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (D("1357016400"), "epoch_seconds", T0),
        (D("1357016400.999"), "epoch_seconds", T0),
        (D("1357016400.001"), "epoch_seconds", T0),
        (D("1.357016400E+9"), "epoch_seconds", T0),
        (D("-0.5"), "epoch_seconds", -1),
        (D("-1.001"), "epoch_seconds", -2),
        (D("-2"), "epoch_seconds", -2),
        (D("0"), "epoch_seconds", 0),
        (D("1357016400000"), "epoch_milliseconds", T0),
        (D("1357016400999"), "epoch_milliseconds", T0),
        (D("1357016401000"), "epoch_milliseconds", T0 + 1),
        (D("1357016400999.5"), "epoch_milliseconds", T0),
        (D("-1"), "epoch_milliseconds", -1),
        (D("-1000"), "epoch_milliseconds", -1),
        (D("-1001"), "epoch_milliseconds", -2),
        (D("999"), "epoch_milliseconds", 0),
        ("2013-01-01T00:00:00-05:00", "iso8601", T0),
        ("2013-01-01T05:00:00.5Z", "iso8601", T0),
    ],
)
def test_event_time_seconds(value, unit, expected):
    assert event_time_seconds(value, unit) == expected


def test_event_time_milliseconds_with_many_digits_floors():
    # 13 integer digits + 19 fraction digits = 32 significant digits (DynamoDB allows 38)
    assert event_time_seconds(D("1357016400999.9999999999999999999"), "epoch_milliseconds") == T0


@pytest.mark.parametrize(
    ("value", "unit", "message"),
    [
        ("1357016400", "epoch_seconds", "expected a number of seconds, got str"),
        (None, "epoch_seconds", "expected a number of seconds, got null"),
        (True, "epoch_seconds", "expected a number of seconds, got bool"),
        (1357016400, "epoch_seconds", "expected a number of seconds, got int"),
        (D("NaN"), "epoch_seconds", "expected a number of seconds, got Decimal"),
        (D("Infinity"), "epoch_milliseconds", "expected a number of milliseconds, got Decimal"),
        ("1357016400000", "epoch_milliseconds", "expected a number of milliseconds, got str"),
        (D("1357016400"), "iso8601", "expected an ISO 8601 string, got Decimal"),
        (None, "iso8601", "expected an ISO 8601 string, got null"),
        ("2013-01-01T05:00:00", "iso8601", "has no UTC offset"),
        ("soon", "iso8601", "is not an ISO 8601 time"),
        (D("253402300800"), "epoch_seconds", "outside years 0001..9999"),
        (D("-62135596801"), "epoch_seconds", "outside years 0001..9999"),
        (D("1E+30"), "epoch_milliseconds", "outside years 0001..9999"),
        (D("1E+400"), "epoch_seconds", "outside years 0001..9999"),
    ],
)
def test_event_time_seconds_rejects(value, unit, message):
    with pytest.raises(EvaluationError, match=re.escape(message)):
        event_time_seconds(value, unit)


# -- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("25h", 90000),
        ("1h30m", 5400),
        ("2d", 172800),
        ("90s", 90),
        ("90m", 5400),
        ("1d1h1m1s", 90061),
        ("90000", 90000),
        (" 25h ", 90000),
        (90000, 90000),
        (1, 1),
        (D("90000"), 90000),
        (D("3.6E+3"), 3600),
    ],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "0s",
        "0",
        "0h0m",
        "",
        "  ",
        "1x",
        "h",
        "h30m",
        "1.5h",
        "-1h",
        "1h 30m",
        "25H",
        None,
        [],
        -1,
        0,
        True,
        False,
        1.5,
        D("1.5"),
        D("-60"),
        D(0),
    ],
)
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (90000, "1d1h"),
        (5400, "1h30m"),
        (86400, "1d"),
        (90, "1m30s"),
        (90061, "1d1h1m1s"),
        (1, "1s"),
        (0, "0s"),
        (172800 + 59, "2d59s"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [1, 59, 60, 3599, 3600, 5400, 86399, 86400, 90000, 1000003])
def test_format_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


# -- plan_range --------------------------------------------------------------------------------


def assert_valid_plan(parts: list[RangePart], start: int, end: int) -> None:
    """Disjoint, contiguous, in time order, exactly [start, end), each part aligned."""
    if end <= start:
        assert parts == []
        return
    assert parts, "a non-empty range needs parts"
    assert parts[0].start == start
    assert parts[-1].end == end
    for before, after in itertools.pairwise(parts):
        assert before.end == after.start  # contiguous and disjoint
    for part in parts:
        size = part.granularity.seconds
        assert part.start < part.end
        assert part.start % size == 0
        assert part.end % size == 0
        assert part.buckets == (part.end - part.start) // size
        assert part.first_bucket == part.start
        assert part.last_bucket == part.end - size
    assert sum(p.end - p.start for p in parts) == end - start


def summary(parts: list[RangePart]) -> list[tuple[str, int, int, int]]:
    return [(p.granularity.label, p.start, p.end, p.buckets) for p in parts]


H = 3600
M = 60
BASE = utc(2013, 1, 1)  # midnight UTC

PLAN_CASES = [
    # (id, granularities, start, end, expected [(label, start, end, buckets)])
    (
        "ragged-both-edges",
        [HOUR, MINUTE],
        BASE + 5 * H + 17 * M,
        BASE + 9 * H + 42 * M,
        [
            ("minute", BASE + 5 * H + 17 * M, BASE + 6 * H, 43),
            ("hour", BASE + 6 * H, BASE + 9 * H, 3),
            ("minute", BASE + 9 * H, BASE + 9 * H + 42 * M, 42),
        ],
    ),
    (
        "ragged-start-only",
        [HOUR, MINUTE],
        BASE + 5 * H + 59 * M,
        BASE + 8 * H,
        [
            ("minute", BASE + 5 * H + 59 * M, BASE + 6 * H, 1),
            ("hour", BASE + 6 * H, BASE + 8 * H, 2),
        ],
    ),
    (
        "ragged-end-only",
        [HOUR, MINUTE],
        BASE + 5 * H,
        BASE + 7 * H + 1 * M,
        [
            ("hour", BASE + 5 * H, BASE + 7 * H, 2),
            ("minute", BASE + 7 * H, BASE + 7 * H + 1 * M, 1),
        ],
    ),
    (
        "aligned",
        [HOUR, MINUTE],
        BASE + 5 * H,
        BASE + 9 * H,
        [("hour", BASE + 5 * H, BASE + 9 * H, 4)],
    ),
    (
        "granularities-in-any-order",
        [MINUTE, HOUR],
        BASE + 5 * H + 30 * M,
        BASE + 7 * H,
        [
            ("minute", BASE + 5 * H + 30 * M, BASE + 6 * H, 30),
            ("hour", BASE + 6 * H, BASE + 7 * H, 1),
        ],
    ),
    (
        "shorter-than-an-hour-across-an-hour-edge",
        [HOUR, MINUTE],
        BASE + 5 * H + 40 * M,
        BASE + 6 * H + 20 * M,
        [("minute", BASE + 5 * H + 40 * M, BASE + 6 * H + 20 * M, 40)],
    ),
    (
        "inside-one-hour",
        [HOUR, MINUTE],
        BASE + 5 * H + 10 * M,
        BASE + 5 * H + 50 * M,
        [("minute", BASE + 5 * H + 10 * M, BASE + 5 * H + 50 * M, 40)],
    ),
    (
        "one-whole-hour",
        [HOUR, MINUTE],
        BASE + 5 * H,
        BASE + 6 * H,
        [("hour", BASE + 5 * H, BASE + 6 * H, 1)],
    ),
    (
        "single-minute",
        [HOUR, MINUTE],
        BASE + 5 * H + 3 * M,
        BASE + 5 * H + 4 * M,
        [("minute", BASE + 5 * H + 3 * M, BASE + 5 * H + 4 * M, 1)],
    ),
    ("empty", [HOUR, MINUTE], BASE + 5 * H, BASE + 5 * H, []),
    ("reversed-is-empty", [HOUR, MINUTE], BASE + 6 * H, BASE + 5 * H, []),
    (
        "only-minutes-granularity",
        [MINUTE],
        BASE + 5 * H + 17 * M,
        BASE + 9 * H + 42 * M,
        [("minute", BASE + 5 * H + 17 * M, BASE + 9 * H + 42 * M, 265)],
    ),
    (
        "three-levels-across-a-day-edge",
        [DAY, HOUR, MINUTE],
        BASE - 2 * H - 15 * M,  # 2012-12-31T21:45Z
        BASE + 86400 + 3 * H + 10 * M,  # 2013-01-02T03:10Z
        [
            ("minute", BASE - 2 * H - 15 * M, BASE - 2 * H, 15),
            ("hour", BASE - 2 * H, BASE, 2),
            ("day", BASE, BASE + 86400, 1),
            ("hour", BASE + 86400, BASE + 86400 + 3 * H, 3),
            ("minute", BASE + 86400 + 3 * H, BASE + 86400 + 3 * H + 10 * M, 10),
        ],
    ),
    (
        "three-levels-no-whole-day",
        [DAY, HOUR, MINUTE],
        BASE - 2 * H - 15 * M,
        BASE + 3 * H + 10 * M,
        [
            ("minute", BASE - 2 * H - 15 * M, BASE - 2 * H, 15),
            ("hour", BASE - 2 * H, BASE + 3 * H, 5),
            ("minute", BASE + 3 * H, BASE + 3 * H + 10 * M, 10),
        ],
    ),
    (
        "before-1970",
        [HOUR, MINUTE],
        -2 * H - 30 * M,
        30 * M,
        [
            ("minute", -2 * H - 30 * M, -2 * H, 30),
            ("hour", -2 * H, 0, 2),
            ("minute", 0, 30 * M, 30),
        ],
    ),
]


@pytest.mark.parametrize(
    ("granularities", "start", "end", "expected"),
    [c[1:] for c in PLAN_CASES],
    ids=[c[0] for c in PLAN_CASES],
)
def test_plan_range(granularities, start, end, expected):
    parts = plan_range(granularities, start, end)
    assert summary(parts) == expected
    assert_valid_plan(parts, start, end)


@pytest.mark.parametrize(
    ("granularities", "start", "end", "edge"),
    [
        ([HOUR, MINUTE], BASE + 30, BASE + H, BASE + 30),
        ([HOUR, MINUTE], BASE, BASE + H + 1, BASE + H + 1),
        ([HOUR], BASE + 5 * M, BASE + 2 * H, BASE + 5 * M),
        ([DAY, HOUR], BASE, BASE + 90 * M, BASE + 90 * M),
    ],
)
def test_plan_range_rejects_edges_off_the_finest_boundary(granularities, start, end, edge):
    finest = min(granularities, key=lambda g: g.seconds).label
    with pytest.raises(ValueError, match=f"^{edge} is not a {finest} boundary$"):
        plan_range(granularities, start, end)


@pytest.mark.parametrize("offset", range(60))
def test_24h_sliding_window_needs_few_buckets(offset):
    end = BASE + 12 * H + offset * M
    start = end - 24 * H
    parts = plan_range([HOUR, MINUTE], start, end)
    assert_valid_plan(parts, start, end)
    hour_runs = [p for p in parts if p.granularity.label == "hour"]
    minute_runs = [p for p in parts if p.granularity.label == "minute"]
    assert len(hour_runs) <= 1
    assert len(minute_runs) <= 2
    total = sum(p.buckets for p in parts)
    assert total <= 83
    # exactly: 24 hours when aligned, else 23 hours + (60 - offset) + offset minutes
    assert total == (24 if offset == 0 else 83)


# -- Window on rules ---------------------------------------------------------------------------

WINDOW = {"time": "ts", "unit": "iso8601", "granularities": ["hour", "minute"], "retention": "25h"}


def test_window_buckets_for_an_iso_time_with_offset():
    r = rule("w", key="{cat}", window=WINDOW)
    # 2013-01-01T00:02:05-05:00 is 05:02:05Z
    buckets = r.window.buckets({"ts": "2013-01-01T00:02:05-05:00", "cat": "A"})
    hour_start, minute_start = utc(2013, 1, 1, 5), utc(2013, 1, 1, 5, 2)
    assert buckets == [
        Bucket("hour", hour_start, "2013-01-01T05:00:00Z", hour_start + 3600 + 90000),
        Bucket("minute", minute_start, "2013-01-01T05:02:00Z", minute_start + 60 + 90000),
    ]
    assert buckets[0].expires == 1357110000
    assert buckets[1].expires == 1357106580
    assert buckets[0].suffix() == "hour#2013-01-01T05:00:00Z"


def test_window_without_retention_keeps_buckets_forever():
    r = rule("w", key="K", window={"time": "ts", "unit": "epoch_seconds", "granularities": "day"})
    assert r.window.retention is None
    t = utc(1969, 7, 20, 20, 17, 40)
    assert r.window.buckets({"ts": D(t)}) == [
        Bucket("day", utc(1969, 7, 20), "1969-07-20T00:00:00Z", None)
    ]


@pytest.mark.parametrize(
    "granularities",
    [
        ["minute", "day", "hour"],
        ["hour", "day", "minute"],
        [60, 86400, 3600],
        ["minute", 3600, D("86400")],
    ],
)
def test_window_granularities_sorted_coarsest_first(granularities):
    r = rule(
        "w", key="K", window={"time": "ts", "unit": "epoch_seconds", "granularities": granularities}
    )
    assert r.window.granularities == (DAY, HOUR, MINUTE)
    assert r.window.finest == MINUTE
    assert r.window.granularity("hour") == HOUR


def test_window_single_granularity_string_or_number():
    r = rule("w", key="K", window={"time": "ts", "unit": "epoch_seconds", "granularities": "hour"})
    assert r.window.granularities == (HOUR,)
    r = rule("w", key="K", window={"time": "ts", "unit": "epoch_seconds", "granularities": 300})
    assert r.window.granularities == (Granularity("300s", 300),)


def test_window_unknown_granularity_label():
    r = rule("w", key="K", window={"time": "ts", "unit": "epoch_seconds", "granularities": "hour"})
    with pytest.raises(ValueError, match="no granularity 'minute'; this rule has hour"):
        r.window.granularity("minute")


def test_window_retention_duration():
    r = rule("w", key="K", window=WINDOW)
    assert r.window.retention == 90000
    r = rule("w", key="K", window={**WINDOW, "retention": 120})
    assert r.window.retention == 120


def window_error(**changes) -> str:
    window = {**WINDOW, **changes}
    with pytest.raises(RuleError) as info:
        rule("w", key="K", window=window)
    return str(info.value)


def test_window_rejects_non_nested_granularities():
    message = window_error(granularities=[3600, 7000])
    assert message.startswith("<python>: rule 'w', field 'window.granularities': ")
    assert "7000s (7000 s) is not a multiple of hour (3600 s)" in message


def test_window_rejects_duplicate_granularities():
    message = window_error(granularities=["hour", 3600])
    assert message == (
        "<python>: rule 'w', field 'window.granularities': a granularity is listed twice"
    )


def test_window_rejects_unknown_granularity():
    message = window_error(granularities=["hour", "week"])
    assert message.startswith("<python>: rule 'w', field 'window.granularities[1]': ")
    assert "'week'" in message


def test_window_rejects_unknown_unit():
    message = window_error(unit="epoch_minutes")
    assert message == (
        "<python>: rule 'w', field 'window.unit': unit must be one of epoch_seconds, "
        "epoch_milliseconds, iso8601, got 'epoch_minutes'"
    )


@pytest.mark.parametrize("retention", ["0s", "1x", -1, True])
def test_window_rejects_bad_retention(retention):
    message = window_error(retention=retention)
    assert message.startswith("<python>: rule 'w', field 'window.retention': ")


def test_window_rejects_infinite_retention():
    message = window_error(retention=D("Infinity"))
    assert message.startswith("<python>: rule 'w', field 'window.retention': ")


def test_window_rejects_infinite_granularity():
    message = window_error(granularities=[D("Infinity")])
    assert message.startswith("<python>: rule 'w', field 'window.granularities[0]': ")


def test_window_rejects_unknown_field_and_empty_time():
    assert "field 'window.zone'" in window_error(zone="UTC")
    assert "field 'window.time'" in window_error(time="")


def test_a_windowed_leaderboard_ranks_each_bucket_under_its_own_index_partition():
    """Top-N per time bucket: a bucket's index partition key value names the rule, the
    granularity and the bucket start (and the index partition with leaderboard_partitions),
    so no two buckets, and no bucket and a rule's partition, share one."""
    from aggregator.core.layout import leaderboard_partition

    spread = rule("w", key="K", window=WINDOW, leaderboard=True, leaderboard_partitions=4)
    assert spread.leaderboard and spread.window is not None
    suffix = "hour#2013-01-01T05:00:00Z"
    assert leaderboard_partition("w", "w#K#" + suffix, 1, suffix) == "w#" + suffix
    spread_values = {leaderboard_partition("w", f"w#{k}#{suffix}", 4, suffix) for k in "abcdefgh"}
    assert spread_values <= {f"w#{suffix}#{i}" for i in range(4)} and len(spread_values) > 1
    assert leaderboard_partition("w", "w#K", 4) in {f"w#{i}" for i in range(4)}


def test_window_from_yaml_equals_python(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        textwrap.dedent(
            """
            rules:
              - name: events_by_cat
                key: "{cat}"
                window:
                  time: insertUtcTime
                  unit: epoch_milliseconds
                  granularities: [minute, hour]
                  retention: 25h
              - name: daily
                key: ALL
                window: {time: ts, unit: iso8601, granularities: 86400, retention: 90000}
            """
        )
    )
    loaded = load_rules(path)
    python = [
        rule(
            "events_by_cat",
            key="{cat}",
            window={
                "time": "insertUtcTime",
                "unit": "epoch_milliseconds",
                "granularities": ["hour", "minute"],
                "retention": 90000,
            },
        ),
        rule(
            "daily",
            key="ALL",
            window={"time": "ts", "unit": "iso8601", "granularities": ["day"], "retention": "1d1h"},
        ),
    ]
    assert list(loaded.rules) == python
    assert loaded.get("events_by_cat").window.granularities == (HOUR, MINUTE)
    assert loaded.get("daily").window.retention == 90000


def test_window_yaml_error_names_file_rule_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "rules:\n  - name: w\n    key: K\n"
        "    window: {time: ts, unit: epoch_seconds, granularities: [3600, 7000]}\n"
    )
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert str(info.value).startswith(f"{path}: rule 'w', field 'window.granularities': ")


# -- contributions of windowed rules -----------------------------------------------------------

EPOCH_WINDOW = {
    "time": "ts",
    "unit": "epoch_seconds",
    "granularities": ["minute", "hour"],
    "retention": "25h",
}


def test_windowed_contributions_one_per_granularity():
    r = rule("events", key="{cat}", delta={"attribute": "n"}, window=EPOCH_WINDOW)
    t = utc(2013, 1, 1, 5, 2, 5)
    out = r.contributions({"cat": "A#B", "n": D("2.5"), "ts": D(t) + D("0.75")})
    hour, minute = utc(2013, 1, 1, 5), utc(2013, 1, 1, 5, 2)
    assert out == [
        Contribution(
            "A%23B#hour#2013-01-01T05:00:00Z",
            "A#B",
            D("2.5"),
            Bucket("hour", hour, "2013-01-01T05:00:00Z", hour + 3600 + 90000),
        ),
        Contribution(
            "A%23B#minute#2013-01-01T05:02:00Z",
            "A#B",
            D("2.5"),
            Bucket("minute", minute, "2013-01-01T05:02:00Z", minute + 60 + 90000),
        ),
    ]


def test_windowed_contributions_nothing_when_not_matching():
    r = rule("events", match={"kind": "click"}, key="{cat}", window=EPOCH_WINDOW)
    assert r.contributions({"kind": "view", "cat": "A"}) == []
    assert r.contributions(None) == []


def test_windowed_contribution_missing_time_attribute():
    r = rule("events", key="{cat}", window=EPOCH_WINDOW)
    with pytest.raises(EvaluationError) as info:
        r.contributions({"cat": "A"})
    assert str(info.value) == "time attribute 'ts' is missing"


@pytest.mark.parametrize(
    ("ts", "message"),
    [
        ("1357016400", "time attribute 'ts': expected a number of seconds, got str"),
        (None, "time attribute 'ts': expected a number of seconds, got null"),
        (D("1E+20"), "time attribute 'ts': time 1E+20 (epoch_seconds) is outside years"),
    ],
)
def test_windowed_contribution_bad_time(ts, message):
    r = rule("events", key="{cat}", window=EPOCH_WINDOW)
    with pytest.raises(EvaluationError, match="^" + re.escape(message)):
        r.contributions({"cat": "A", "ts": ts})

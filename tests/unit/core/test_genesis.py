"""The genesis proof, the pure part: which stream it names, how long it holds, and when a rule
was counted from the start of every shard (:mod:`aggregator.core.lifecycle`)."""

from __future__ import annotations

import pytest

from aggregator.core.lifecycle import (
    CLOCK_SKEW_SECONDS,
    GENESIS_MAX_AGE_SECONDS,
    Fence,
    Genesis,
    ShardOpening,
    counted_from_start,
    stream_label,
)

LABEL = "2026-11-27T19:56:57.181"
ARN = f"arn:aws:dynamodb:eu-west-1:123456789012:table/games/stream/{LABEL}"
CREATED = 1795809417.181  # LABEL as epoch seconds (UTC)
ZERO = "0" * 40
LATER = "0" * 39 + "7"


def test_the_label_is_the_text_after_stream() -> None:
    assert stream_label(ARN) == LABEL
    assert stream_label("arn:aws:dynamodb:eu-west-1:1:table/games") == ""


@pytest.mark.parametrize(
    ("arn", "age_seconds", "holds"),
    [
        (ARN, 0, True),
        (ARN, 3600, True),
        (ARN, GENESIS_MAX_AGE_SECONDS - 1, True),
        (ARN, GENESIS_MAX_AGE_SECONDS, False),  # the stream may have trimmed its first records
        (ARN, 30 * 86400, False),
        (ARN, -1, True),  # this machine's clock a little behind DynamoDB's
        (
            ARN,
            -CLOCK_SKEW_SECONDS - 1,
            False,
        ),  # a clock in the past (a simulated one) proves nothing
        (ARN.replace(LABEL, "2026-11-28T01:00:00.000"), 0, False),  # another stream (re-enabled)
        (None, 10, True),  # the age alone (registration); the stream is checked on promotion
    ],
)
def test_genesis_holds_for_its_own_young_stream(
    arn: str | None, age_seconds: float, holds: bool
) -> None:
    assert Genesis(LABEL, "create-table").holds(arn, CREATED + age_seconds) is holds


def test_a_label_that_is_no_time_proves_nothing() -> None:
    assert not Genesis("not-a-time", "stack").holds(None, CREATED)


def _fence(rule: str, shard: str, after: str, set_by: str = "handler") -> Fence:
    return Fence(rule, shard, after, set_by)  # type: ignore[arg-type]


def test_counted_from_start_needs_every_shard_opened_with_the_rule() -> None:
    s1 = ShardOpening(ZERO, {"r": _fence("r", "s1", ZERO), "q": _fence("q", "s1", LATER)})
    s2 = ShardOpening(LATER, {"r": _fence("r", "s2", LATER)})
    openings = {"s1": s1, "s2": s2}
    assert counted_from_start("r", ["s1", "s2"], openings)
    # q joined s1 after its first batch: the records before it are not counted
    assert not counted_from_start("q", ["s1"], openings)
    # a shard that never delivered a batch, or no shard at all, proves nothing
    assert not counted_from_start("r", ["s1", "s2", "s3"], openings)
    assert not counted_from_start("r", [], openings)
    # a shard opened without a record of where (a fence item older than the proof)
    assert not counted_from_start("r", ["s1"], {"s1": ShardOpening(None, s1.fences)})
    # a fence the backfill set is where the backfill's part ends, not a first batch
    backfilled = ShardOpening(ZERO, {"r": _fence("r", "s1", ZERO, "backfill")})
    assert not counted_from_start("r", ["s1"], {"s1": backfilled})

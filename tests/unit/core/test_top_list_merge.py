"""Top lists (aggregator.core.top_list_merge) against a plain sort of every key.

Stream shards deliver the new values of random keys (each key in one shard, in order, as
DynamoDB Streams orders one item's records), in batches, the shards interleaved at random; a
batch is sometimes merged again (Lambda delivering a failed batch again) before its shard's next
one. After every merge, every ``top(n)`` the lists prove must equal a plain sort of the values
the merged records carry: with ties, negative values, zeros, items removed, keys entering and
leaving the top, values moving down, and several lists (``leaderboard_partitions``).
"""

from __future__ import annotations

import itertools
import zlib
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.core.top_list_merge import TopList, exact_top, latest, merge

KEYS = "abcdefghij"


def _plain_top(values: dict[str, Decimal], n: int) -> list[tuple[Decimal, str]]:
    return sorted(((v, k) for k, v in values.items() if v), key=lambda e: (-e[0], e[1]))[:n]


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=10, unique=True))
    shards = draw(st.integers(1, 3))
    shard_of = {k: draw(st.integers(0, shards - 1)) for k in keys}
    value = dict.fromkeys(keys, 0)
    streams: list[list[tuple[str, Decimal | None]]] = [[] for _ in range(shards)]
    for _ in range(draw(st.integers(0, 60))):
        key = draw(st.sampled_from(keys))
        delta = draw(st.integers(-4, 6))
        value[key] += delta
        gone = value[key] == 0 and draw(st.booleans())  # the item removed, not left at zero
        streams[shard_of[key]].append((key, None if gone else Decimal(value[key])))
    batches = []
    for stream in streams:
        cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=8)))
        bounds = [0, *cuts, len(stream)]
        batches.append([stream[a:b] for a, b in itertools.pairwise(bounds) if b > a])
    steps = draw(st.lists(st.tuples(st.integers(0, shards - 1), st.booleans()), max_size=80))
    return {
        "keys": keys,
        "batches": batches,
        "steps": steps,
        "keep": draw(st.integers(1, 6)),
        "partitions": draw(st.integers(1, 3)),
    }


def _partition(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


@settings(max_examples=1500, deadline=None)
@given(case=scenarios())
def test_every_top_the_lists_prove_is_a_plain_sort(case: dict) -> None:
    keep, partitions = case["keep"], case["partitions"]
    lists = [TopList() for _ in range(partitions)]
    merged_values: dict[str, Decimal] = {}  # the value each key's last merged record carries
    position = [0] * len(case["batches"])  # next batch of each shard
    steps = list(case["steps"])
    # then every batch left, so that the stream is read to the end
    steps += [(s, False) for s, b in enumerate(case["batches"]) for _ in b]
    proved = calls = 0
    for shard, again in steps:
        batches = case["batches"][shard]
        if again and position[shard] > 0:
            batch = batches[position[shard] - 1]  # delivered again: nothing newer merged yet
        elif position[shard] < len(batches):
            batch = batches[position[shard]]
            position[shard] += 1
        else:
            continue
        observations = latest(batch)
        for p in range(partitions):
            mine = {k: v for k, v in observations.items() if _partition(k, partitions) == p}
            lists[p] = merge(lists[p], mine, keep)
        for key, value in observations.items():
            merged_values[key] = value or Decimal(0)
        for n in (1, 2, keep, keep + 1, 12):
            top = exact_top(lists, n)
            calls += 1
            if top is not None:
                proved += 1
                assert top == _plain_top(merged_values, n)
        for one in lists:
            assert len(one.entries) <= keep
            assert all(v != 0 for v in one.entries.values())
            for key, value in merged_values.items():  # the invariant itself
                if value and (one.floor is None or value > one.floor) and key in one.entries:
                    assert one.entries[key] == value
    assert all(position[s] == len(b) for s, b in enumerate(case["batches"]))
    if len(case["keys"]) <= keep:  # every key fits: no floor ever, every top proved
        assert all(one.floor is None for one in lists)
        assert proved == calls


def test_keys_above_the_floor_all_listed_after_growth() -> None:
    # 3 keys kept of 5 growing: the floor is the 4th largest value, the top 3 are exact
    state = TopList()
    for value in range(1, 4):
        state = merge(state, {k: Decimal(value * (i + 1)) for i, k in enumerate("abcde")}, 3)
    assert state.floor == Decimal(6)
    assert dict(state.entries) == {"c": 9, "d": 12, "e": 15}
    assert exact_top([state], 3) == [(15, "e"), (12, "d"), (9, "c")]
    assert exact_top([state], 4) is None  # the 4th could be unlisted
    # an unlisted key at the floor stays out; one above it comes in
    assert merge(state, {"a": Decimal(6)}, 3) is state
    grown = merge(state, {"a": Decimal(7)}, 3)
    assert dict(grown.entries) == {"c": 9, "d": 12, "e": 15}  # a came in, then left at the trim
    assert grown.floor == Decimal(7)


def test_ties_at_the_floor_all_leave() -> None:
    state = merge(TopList(), {k: Decimal(1) for k in "abcdef"} | {"z": Decimal(5)}, 3)
    assert dict(state.entries) == {"z": 5}
    assert state.floor == 1
    assert exact_top([state], 1) == [(5, "z")]
    assert exact_top([state], 2) is None


def test_values_that_fall_leave_fewer_proved() -> None:
    state = merge(TopList(), {"a": Decimal(9), "b": Decimal(8), "c": Decimal(7)}, 2)
    assert state.floor == 7
    state = merge(state, {"a": Decimal(-2)}, 2)  # listed: its value follows, below the floor
    assert exact_top([state], 1) == [(8, "b")]
    assert exact_top([state], 2) is None  # c (7, unlisted) may be second
    state = merge(state, {"b": None}, 2)  # the item is gone
    assert "b" not in state.entries


def test_ties_are_broken_by_the_order_given() -> None:
    state = TopList({"b": Decimal(2), "a": Decimal(2)})
    assert exact_top([state], 2) == [(2, "a"), (2, "b")]
    assert exact_top([state], 2, order=lambda k: {"a": "z", "b": "y"}[k]) == [(2, "b"), (2, "a")]


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_sizes_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="keep"):
        merge(TopList(), {}, bad)
    with pytest.raises(ValueError, match="n must"):
        exact_top([TopList()], bad)


def test_long_keys_raise_the_floor_before_the_byte_budget_is_passed() -> None:
    from aggregator.core.top_list_merge import MAX_BYTES, entry_bytes

    long = {f"{i:04d}" + "x" * 996: Decimal(i) for i in range(1, 41)}  # 1 KB keys
    state = merge(TopList(), long, keep=256)
    assert sum(entry_bytes(k, v) for k, v in state.entries.items()) <= MAX_BYTES
    kept = sorted(state.entries.values())
    assert len(kept) == 8 and kept == [Decimal(i) for i in range(33, 41)]
    assert state.floor == 32  # the first that did not fit
    assert exact_top([state], 8) == sorted(
        ((v, k) for k, v in state.entries.items()), key=lambda e: -e[0]
    )
    assert exact_top([state], 9) is None


def test_an_expired_bucket_is_not_observed() -> None:
    from aggregator.core.engine import Engine
    from aggregator.core.records import StreamRecord
    from aggregator.core.rules import RuleSet, rule
    from tests.factories import stream_record

    rules = RuleSet.of(
        rule(
            "hourly",
            key="{player}",
            leaderboard=True,
            leaderboard_store="list",
            window={"time": "at", "unit": "epoch_seconds", "granularities": ["hour"]},
        )
    )
    sk = "hourly#a#hour#2024-01-01T10:00:00Z"
    image = {"pk": "AGGREGATES", "sk": sk, "value": 3, "granularity": "hour"}
    image |= {"bucket": "2024-01-01T10:00:00Z", "ttl": 1_000}
    record = StreamRecord(stream_record("MODIFY", image, image))
    assert Engine(rules).process([record], now=999).observations
    late = Engine(rules).process([record], now=1_000)
    assert not late.observations and late.expired_observations == 1

"""Aggregate kinds: rule validation, what the engine makes of each kind's entries under inserts,
moves, value changes and deletes (against sums computed here), the writer's requests, and the
bins' text order (property-tested against the numbers)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal as D

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregator.core.engine import Engine
from aggregator.core.exceptions import RuleError
from aggregator.core.kinds import KINDS, Distribution, Max, Mean, Min, ValueCount, parse_kind
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, rule
from aggregator.core.sortable import number_from_sortable, sortable_number
from aggregator.dynamodb.updates import resolved
from aggregator.dynamodb.writer import AtLeastOnceWriter
from tests.factories import stream_record


def item(c: str, d, sk: str = "a") -> dict:
    return {"pk": "F", "sk": sk, "c": c, "d": D(str(d))}


RULES = RuleSet.of(
    rule("avg", key="{c}", delta={"attribute": "d"}, kind="mean"),
    rule("hi", key="{c}", delta={"attribute": "d"}, kind="max"),
    rule("lo", key="{c}", delta={"attribute": "d"}, kind="min"),
    rule("dist", key="{c}", delta={"attribute": "d"}, kind={"name": "distribution"}),
)


def apply(records: list[dict]) -> dict[str, tuple[D, D]]:
    """``{sort key: (value, count)}`` after the records, zero entries dropped."""
    batch = Engine(RULES).process([StreamRecord(r) for r in records])
    assert not batch.failures
    return {
        sk: (d.amount, d.count) for sk, d in batch.deltas.items() if (d.amount, d.count) != (0, 0)
    }


def test_kinds_are_a_registry_of_names():
    assert list(KINDS) == ["sum", "mean", "min", "max", "distribution"]
    assert parse_kind("mean") == Mean()
    assert parse_kind({"name": "distribution", "relative_accuracy": "0.02"}) == Distribution(
        relative_accuracy=D("0.02")
    )


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("avg", "unknown kind 'avg'; known kinds: sum, mean, min, max, distribution"),
        ({"relative_accuracy": 1}, "give the kind's name"),
        ({"name": "max", "x": 1}, "kind 'max' takes no options, got x"),
        ({"name": "distribution", "relative_accuracy": 0}, "must be from 0.0001 to 0.5"),
        ({"name": "distribution", "relative_accuracy": True}, "expected a number"),
        (3, "expected a kind name"),
    ],
)
def test_bad_kinds_name_the_field(kind, message):
    with pytest.raises(RuleError) as info:
        rule("r", key="{c}", delta={"attribute": "d"}, kind=kind)
    assert "rule 'r', field 'kind" in str(info.value)
    assert message in str(info.value)


def test_kinds_refuse_what_they_cannot_do():
    with pytest.raises(RuleError, match="field 'delta': kind 'min' needs the number"):
        rule("r", key="{c}", kind="min")
    with pytest.raises(RuleError, match="field 'leaderboard': a rule of kind 'mean' has no total"):
        rule("r", key="{c}", delta={"attribute": "d"}, kind="mean", leaderboard=True)
    with pytest.raises(RuleError, match="source rule 'hi' is of kind 'max'"):
        RuleSet.of(
            rule("hi", key="{c}", delta={"attribute": "d"}, kind="max"),
            rule("h", key="{value}", source="hi"),
        )
    # the value suffix counts in the sort key's size
    long_key = "K" * 980  # "ok#" + 980 bytes fits 1,024; 44 more do not
    rule("ok", key=long_key, delta={"attribute": "d"})
    with pytest.raises(RuleError, match="the max value suffix: up to 44"):
        rule("ok", key=long_key, delta={"attribute": "d"}, kind="max")


def test_mean_keeps_sum_and_count_exactly_through_moves_and_deletes():
    changes = apply(
        [
            stream_record("INSERT", None, item("UA", 5, "1"), seq=1),
            stream_record("INSERT", None, item("UA", 0, "2"), seq=2),  # a zero counts
            stream_record("MODIFY", item("UA", 5, "1"), item("UA", 8, "1"), seq=3),
            stream_record("MODIFY", item("UA", 0, "2"), item("AA", 0, "2"), seq=4),  # moves
            stream_record("INSERT", None, item("AA", -2, "3"), seq=5),
            stream_record("REMOVE", item("AA", -2, "3"), None, seq=6),
        ]
    )
    assert changes["avg#UA"] == (D(8), D(1))
    assert changes["avg#AA"] == (D(0), D(1))
    mean = D("2.3333333333333333333333333333333333333")  # 38 significant digits
    assert Mean().fields(D(7), D(3), ()) == {"mean": mean, "sum": D(7), "count": D(3)}
    assert Mean().fields(D(0), D(0), ())["mean"] is None


def test_extremes_count_items_per_distinct_value():
    changes = apply(
        [
            stream_record("INSERT", None, item("UA", 5, "1"), seq=1),
            stream_record("INSERT", None, item("UA", 5, "2"), seq=2),
            stream_record("INSERT", None, item("UA", "-1.5", "3"), seq=3),
            stream_record("MODIFY", item("UA", 5, "2"), item("UA", 9, "2"), seq=4),
            stream_record("REMOVE", item("UA", "-1.5", "3"), None, seq=5),
        ]
    )
    values = {
        number_from_sortable(sk.rsplit("#", 1)[1]): amounts
        for sk, amounts in changes.items()
        if sk.startswith("hi#UA#")
    }
    assert values == {D(5): (D(1), D(0)), D(9): (D(1), D(0))}
    assert {sk for sk in changes if sk.startswith("lo#")} == {
        sk.replace("hi#", "lo#", 1) for sk in changes if sk.startswith("hi#")
    }
    assert Min().fields(None, None, [ValueCount(D(5), D(1))]) == {"min": D(5)}
    assert Max().fields(None, None, []) == {"max": None}


def test_a_value_item_that_falls_to_zero_gets_a_ttl_and_loses_it_on_its_next_write():
    class Client:
        def __init__(self, old: str) -> None:
            self.calls: list[dict] = []
            self.old = old

        def update_item(self, **kwargs):
            self.calls.append(kwargs)
            return {"Attributes": {"value": {"N": self.old}}, "ConsumedCapacity": {}}

    retraction = Engine(RULES).process(
        [StreamRecord(stream_record("REMOVE", item("UA", 5), None, seq=7))]
    )
    client = Client(old="1")
    writer = AtLeastOnceWriter(client, "tbl", clock=lambda: 1_000)
    result = writer.apply(retraction)
    per_value = [c for c in client.calls if c["Key"]["sk"]["S"].startswith("hi#")]
    assert [resolved(c) for c in per_value] == [
        {
            "ADD": {"value": {"N": "-1"}},
            "SET": {"rule": {"S": "hi"}, "key": {"S": "UA"}},
            "REMOVE": ["ttl"],
            "CONDITION": None,
        },
        {
            "ADD": {},
            "SET": {"ttl": {"N": str(1_000 + 25 * 3600)}},
            "REMOVE": [],
            "CONDITION": "value = {'N': '0'}",
        },
    ]
    # mean items keep the count beside the sum, in the same update, and never get a TTL
    (mean,) = [c for c in client.calls if c["Key"]["sk"]["S"] == "avg#UA"]
    assert resolved(mean)["ADD"] == {"value": {"N": "-5"}, "count": {"N": "-1"}}
    assert result.stats.emptied_values == 3  # hi, lo and the bin of dist
    # a value still held by other items gets no TTL
    client = Client(old="2")
    AtLeastOnceWriter(client, "tbl").apply(retraction)
    assert not any("ttl" in resolved(c)["SET"] for c in client.calls)


accuracies = st.sampled_from([D("0.0001"), D("0.005"), D("0.01"), D("0.02"), D("0.5")])
numbers = st.decimals(
    min_value=D("-1E+20"), max_value=D("1E+20"), allow_nan=False, allow_infinity=False, places=6
)


@given(accuracies, numbers, numbers)
def test_bin_items_sort_as_their_values_and_read_back_within_alpha(alpha, a, b):
    kind = Distribution(relative_accuracy=alpha)
    ka, kb = kind.entry(a).suffix, kind.entry(b).suffix
    assert ka is not None and kb is not None
    bin_a, bin_b = kind.bins.bin_of(a), kind.bins.bin_of(b)
    # text order (DynamoDB's UTF-8 byte order) is bin order, which is value order
    assert (ka.encode() < kb.encode()) == (kind.bins.sort_key(bin_a) < kind.bins.sort_key(bin_b))
    if a < b:
        assert ka.encode() <= kb.encode()
    reported = kind.number_of(number_from_sortable(ka))
    assert kind.bins.bin_of(reported) == bin_a
    assert abs(reported - a) <= alpha * abs(a) * (1 + D("1E-30"))
    assert len(ka) <= 13


@given(st.lists(numbers, min_size=1, max_size=200), st.sampled_from([0, 1, 50, 90, 99, 100]))
def test_percentiles_are_within_alpha_of_the_nearest_rank(values, p):
    kind = Distribution()
    bins = Counter(kind.entry(v).suffix for v in values)
    read = [ValueCount(kind.number_of(number_from_sortable(s)), D(n)) for s, n in bins.items()]
    (found,), total = kind.percentiles(read, [D(p)])
    ordered = sorted(values)
    true = ordered[max(1, -(-p * len(values) // 100)) - 1]
    assert total == len(values)
    assert found is not None and abs(found - true) <= D("0.01") * abs(true) * (1 + D("1E-30"))


def test_windowed_kinds_keep_their_items_per_bucket():
    """A windowed min/max/distribution rule keeps its value items under each bucket's sort key
    ("<key>#<granularity>#<bucket start>#<value>"); a windowed mean keeps sum and count in the
    bucket item itself."""
    window = {"time": "ts", "unit": "epoch_seconds", "granularities": ["hour", "minute"]}
    image = {"c": "a", "d": D("-2.5"), "ts": D(5 * 3600 + 61)}
    worst = rule("r", key="{c}", delta={"attribute": "d"}, kind="max", window=window)
    got = [(c.key, c.amount, c.bucket.granularity) for c in worst.contributions(image)]
    value = sortable_number(D("-2.5"))
    assert got == [
        (f"a#hour#1970-01-01T05:00:00Z#{value}", 1, "hour"),
        (f"a#minute#1970-01-01T05:01:00Z#{value}", 1, "minute"),
    ]
    mean = rule("m", key="{c}", delta={"attribute": "d"}, kind="mean", window=window)
    got = [(c.key, c.amount, c.item_count) for c in mean.contributions(image)]
    assert got == [
        ("a#hour#1970-01-01T05:00:00Z", D("-2.5"), 1),
        ("a#minute#1970-01-01T05:01:00Z", D("-2.5"), 1),
    ]


def test_check_table_wants_ttl_for_value_items(monkeypatch):
    """A min/max/distribution rule's empty value items expire by TTL: check-table asks for it
    (moto: a table check, request shapes only)."""
    import boto3
    from moto import mock_aws

    from aggregator.dynamodb.table import table_definition
    from aggregator.dynamodb.tablecheck import check_table

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    sums = RuleSet.of(rule("s", key="{c}"))
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(TableName="t", **table_definition(RULES.layout))
        assert [p.part for p in check_table(client, "t", sums)] == []
        problems = check_table(client, "t", RULES)
        assert [p.part for p in problems] == ["ttl"]
        assert "min/max/distribution rules their empty value items" in problems[0].problem

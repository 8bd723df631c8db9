"""Engine semantics: deltas = contribution(NewImage) - contribution(OldImage), case by case."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.core.engine import Engine
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, rule
from tests.factories import stream_record

RULES = RuleSet.of(
    rule("count", match={"status": "departed"}, key="{carrier}"),
    rule(
        "delay",
        match={"status": "departed"},
        key="{carrier}",
        delta={"attribute": "dep_delay"},
        ttl_deletes="retract",
    ),
    rule("route", match={"kind": "flight"}, key="{origin}#{dest}", ttl_deletes="retract"),
    rule("events", match={"kind": "event"}, key="TOTAL_EVENTS"),
    rule("by_flag", match={"kind": "flagged"}, key="{flag}#{num}"),
)
ENGINE = Engine(RULES)

D = Decimal
UA = {"pk": "F#1", "sk": "X", "kind": "flight", "carrier": "UA", "origin": "JFK", "dest": "BOS"}
DEP = {**UA, "status": "departed", "dep_delay": 12}
SCHED = {**UA, "status": "scheduled"}
CANC = {**UA, "status": "cancelled"}
EVENT = {"pk": "E#1", "sk": "E", "kind": "event"}

CASES = [
    # (id, event, old, new, ttl, expected {sort key: amount})
    (
        "insert-matching",
        "INSERT",
        None,
        DEP,
        False,
        {"count#UA": D(1), "delay#UA": D(12), "route#JFK#BOS": D(1)},
    ),
    ("insert-not-matching-count", "INSERT", None, SCHED, False, {"route#JFK#BOS": D(1)}),
    ("insert-matching-nothing", "INSERT", None, {"pk": "Z", "sk": "Z", "kind": "other"}, False, {}),
    (
        "remove-retracts",
        "REMOVE",
        DEP,
        None,
        False,
        {"count#UA": D(-1), "delay#UA": D(-12), "route#JFK#BOS": D(-1)},
    ),
    ("remove-not-matching", "REMOVE", {"pk": "Z", "sk": "Z"}, None, False, {}),
    ("modify-unrelated-attribute", "MODIFY", DEP, {**DEP, "gate": "B12"}, False, {}),
    ("modify-value-change", "MODIFY", DEP, {**DEP, "dep_delay": 20}, False, {"delay#UA": D(8)}),
    (
        "modify-value-decrease-to-negative",
        "MODIFY",
        DEP,
        {**DEP, "dep_delay": -3},
        False,
        {"delay#UA": D(-15)},
    ),
    (
        "modify-key-change-moves-amount",
        "MODIFY",
        DEP,
        {**DEP, "carrier": "AA"},
        False,
        {"count#UA": D(-1), "count#AA": D(1), "delay#UA": D(-12), "delay#AA": D(12)},
    ),
    (
        "modify-key-and-value-change",
        "MODIFY",
        DEP,
        {**DEP, "carrier": "AA", "dep_delay": 30},
        False,
        {"count#UA": D(-1), "count#AA": D(1), "delay#UA": D(-12), "delay#AA": D(30)},
    ),
    ("modify-starts-matching", "MODIFY", SCHED, DEP, False, {"count#UA": D(1), "delay#UA": D(12)}),
    ("modify-stops-matching", "MODIFY", DEP, CANC, False, {"count#UA": D(-1), "delay#UA": D(-12)}),
    (
        "modify-multipart-key-change",
        "MODIFY",
        DEP,
        {**DEP, "dest": "LAX"},
        False,
        {"route#JFK#BOS": D(-1), "route#JFK#LAX": D(1)},
    ),
    (
        "modify-neither-matches",
        "MODIFY",
        {"pk": "Z", "sk": "Z", "a": 1},
        {"pk": "Z", "sk": "Z", "a": 2},
        False,
        {},
    ),
    ("ttl-delete-keep-policy", "REMOVE", EVENT, None, True, {}),
    (
        "user-delete-of-same-item-retracts",
        "REMOVE",
        EVENT,
        None,
        False,
        {"events#TOTAL_EVENTS": D(-1)},
    ),
    (
        "ttl-delete-mixed-policies",
        "REMOVE",
        DEP,
        None,
        True,
        {"delay#UA": D(-12), "route#JFK#BOS": D(-1)},
    ),
    ("insert-literal-key", "INSERT", None, EVENT, False, {"events#TOTAL_EVENTS": D(1)}),
    (
        "self-write-aggregates-ignored",
        "INSERT",
        None,
        {"pk": "AGGREGATES", "sk": "count#UA", "kind": "event", "value": 5},
        False,
        {},
    ),
    (
        "self-write-runner-ignored",
        "MODIFY",
        {"pk": "AGGREGATOR#RUNNER", "sk": "s", "kind": "event"},
        {"pk": "AGGREGATOR#RUNNER", "sk": "s", "kind": "event", "x": 1},
        False,
        {},
    ),
    (
        "self-write-dead-letter-ignored",
        "REMOVE",
        {"pk": "AGGREGATOR#DEAD_LETTERS", "sk": "s", "kind": "event"},
        None,
        False,
        {},
    ),
    (
        "decimal-delta-exact",
        "INSERT",
        None,
        {**DEP, "dep_delay": D("0.1")},
        False,
        {"count#UA": D(1), "delay#UA": D("0.1"), "route#JFK#BOS": D(1)},
    ),
    (
        "decimal-delta-38-digits",
        "MODIFY",
        {**DEP, "dep_delay": D("1" * 38)},
        {**DEP, "dep_delay": D("1" * 37 + "2")},
        False,
        {"delay#UA": D(1)},
    ),
    (
        "zero-delta-dropped",
        "INSERT",
        None,
        {**DEP, "dep_delay": 0},
        False,
        {"count#UA": D(1), "route#JFK#BOS": D(1)},
    ),
    (
        "hash-in-key-value-escaped",
        "INSERT",
        None,
        {**UA, "origin": "A#B", "dest": "C"},
        False,
        {"route#A%23B#C": D(1)},
    ),
    (
        "percent-in-key-value-escaped",
        "INSERT",
        None,
        {**UA, "origin": "50%", "dest": "%23"},
        False,
        {"route#50%25#%2523": D(1)},
    ),
    (
        "number-and-bool-key-parts",
        "INSERT",
        None,
        {"pk": "G", "sk": "G", "kind": "flagged", "flag": True, "num": D("1.50")},
        False,
        {"by_flag#true#1.5": D(1)},
    ),
    (
        "number-key-part-exponent-normalized",
        "INSERT",
        None,
        {"pk": "G", "sk": "G", "kind": "flagged", "flag": False, "num": D("1E+2")},
        False,
        {"by_flag#false#100": D(1)},
    ),
    (
        "modify-ttl-attribute-only-no-delta",
        "MODIFY",
        EVENT,
        {**EVENT, "ttl": 1700000000},
        False,
        {},
    ),
]


@pytest.mark.parametrize(
    ("event", "old", "new", "ttl", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_record_deltas(event, old, new, ttl, expected):
    # GIVEN one stream record
    record = StreamRecord(stream_record(event, old, new, ttl=ttl))
    # WHEN the engine evaluates it
    deltas, failures = ENGINE.record_deltas(record)
    # THEN exactly the expected deltas come out, and nothing failed
    assert failures == []
    assert {d.ref.sort_key: d.amount for d in deltas} == expected
    assert all(d.sequence_number == record.sequence_number for d in deltas)


def test_case_table_is_large_enough():
    assert len(CASES) >= 25


def test_ttl_delete_needs_the_dynamodb_service_principal():
    # GIVEN a REMOVE whose userIdentity names another service
    raw = stream_record("REMOVE", EVENT, None)
    raw["userIdentity"] = {"type": "Service", "principalId": "other.amazonaws.com"}
    deltas, _ = ENGINE.record_deltas(StreamRecord(raw))
    # THEN it is an ordinary delete and retracts
    assert {d.ref.sort_key: d.amount for d in deltas} == {"events#TOTAL_EVENTS": D(-1)}


# -- failures --------------------------------------------------------------------------------


def test_missing_key_attribute_fails_only_that_rule():
    no_carrier = {k: v for k, v in DEP.items() if k != "carrier"}
    deltas, failures = ENGINE.record_deltas(StreamRecord(stream_record("INSERT", None, no_carrier)))
    assert {d.ref.sort_key: d.amount for d in deltas} == {"route#JFK#BOS": D(1)}
    assert [(f.rule, f.reason) for f in failures] == [
        ("count", "NewImage: key attribute 'carrier' is missing"),
        ("delay", "NewImage: key attribute 'carrier' is missing"),
    ]
    assert failures[0].sequence_number == "000000000000000000100"
    assert failures[0].record["eventName"] == "INSERT"


def test_wrong_delta_type_fails_that_rule():
    deltas, failures = ENGINE.record_deltas(
        StreamRecord(stream_record("INSERT", None, {**DEP, "dep_delay": "12"}))
    )
    assert {d.ref.sort_key for d in deltas} == {"count#UA", "route#JFK#BOS"}
    assert [(f.rule, f.reason) for f in failures] == [
        ("delay", "NewImage: delta attribute 'dep_delay' is str, not a number")
    ]


def test_unsupported_key_type_fails():
    _, failures = ENGINE.record_deltas(
        StreamRecord(stream_record("INSERT", None, {**DEP, "carrier": ["U", "A"]}))
    )
    assert [(f.rule, f.reason) for f in failures] == [
        (
            "count",
            "NewImage: key attribute 'carrier': a list (L), not a string, number or boolean",
        ),
        (
            "delay",
            "NewImage: key attribute 'carrier': a list (L), not a string, number or boolean",
        ),
    ]


def test_fixing_a_bad_item_adds_the_good_image_alone():
    # GIVEN an old image the delay rule cannot evaluate (it counted nothing) and a good new image
    bad_old = {**DEP, "dep_delay": "late"}
    batch = ENGINE.process([StreamRecord(stream_record("MODIFY", bad_old, DEP))])
    # THEN the delay rule adds the new image's amount and retracts nothing: the fix heals the
    # aggregate; the old image was reported when it was written, so no dead letter now
    assert {k: v.amount for k, v in batch.deltas.items()} == {"delay#UA": D(12)}
    assert batch.failures == []
    assert batch.old_images_unreadable == 1


def test_breaking_a_good_item_retracts_it_and_reports_the_new_image():
    # GIVEN a good old image and a new image the delay rule cannot evaluate
    bad_new = {**DEP, "dep_delay": "late"}
    batch = ENGINE.process([StreamRecord(stream_record("MODIFY", DEP, bad_new))])
    # THEN the old image's amount is retracted (the item counts nothing now) and the new image
    # is dead-lettered as the failing side
    assert {k: v.amount for k, v in batch.deltas.items()} == {"delay#UA": D(-12)}
    assert [(f.rule, f.image, f.reason) for f in batch.failures] == [
        ("delay", "NewImage", "NewImage: delta attribute 'dep_delay' is str, not a number")
    ]


def test_deleting_a_bad_item_retracts_nothing():
    batch = ENGINE.process(
        [StreamRecord(stream_record("REMOVE", {**DEP, "dep_delay": "late"}, None))]
    )
    # the count rule reads no delay: it retracts the item; the delay rule counted nothing
    assert {k: v.amount for k, v in batch.deltas.items()} == {
        "count#UA": D(-1),
        "route#JFK#BOS": D(-1),
    }
    assert batch.failures == []
    assert batch.old_images_unreadable == 1


def test_failure_does_not_hide_other_records():
    bad = stream_record("INSERT", None, {**DEP, "dep_delay": None}, seq=1)
    good = stream_record("INSERT", None, {**DEP, "sk": "Y"}, seq=2)
    batch = ENGINE.process([StreamRecord(bad), StreamRecord(good)])
    assert [(f.sequence_number, f.rule) for f in batch.failures] == [
        ("000000000000000000001", "delay")
    ]
    assert {k: v.amount for k, v in batch.deltas.items()} == {
        "count#UA": D(2),
        "delay#UA": D(12),
        "route#JFK#BOS": D(2),
    }


# -- coalescing --------------------------------------------------------------------------------


def test_coalescing_sums_and_tracks_first_sequence_and_parts():
    records = [
        StreamRecord(stream_record("INSERT", None, {**DEP, "sk": "a"}, seq=5)),
        StreamRecord(stream_record("INSERT", None, {**EVENT, "sk": "e"}, seq=6)),
        StreamRecord(
            stream_record("MODIFY", {**DEP, "sk": "a"}, {**DEP, "sk": "a", "dep_delay": 2}, seq=7)
        ),
        StreamRecord(stream_record("INSERT", None, {"pk": "AGGREGATES", "sk": "x"}, seq=8)),
        StreamRecord(stream_record("REMOVE", {**DEP, "sk": "a", "dep_delay": 2}, None, seq=9)),
    ]
    batch = ENGINE.process(records)
    assert batch.records == 5
    assert batch.self_writes == 1
    assert batch.first_sequence_number == "000000000000000000005"
    assert batch.last_sequence_number == "000000000000000000009"
    summary = {
        sk: (d.amount, d.first_sequence_number[-1], [(s[-1], a) for s, a in d.parts])
        for sk, d in batch.deltas.items()
    }
    assert summary == {
        "count#UA": (D(0), "5", [("5", D(1)), ("9", D(-1))]),
        "delay#UA": (D(0), "5", [("5", D(12)), ("7", D(-10)), ("9", D(-2))]),
        "route#JFK#BOS": (D(0), "5", [("5", D(1)), ("9", D(-1))]),
        "events#TOTAL_EVENTS": (D(1), "6", [("6", D(1))]),
    }
    assert batch.record_deltas == 8
    assert batch.deltas["delay#UA"].amount_after("000000000000000000005") == D(-12)
    assert batch.deltas["delay#UA"].amount_after("000000000000000000009") == D(0)


def test_hundred_increments_coalesce_into_one_delta():
    records = [
        StreamRecord(stream_record("INSERT", None, {**EVENT, "sk": str(i)}, seq=i))
        for i in range(1, 101)
    ]
    batch = ENGINE.process(records)
    assert {k: v.amount for k, v in batch.deltas.items()} == {"events#TOTAL_EVENTS": D(100)}


def test_only_attributes_the_rules_read_are_deserialized():
    # GIVEN an item with many attributes no rule reads
    wide = {**DEP, **{f"extra{i}": i for i in range(50)}}
    record = StreamRecord(stream_record("INSERT", None, wide))
    ENGINE.record_deltas(record)
    # THEN only the read attributes were deserialized
    assert set(record.new_image._cache) <= RULES.attributes()
    assert "extra0" not in record.new_image._cache
    assert {"status", "carrier", "dep_delay", "kind", "origin", "dest"} <= set(
        record.new_image._cache
    )


def test_record_without_needed_image_is_reported_for_every_rule():
    raw = stream_record("MODIFY", DEP, {**DEP, "dep_delay": 20})
    del raw["dynamodb"]["OldImage"]  # a NEW_IMAGE stream
    deltas, failures = ENGINE.record_deltas(StreamRecord(raw))
    assert deltas == []
    assert {f.rule for f in failures} == {r.name for r in RULES}
    assert failures[0].reason == (
        "MODIFY record without OldImage: the table's stream must use StreamViewType "
        "NEW_AND_OLD_IMAGES"
    )
    keys_only = stream_record("REMOVE", DEP, None)
    del keys_only["dynamodb"]["OldImage"]
    _, failures = ENGINE.record_deltas(StreamRecord(keys_only))
    assert len(failures) == len(RULES)


def test_delta_beyond_38_digits_fails_that_record_and_rule_only():
    big = D("9" * 38)
    # a value change whose difference needs 39 digits
    raw = stream_record(
        "MODIFY", {**DEP, "dep_delay": big.copy_negate()}, {**DEP, "dep_delay": big}
    )
    deltas, failures = ENGINE.record_deltas(StreamRecord(raw))
    assert [d.ref.sort_key for d in deltas] == []
    assert [(f.rule, f.reason) for f in failures] == [
        ("delay", "NewImage: the delta needs more than DynamoDB's 38 significant digits")
    ]


def test_coalesced_sum_beyond_38_digits_fails_the_later_record_only():
    big = D("9" * 38)
    records = [
        StreamRecord(stream_record("INSERT", None, {**DEP, "sk": "a", "dep_delay": big}, seq=1)),
        StreamRecord(stream_record("INSERT", None, {**DEP, "sk": "b", "dep_delay": big}, seq=2)),
    ]
    batch = ENGINE.process(records)
    assert batch.deltas["delay#UA"].amount == big
    assert batch.deltas["count#UA"].amount == 2
    assert [(f.sequence_number[-1], f.rule) for f in batch.failures] == [("2", "delay")]
    assert batch.failures[0].reason.startswith("the batch's sum for an aggregate needs more")


def test_large_deltas_that_dynamodb_can_store_are_added_exactly():
    """1E+40 has one significant digit: aligning it with 0 pads zeros, which loses nothing."""
    from aggregator.core.numbers import add

    assert add(Decimal(0), Decimal("1E+40")) == Decimal("1E+40")
    assert add(Decimal("1E+40"), Decimal("-1E+40")) == 0
    with pytest.raises(ArithmeticError):
        add(Decimal("1E+40"), Decimal(1))  # 41 significant digits: not storable


def test_records_of_top_listed_aggregates_become_observations_of_their_lists():
    import zlib

    rules = RuleSet.of(
        rule("plain", match={"kind": "score"}, key="{player}", leaderboard=True),
        rule(
            "listed",
            match={"kind": "score"},
            key="{player}",
            delta={"attribute": "points"},
            leaderboard=True,
            leaderboard_store="list",
            leaderboard_partitions=2,
        ),
        rule(
            "hourly",
            match={"kind": "score"},
            key="{player}",
            leaderboard=True,
            leaderboard_store="list",
            window={"time": "at", "unit": "epoch_seconds", "granularities": ["hour"]},
        ),
    )
    engine = Engine(rules)
    hour = {
        "granularity": "hour",
        "bucket": "2024-01-01T10:00:00Z",
        rules.layout.ttl_attribute: 1_704_200_000,
    }

    def aggregate(sk, value, **more):
        return {"pk": "AGGREGATES", "sk": sk, "value": value, "rule": sk.split("#")[0], **more}

    records = [
        StreamRecord(stream_record("INSERT", new=aggregate("listed#a%23b", 5), seq=1)),
        StreamRecord(
            stream_record("MODIFY", aggregate("listed#c", 2), aggregate("listed#c", 0), seq=2)
        ),
        StreamRecord(stream_record("REMOVE", old=aggregate("listed#d", 3), seq=3)),
        StreamRecord(
            stream_record(
                "INSERT", new=aggregate("hourly#a#hour#2024-01-01T10:00:00Z", 7, **hour), seq=4
            )
        ),
        StreamRecord(stream_record("INSERT", new=aggregate("plain#a", 1), seq=5)),
        StreamRecord(
            stream_record(
                "INSERT",
                new={
                    "pk": "u",
                    "sk": "1",
                    "kind": "score",
                    "player": "a",
                    "points": 3,
                    "at": 1704103200,
                },
                seq=6,
            )
        ),
    ]
    batch = engine.process(records, now=1_704_100_000)
    got = [(o.partition, o.key, o.value, o.expires) for o in batch.observations]

    def part(sk):
        return f"listed#{zlib.crc32(sk.encode()) % 2}"

    assert got == [
        (part("listed#a%23b"), "a%23b", Decimal(5), None),  # the key as stored (escaped)
        (part("listed#c"), "c", None, None),  # at zero: gone from the list
        (part("listed#d"), "d", None, None),  # the item removed
        ("hourly#hour#2024-01-01T10:00:00Z", "a", Decimal(7), 1_704_200_000),
    ]
    assert [o.sequence_number for o in batch.observations] == [
        str(s).zfill(21) for s in (1, 2, 3, 4)
    ]
    # the aggregates are still the framework's own writes: no deltas from them
    assert batch.self_writes == 5
    assert set(batch.deltas) == {"plain#a", "listed#a", "hourly#a#hour#2024-01-01T10:00:00Z"}
    # only the index-kept rule's aggregates carry GSI entries
    assert [sk for sk, d in batch.deltas.items() if d.leaderboard] == ["plain#a"]

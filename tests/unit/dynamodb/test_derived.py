"""Derived rules and the rule graph; engine behaviour for derived and windowed rules; the
update and window-state encodings of time buckets."""

from __future__ import annotations

import json
import textwrap
from decimal import Decimal

import pytest

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.engine import AggregateRef, CoalescedDelta, Engine
from aggregator.core.exceptions import ConfigError, RuleError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import StreamRecord
from aggregator.core.rules import Bucket, RuleSet, load_rules, rule
from aggregator.dynamodb.updates import add_update, resolved
from tests.factories import stream_record

D = Decimal


def ruleset_error(*rules) -> str:
    with pytest.raises(RuleError) as info:
        RuleSet.of(*rules)
    return str(info.value)


# -- graph validation --------------------------------------------------------------------------


def test_unknown_source_names_rule_field_source_and_known_rules():
    message = ruleset_error(
        rule("base", key="B"),
        rule("derived", source="nope", key="{value}"),
    )
    assert message == (
        "<python>: rule 'derived', field 'source': unknown source rule 'nope'; "
        "known rules: base, derived"
    )


def test_self_cycle():
    message = ruleset_error(rule("loop", source="loop", key="{value}"))
    assert message == (
        "<python>: rule 'loop', field 'source': derived rules form a cycle: loop -> loop"
    )


def test_three_rule_cycle_reported_once_naming_every_rule_in_order():
    message = ruleset_error(
        rule("a", source="b", key="{value}"),
        rule("b", source="c", key="{value}"),
        rule("c", source="a", key="{value}"),
    )
    assert message.splitlines() == [
        "<python>: rule 'a', field 'source': derived rules form a cycle: a -> b -> c -> a"
    ]


def test_cycle_reported_at_its_first_rule_whatever_rule_starts_the_walk():
    # a rule outside the cycle leads into it; the cycle is still reported once, at rule 'x'
    message = ruleset_error(
        rule("tail", source="y", key="{value}"),
        rule("x", source="y", key="{value}"),
        rule("y", source="x", key="{value}"),
    )
    assert message.splitlines() == [
        "<python>: rule 'x', field 'source': derived rules form a cycle: x -> y -> x"
    ]


def test_unknown_source_and_cycle_both_reported():
    message = ruleset_error(
        rule("a", source="a", key="{value}"),
        rule("b", source="ghost", key="{value}"),
    )
    assert message.splitlines() == [
        "<python>: rule 'a', field 'source': derived rules form a cycle: a -> a",
        "<python>: rule 'b', field 'source': unknown source rule 'ghost'; known rules: a, b",
    ]


CHAIN = RuleSet.of(
    rule("c", source="b", key="{value}"),
    rule("a", match={"sk": {"prefix": "PATH#"}}, key="{pk}"),
    rule("b", source="a", key="{value}"),
    rule("z", key="Z"),
    rule("b2", source="a", key="ALL"),
)


def test_valid_chain_accepted_and_navigable():
    assert [r.name for r in CHAIN] == ["c", "a", "b", "z", "b2"]
    assert CHAIN.sources == ("a", "b")
    assert [r.name for r in CHAIN.derived_from("a")] == ["b", "b2"]
    assert [r.name for r in CHAIN.derived_from("b")] == ["c"]
    assert CHAIN.derived_from("z") == ()
    assert [r.name for r in CHAIN.base_rules] == ["a", "z"]
    assert [r.name for r in CHAIN.derived_rules] == ["c", "b", "b2"]
    assert CHAIN.get("c").is_derived
    assert not CHAIN.get("a").is_derived


def test_lineage_lists_sources_first():
    assert [r.name for r in CHAIN.lineage("c")] == ["a", "b", "c"]
    assert [r.name for r in CHAIN.lineage("b2")] == ["a", "b2"]
    assert [r.name for r in CHAIN.lineage("z")] == ["z"]
    with pytest.raises(RuleError, match="no rule named 'nope'; known rules: c, a, b, z, b2"):
        CHAIN.lineage("nope")


def write(directory, name: str, text: str):
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def test_derived_rule_and_its_source_in_different_files(tmp_path):
    # the derived rule's file sorts (and loads) before its source's file
    write(
        tmp_path,
        "a_derived.yaml",
        """
        rules:
          - name: players_by_paths
            source: paths_per_player
            key: "{value}"
        """,
    )
    write(
        tmp_path,
        "b_base.yaml",
        """
        rules:
          - name: paths_per_player
            match: {sk: {prefix: "PATH#"}}
            key: "{pk}"
        """,
    )
    rules = load_rules(tmp_path)
    assert [r.name for r in rules] == ["players_by_paths", "paths_per_player"]
    assert rules.sources == ("paths_per_player",)
    assert [r.name for r in rules.lineage("players_by_paths")] == [
        "paths_per_player",
        "players_by_paths",
    ]


def test_unknown_source_across_files_names_file_rule_and_field(tmp_path):
    derived = write(
        tmp_path,
        "a_derived.yaml",
        """
        rules:
          - name: players_by_paths
            source: paths_per_playr
            key: "{value}"
        """,
    )
    write(tmp_path, "b_base.yaml", "rules: [{name: paths_per_player, key: '{pk}'}]\n")
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    assert str(info.value) == (
        f"{derived}: rule 'players_by_paths', field 'source': unknown source rule "
        "'paths_per_playr'; known rules: paths_per_player, players_by_paths"
    )


# -- engine: derived rules ---------------------------------------------------------------------

DERIVED_RULES = RuleSet.of(
    rule("paths_per_player", match={"sk": {"prefix": "PATH#"}}, key="{pk}"),
    rule("players_by_paths", source="paths_per_player", key="{value}"),
    rule("total_players", source="paths_per_player", key="TOTAL_PLAYERS"),
    # a base rule that matches every user item: it must never see aggregate records
    rule("all_items", key="ALL"),
    rule("total_paths_found", match={"sk": {"prefix": "PATH#"}}, key="TOTAL_PATHS_FOUND"),
)
DERIVED = Engine(DERIVED_RULES)


def aggregate(value, key: str = "alice", source: str = "paths_per_player", **extra):
    """Image of an aggregate item as the aggregates partition holds it."""
    return {
        "pk": "AGGREGATES",
        "sk": f"{source}#{key}",
        "value": value,
        "rule": source,
        "key": key,
        **extra,
    }


def deltas_of(engine: Engine, raw: dict) -> dict[str, Decimal]:
    deltas, failures = engine.record_deltas(StreamRecord(raw))
    assert failures == []
    return {d.ref.sort_key: d.amount for d in deltas}


CK = "ck#shardId-000000000001"
AGGREGATE_CASES = [
    (
        "insert-1",
        "INSERT",
        None,
        aggregate(1),
        {"players_by_paths#1": D(1), "total_players#TOTAL_PLAYERS": D(1)},
    ),
    (
        "modify-2-to-3",
        "MODIFY",
        aggregate(2),
        aggregate(3),
        {"players_by_paths#2": D(-1), "players_by_paths#3": D(1)},
    ),
    (
        "modify-1-to-0-zero-is-absent",
        "MODIFY",
        aggregate(1),
        aggregate(0),
        {"players_by_paths#1": D(-1), "total_players#TOTAL_PLAYERS": D(-1)},
    ),
    (
        "modify-0-to-2",
        "MODIFY",
        aggregate(0),
        aggregate(2),
        {"players_by_paths#2": D(1), "total_players#TOTAL_PLAYERS": D(1)},
    ),
    ("insert-0", "INSERT", None, aggregate(0), {}),
    (
        "modify-0-to-0-checkpoint-only",
        "MODIFY",
        aggregate(0),
        aggregate(0, **{CK: "0" * 40 + "@1700000000"}),
        {},
    ),
    (
        "remove-2",
        "REMOVE",
        aggregate(2),
        None,
        {"players_by_paths#2": D(-1), "total_players#TOTAL_PLAYERS": D(-1)},
    ),
    ("remove-0", "REMOVE", aggregate(0), None, {}),
    (
        "modify-checkpoint-attribute-only",
        "MODIFY",
        aggregate(4, **{CK: "1".zfill(40) + "@1700000000"}),
        aggregate(4, **{CK: "2".zfill(40) + "@1700000001"}),
        {},
    ),
    (
        "negative-values-count-too",
        "INSERT",
        None,
        aggregate(-2),
        {"players_by_paths#-2": D(1), "total_players#TOTAL_PLAYERS": D(1)},
    ),
    (
        "decimal-value-key-normalized",
        "MODIFY",
        aggregate(D("1.50")),
        aggregate(D("2.50")),
        {"players_by_paths#1.5": D(-1), "players_by_paths#2.5": D(1)},
    ),
]


@pytest.mark.parametrize(
    ("event", "old", "new", "expected"),
    [c[1:] for c in AGGREGATE_CASES],
    ids=[c[0] for c in AGGREGATE_CASES],
)
def test_derived_deltas_from_source_aggregate_records(event, old, new, expected):
    raw = stream_record(event, old, new)
    record = StreamRecord(raw)
    assert DERIVED.source_of(record) == "paths_per_player"
    assert not DERIVED.is_self_write(record)
    # base rules (all_items matches everything, paths_per_player, total_paths_found) see nothing
    assert deltas_of(DERIVED, raw) == expected


def test_derived_rules_never_evaluate_user_items():
    # a user item carrying 'value': if derived rules read it, players_by_paths#5 would appear
    raw = stream_record("INSERT", None, {"pk": "alice", "sk": "PATH#7", "value": 5})
    record = StreamRecord(raw)
    assert DERIVED.source_of(record) is None
    assert deltas_of(DERIVED, raw) == {
        "paths_per_player#alice": D(1),
        "all_items#ALL": D(1),
        "total_paths_found#TOTAL_PATHS_FOUND": D(1),
    }


@pytest.mark.parametrize(
    "image",
    [
        aggregate(7, key="TOTAL_PATHS_FOUND", source="total_paths_found"),
        aggregate(3, key="1", source="players_by_paths"),
        aggregate(2, key="TOTAL_PLAYERS", source="total_players"),
        {"pk": "AGGREGATOR#RUNNER", "sk": "paths_per_player#alice", "value": 1},
        {"pk": "AGGREGATOR#DEAD_LETTERS", "sk": "x", "value": 1},
    ],
    ids=["other-base-aggregate", "derived-aggregate", "derived-total", "runner", "dead-letter"],
)
def test_other_framework_records_are_self_writes(image):
    raw = stream_record("INSERT", None, image)
    record = StreamRecord(raw)
    assert DERIVED.is_self_write(record)
    assert DERIVED.source_of(record) is None
    assert DERIVED.record_deltas(record) == ([], [])


def test_process_counts_self_writes_and_derived_inputs():
    records = [
        stream_record("INSERT", None, {"pk": "alice", "sk": "PATH#1"}, seq=1),
        stream_record("INSERT", None, aggregate(1), seq=2),
        stream_record(
            "INSERT", None, aggregate(1, key="TOTAL_PATHS_FOUND", source="total_paths_found"), seq=3
        ),
        stream_record("MODIFY", aggregate(1), aggregate(2), seq=4),
        stream_record("INSERT", None, {"pk": "AGGREGATOR#RUNNER", "sk": "shard"}, seq=5),
        stream_record("INSERT", None, aggregate(1, key="bob"), seq=6),
    ]
    batch = DERIVED.process([StreamRecord(r) for r in records], now=0)
    assert batch.records == 6
    assert batch.self_writes == 2
    assert batch.derived_inputs == 3
    assert batch.failures == []
    assert {k: v.amount for k, v in batch.deltas.items()} == {
        "paths_per_player#alice": D(1),
        "all_items#ALL": D(1),
        "total_paths_found#TOTAL_PATHS_FOUND": D(1),
        "players_by_paths#1": D(1),  # +1 alice, -1 alice (1 -> 2), +1 bob
        "total_players#TOTAL_PLAYERS": D(2),
        "players_by_paths#2": D(1),
    }
    assert [s[-1] for s, _ in batch.deltas["players_by_paths#1"].parts] == ["2", "4", "6"]
    assert batch.first_sequence_number == "000000000000000000001"
    assert batch.last_sequence_number == "000000000000000000006"


def test_derived_rule_over_a_windowed_source_sees_granularity_and_bucket():
    rules = RuleSet.of(
        rule(
            "events",
            key="{cat}",
            window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour", "minute"]},
        ),
        rule("active_buckets", source="events", key="{granularity}#{bucket}"),
        rule("active_hours", source="events", match={"granularity": "hour"}, key="{bucket}"),
    )
    engine = Engine(rules)
    image = {
        "pk": "AGGREGATES",
        "sk": "events#A#hour#2013-01-01T05:00:00Z",
        "value": 3,
        "rule": "events",
        "key": "A",
        "granularity": "hour",
        "bucket": "2013-01-01T05:00:00Z",
    }
    raw = stream_record("INSERT", None, image)
    assert engine.source_of(StreamRecord(raw)) == "events"
    assert deltas_of(engine, raw) == {
        "active_buckets#hour#2013-01-01T05:00:00Z": D(1),
        "active_hours#2013-01-01T05:00:00Z": D(1),
    }
    minute = {
        **image,
        "sk": "events#A#minute#2013-01-01T05:02:00Z",
        "granularity": "minute",
        "bucket": "2013-01-01T05:02:00Z",
    }
    assert deltas_of(engine, stream_record("INSERT", None, minute)) == {
        "active_buckets#minute#2013-01-01T05:02:00Z": D(1)
    }


def test_derived_rule_reading_attributes_aggregates_lack_is_a_config_error():
    # a typo, and a bucket of a source without a window: caught before any record is read
    rules = RuleSet.of(
        rule("src", key="{pk}"),
        rule("bad", source="src", key="{carrier}"),
        rule("worse", source="src", key="{bucket}"),
    )
    with pytest.raises(ConfigError) as info:
        Engine(rules)
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("rule 'bad', field 'key': reads 'carrier', which the aggregates")
    assert "rule 'worse', field 'key': reads 'bucket'" in lines[1]
    assert "they have key, pk, rule, sk, value" in lines[1]


def test_derived_rule_failure_names_the_image_and_attribute():
    # the source's bucket exists but is not in the unit the derived window declares
    rules = RuleSet.of(
        rule(
            "src",
            key="{pk}",
            window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]},
        ),
        rule(
            "bad",
            source="src",
            key="{key}",
            window={"time": "bucket", "unit": "epoch_seconds", "granularities": ["day"]},
        ),
    )
    image = {**aggregate(1, source="src"), "bucket": "2013-01-01T05:00:00Z", "granularity": "hour"}
    deltas, failures = Engine(rules).record_deltas(
        StreamRecord(stream_record("INSERT", None, image))
    )
    assert deltas == []
    assert [(f.rule, f.reason) for f in failures] == [
        ("bad", "NewImage: time attribute 'bucket': expected a number of seconds, got str")
    ]


# -- engine: windowed rules --------------------------------------------------------------------

WINDOWED = Engine(
    RuleSet.of(
        rule(
            "events",
            key="{cat}",
            window={
                "time": "ts",
                "unit": "epoch_seconds",
                "granularities": ["hour", "minute"],
                "retention": "25h",
            },
        )
    )
)
T = 1357016525  # 2013-01-01T05:02:05Z
HOUR_START = 1357016400  # 05:00:00Z
MINUTE_START = 1357016520  # 05:02:00Z
HOUR_TTL = HOUR_START + 3600 + 90000  # 1357110000
MINUTE_TTL = MINUTE_START + 60 + 90000  # 1357106580
HOUR_SK = "events#A#hour#2013-01-01T05:00:00Z"
MINUTE_SK = "events#A#minute#2013-01-01T05:02:00Z"
EVENT = {"pk": "E#1", "sk": "E", "cat": "A", "ts": T}


def test_windowed_insert_adds_to_both_buckets():
    batch = WINDOWED.process([StreamRecord(stream_record("INSERT", None, EVENT))], now=T)
    assert {k: v.amount for k, v in batch.deltas.items()} == {HOUR_SK: D(1), MINUTE_SK: D(1)}
    hour, minute = batch.deltas[HOUR_SK].ref, batch.deltas[MINUTE_SK].ref
    assert hour == AggregateRef(
        "events",
        "A#hour#2013-01-01T05:00:00Z",
        "A",
        Bucket("hour", HOUR_START, "2013-01-01T05:00:00Z", HOUR_TTL),
    )
    assert minute.bucket == Bucket("minute", MINUTE_START, "2013-01-01T05:02:00Z", MINUTE_TTL)
    assert (HOUR_TTL, MINUTE_TTL) == (1357110000, 1357106580)
    assert (batch.expired, batch.expired_retractions) == (0, 0)


def test_remove_after_minute_ttl_skips_only_the_minute_delta():
    now = MINUTE_TTL + 1
    assert now < HOUR_TTL
    batch = WINDOWED.process([StreamRecord(stream_record("REMOVE", EVENT, None))], now=now)
    assert {k: v.amount for k, v in batch.deltas.items()} == {HOUR_SK: D(-1)}
    assert batch.expired == 1
    assert batch.expired_retractions == 1
    assert batch.record_deltas == 1


def test_remove_after_both_ttls_gives_no_deltas():
    batch = WINDOWED.process([StreamRecord(stream_record("REMOVE", EVENT, None))], now=HOUR_TTL)
    assert batch.deltas == {}
    assert (batch.expired, batch.expired_retractions, batch.record_deltas) == (2, 2, 0)


def test_insert_into_expired_bucket_skipped_but_not_a_retraction():
    batch = WINDOWED.process(
        [StreamRecord(stream_record("INSERT", None, EVENT))], now=MINUTE_TTL + 100
    )
    assert {k: v.amount for k, v in batch.deltas.items()} == {HOUR_SK: D(1)}
    assert (batch.expired, batch.expired_retractions) == (1, 0)


@pytest.mark.parametrize(
    ("now", "expected", "expired"),
    [
        (MINUTE_TTL - 1, {HOUR_SK: D(-1), MINUTE_SK: D(-1)}, 0),
        (MINUTE_TTL, {HOUR_SK: D(-1)}, 1),  # a TTL equal to now has expired
        (MINUTE_TTL + 0.5, {HOUR_SK: D(-1)}, 1),
        (HOUR_TTL - 0.5, {HOUR_SK: D(-1)}, 1),
        (HOUR_TTL, {}, 2),
    ],
)
def test_ttl_boundary(now, expected, expired):
    batch = WINDOWED.process([StreamRecord(stream_record("REMOVE", EVENT, None))], now=now)
    assert {k: v.amount for k, v in batch.deltas.items()} == expected
    assert batch.expired == expired


def test_windowed_ttl_delete_of_the_raw_event_keeps_counts():
    # ttl_deletes defaults to keep: a TTL REMOVE of the event retracts nothing (and expires nothing)
    batch = WINDOWED.process([StreamRecord(stream_record("REMOVE", EVENT, None, ttl=True))], now=T)
    assert batch.deltas == {}
    assert batch.expired == 0


def test_modify_moving_event_time_moves_count_between_buckets():
    later = {**EVENT, "ts": 1357020600}  # 06:10:00Z
    batch = WINDOWED.process([StreamRecord(stream_record("MODIFY", EVENT, later))], now=T)
    assert {k: v.amount for k, v in batch.deltas.items()} == {
        HOUR_SK: D(-1),
        MINUTE_SK: D(-1),
        "events#A#hour#2013-01-01T06:00:00Z": D(1),
        "events#A#minute#2013-01-01T06:10:00Z": D(1),
    }


def test_modify_within_the_same_minute_changes_nothing():
    same_minute = {**EVENT, "ts": T + 50}  # 05:02:55Z
    batch = WINDOWED.process([StreamRecord(stream_record("MODIFY", EVENT, same_minute))], now=T)
    assert batch.deltas == {}


def test_modify_within_the_same_hour_moves_only_the_minute():
    other_minute = {**EVENT, "ts": T + 600}  # 05:12:05Z
    batch = WINDOWED.process([StreamRecord(stream_record("MODIFY", EVENT, other_minute))], now=T)
    assert {k: v.amount for k, v in batch.deltas.items()} == {
        MINUTE_SK: D(-1),
        "events#A#minute#2013-01-01T05:12:00Z": D(1),
    }


def test_windowed_missing_time_is_a_failure_naming_the_attribute():
    no_ts = {k: v for k, v in EVENT.items() if k != "ts"}
    batch = WINDOWED.process([StreamRecord(stream_record("INSERT", None, no_ts))], now=T)
    assert batch.deltas == {}
    assert [(f.rule, f.reason) for f in batch.failures] == [
        ("events", "NewImage: time attribute 'ts' is missing")
    ]


# -- writer: add_update ------------------------------------------------------------------------


def windowed_delta(expires: int | None = HOUR_TTL) -> CoalescedDelta:
    bucket = Bucket("hour", HOUR_START, "2013-01-01T05:00:00Z", expires)
    ref = AggregateRef("events", "A%23B#hour#2013-01-01T05:00:00Z", "A#B", bucket)
    return CoalescedDelta(ref, D(3), "5", [("5", D(3))])


def test_add_update_of_a_windowed_delta_sets_bucket_and_ttl():
    update = add_update("tbl", DEFAULT_LAYOUT, windowed_delta(), D(3))
    assert update["TableName"] == "tbl"
    assert update["Key"] == {
        "pk": {"S": "AGGREGATES"},
        "sk": {"S": "events#A%23B#hour#2013-01-01T05:00:00Z"},
    }
    assert resolved(update) == {
        "ADD": {"value": {"N": "3"}},
        "SET": {
            "rule": {"S": "events"},
            "key": {"S": "A#B"},
            "granularity": {"S": "hour"},
            "bucket": {"S": "2013-01-01T05:00:00Z"},
            "ttl": {"N": "1357110000"},
        },
        "REMOVE": [],
        "CONDITION": None,
    }


def test_add_update_ttl_attribute_follows_the_layout():
    layout = TableLayout(ttl_attribute="expires_at", partition_key="PK", sort_key="SK")
    update = add_update("tbl", layout, windowed_delta(), D(-1))
    assert resolved(update)["SET"]["expires_at"] == {"N": "1357110000"}
    assert resolved(update)["ADD"] == {"value": {"N": "-1"}}
    assert update["Key"] == {
        "PK": {"S": "AGGREGATES"},
        "SK": {"S": "events#A%23B#hour#2013-01-01T05:00:00Z"},
    }


def test_add_update_without_retention_sets_bucket_but_no_ttl():
    update = add_update("tbl", DEFAULT_LAYOUT, windowed_delta(expires=None), D(3))
    assert set(resolved(update)["SET"]) == {"rule", "key", "granularity", "bucket"}


def test_add_update_of_an_unwindowed_delta_has_no_bucket_attributes():
    delta = CoalescedDelta(AggregateRef("count", "UA", "UA"), D(2), "5", [("5", D(2))])
    update = add_update("tbl", DEFAULT_LAYOUT, delta, D(2))
    assert resolved(update) == {
        "ADD": {"value": {"N": "2"}},
        "SET": {"rule": {"S": "count"}, "key": {"S": "UA"}},
        "REMOVE": [],
        "CONDITION": None,
    }
    assert update["Key"]["sk"] == {"S": "count#UA"}


# -- processor: window state -------------------------------------------------------------------


def test_window_state_round_trip_keeps_buckets():
    mixed = Engine(
        RuleSet.of(
            rule(
                "events",
                key="{cat}",
                window={
                    "time": "ts",
                    "unit": "epoch_seconds",
                    "granularities": ["hour", "minute"],
                    "retention": "25h",
                },
            ),
            rule(
                "forever",
                key="ALL",
                window={"time": "ts", "unit": "epoch_seconds", "granularities": "day"},
            ),
            rule("plain", key="{cat}"),
        )
    )
    records = [
        StreamRecord(stream_record("INSERT", None, EVENT, seq=7)),
        StreamRecord(stream_record("INSERT", None, {**EVENT, "sk": "F", "ts": T + 3600}, seq=9)),
    ]
    batch = mixed.process(records, now=T)
    decoded = decode_batch(encode_batch(batch))
    assert decoded.first_sequence_number == "000000000000000000007"
    assert decoded.last_sequence_number == "000000000000000000009"
    assert list(decoded.deltas) == list(batch.deltas)
    for sk, original in batch.deltas.items():
        got = decoded.deltas[sk]
        assert got.ref == original.ref, sk
        assert got.amount == original.amount
        assert got.parts == original.parts
        assert got.first_sequence_number == original.first_sequence_number
        assert got.leaderboard == original.leaderboard
    # checked against hand-written values, not only against the input
    assert decoded.deltas[HOUR_SK].ref.bucket == Bucket(
        "hour", HOUR_START, "2013-01-01T05:00:00Z", HOUR_TTL
    )
    assert decoded.deltas["forever#ALL#day#2013-01-01T00:00:00Z"].ref.bucket == Bucket(
        "day", 1356998400, "2013-01-01T00:00:00Z", None
    )
    assert decoded.deltas["forever#ALL#day#2013-01-01T00:00:00Z"].amount == D(2)
    assert decoded.deltas["plain#A"].ref.bucket is None
    assert decoded.deltas["plain#A"].amount == D(2)


def test_window_state_without_bucket_field_decodes_unwindowed():
    # state written before buckets existed: six fields per delta
    text = json.dumps(
        {
            "v": 1,
            "first": "5",
            "last": "6",
            "deltas": {"count#UA": ["count", "UA", "UA", 0, "5", [["5", "1"], ["6", "2"]]]},
        }
    )
    batch = decode_batch(text)
    delta = batch.deltas["count#UA"]
    assert delta.ref == AggregateRef("count", "UA", "UA", None)
    assert delta.amount == D(3)
    assert delta.parts == [("5", D(1)), ("6", D(2))]

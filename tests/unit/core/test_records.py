"""The edge: stream events and records validated once, attribute values deserialized strictly."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from aggregator.core.engine import RECORD_RULE, Engine
from aggregator.core.exceptions import EvaluationError, EventError, FailureCause
from aggregator.core.records import (
    Image,
    MalformedRecord,
    StreamRecord,
    deserialize_value,
    parse_event,
    parse_record,
    record_digest,
)
from aggregator.core.rules import RuleSet, rule
from tests.factories import stream_record

GOOD = stream_record("INSERT", new={"pk": "a", "sk": "b", "n": 1}, seq=7)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"S": "x"}, "x"),
        ({"S": ""}, ""),
        ({"N": "1.50"}, Decimal("1.50")),
        ({"N": "-1E+125"}, Decimal("-1E+125")),
        ({"N": "0"}, Decimal(0)),
        ({"N": "1" * 38}, Decimal("1" * 38)),
        ({"N": "1" + "0" * 50}, Decimal("1" + "0" * 50)),  # trailing zeros are not significant
        ({"B": base64.b64encode(b"\x00\x01").decode()}, b"\x00\x01"),
        ({"B": b"\x02"}, b"\x02"),  # the Streams API through boto3 gives bytes
        ({"BOOL": False}, False),
        ({"NULL": True}, None),
        ({"L": [{"N": "1"}, {"S": "a"}]}, [Decimal(1), "a"]),
        ({"M": {"a": {"L": []}}}, {"a": []}),
        ({"SS": ["a", "b"]}, {"a", "b"}),
        ({"NS": ["1", "2.0"]}, {Decimal(1), Decimal(2)}),
        ({"BS": ["AA=="]}, {b"\x00"}),
    ],
)
def test_valid_values_deserialize(raw, expected):
    assert deserialize_value(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"N": "NaN"}, "'NaN' is not a number"),
        ({"N": "Infinity"}, "'Infinity' is not a number"),
        ({"N": "-inf"}, "is not a number"),
        ({"N": ""}, "'' is not a number"),
        ({"N": "abc"}, "'abc' is not a number"),
        ({"N": " 1"}, "is not a number"),
        ({"N": "1_000"}, "is not a number"),
        ({"N": "1e400"}, "too large for DynamoDB"),
        ({"N": "1e-200"}, "too small for DynamoDB"),
        ({"N": "1" * 39}, "39 significant digits"),
        ({"N": 1}, "must be sent as a string, got int"),
        ({"S": 1}, "a string attribute holds int"),
        ({"B": "***"}, "is not base64"),
        ({"B": 3}, "a binary must be base64 text"),
        ({"BOOL": "true"}, "BOOL holds str"),
        ({"NULL": False}, "NULL must be true"),
        ({"L": {"a": 1}}, "L holds dict"),
        ({"M": []}, "M holds list"),
        ({"SS": []}, "SS must be a non-empty list"),
        ({"NS": ["x"]}, "'x' is not a number"),
        ({"Q": "1"}, "unknown type tag 'Q'"),
        ({}, "exactly one type tag, got 0"),
        ({"S": "a", "N": "1"}, "exactly one type tag, got 2"),
        ("text", "is not DynamoDB JSON"),
        (None, "is not DynamoDB JSON"),
        ({"L": [{"L": [{"X": 1}]}]}, "unknown type tag 'X'"),
    ],
)
def test_invalid_values_raise_with_their_true_reason(raw, message):
    with pytest.raises(EvaluationError) as info:
        deserialize_value(raw)
    assert message in str(info.value)
    assert info.value.cause == FailureCause.INVALID_VALUE


def test_nesting_deeper_than_dynamodb_allows_is_invalid():
    value: dict = {"S": "x"}
    for _ in range(40):
        value = {"L": [value]}
    with pytest.raises(EvaluationError, match="deeper than DynamoDB's 32 levels"):
        deserialize_value(value)


def test_messages_quote_only_a_prefix_of_large_values():
    with pytest.raises(EvaluationError) as info:
        deserialize_value({"N": "9" * 300_000})
    assert len(str(info.value)) < 300 and "(300000 chars)" in str(info.value)


def test_image_names_the_attribute_and_check_reads_every_named_attribute():
    image = Image({"ok": {"S": "a"}, "bad": {"N": "NaN"}})
    assert image["ok"] == "a"
    image.check({"ok", "absent"})  # absent attributes are not errors
    with pytest.raises(EvaluationError, match="attribute 'bad': 'NaN' is not a number"):
        image.check({"ok", "bad"})


@pytest.mark.parametrize(
    ("mutation", "reason", "sequenced"),
    [
        (lambda r: r.pop("dynamodb"), "dynamodb is missing", False),
        (lambda r: r["dynamodb"].pop("SequenceNumber"), "SequenceNumber is missing", False),
        (lambda r: r["dynamodb"].update(SequenceNumber="1x"), "1 to 40 digits", False),
        (lambda r: r["dynamodb"].update(SequenceNumber=12), "1 to 40 digits", False),
        (lambda r: r["dynamodb"].update(SequenceNumber=""), "1 to 40 digits", False),
        (lambda r: r.pop("eventName"), "eventName is missing", True),
        (lambda r: r.update(eventName="insert"), "INSERT, MODIFY or REMOVE", True),
        (lambda r: r["dynamodb"].update(NewImage=[]), "NewImage", True),
        (lambda r: r["dynamodb"].update(NewImage=None), "NewImage", True),
        (lambda r: r["dynamodb"].pop("Keys"), "Keys is missing", True),
        (lambda r: r["dynamodb"].update(Keys={"pk": {"S": 1}}), "Keys.pk", True),
        (lambda r: r["dynamodb"].update(Keys={"pk": {}}), "exactly one type tag", True),
        (lambda r: r["dynamodb"].update(Keys={"pk": {"L": []}}), "Keys.pk", True),
        (lambda r: r.update(userIdentity="dynamodb"), "userIdentity", True),
    ],
)
def test_records_with_a_broken_envelope_are_malformed(mutation, reason, sequenced):
    import copy

    raw = copy.deepcopy(GOOD)
    mutation(raw)
    parsed = parse_record(raw)
    assert isinstance(parsed, MalformedRecord)
    assert reason in parsed.reason
    assert (parsed.sequence_number is not None) == sequenced
    with pytest.raises(EvaluationError) as info:
        StreamRecord(raw)
    assert info.value.cause == FailureCause.MALFORMED_RECORD


@pytest.mark.parametrize("raw", ["text", None, 5, [GOOD], {"dynamodb": []}])
def test_anything_delivered_as_a_record_is_parsed_without_raising(raw):
    parsed = parse_record(raw)
    assert isinstance(parsed, MalformedRecord) and parsed.sequence_number is None


def test_parse_event_routes_records_and_refuses_other_events():
    parsed = parse_event({"Records": [GOOD, "junk"]})
    assert isinstance(parsed[0], StreamRecord) and isinstance(parsed[1], MalformedRecord)
    assert parse_event({"Records": [], "shardId": "s"}) == []
    assert parse_event({"shardId": "s", "isFinalInvokeForWindow": True}) == []
    for event, message in [
        ([GOOD], "the event is list"),
        ({"Records": {"a": 1}}, "no 'Records' list"),
        ({}, "no 'Records' list"),
        ({"Records": [{"eventSource": "aws:sqs"}]}, "'aws:sqs'"),
        ({"Records": [GOOD, {"eventSource": "aws:kinesis"}]}, "'aws:kinesis'"),
    ]:
        with pytest.raises(EventError, match=message):
            parse_event(event)


def test_the_engine_dead_letters_malformed_records_and_never_trusts_their_positions():
    engine = Engine(RuleSet.of(rule("total", key="ALL"), rule("by_n", key="{n}")))
    bad = {**GOOD, "eventName": "UPSERT"}
    bad["dynamodb"] = {**GOOD["dynamodb"], "SequenceNumber": "9"}
    later = stream_record("INSERT", new={"pk": "a", "sk": "c", "n": 2}, seq=8)
    batch = engine.process([parse_record(GOOD), parse_record(bad), parse_record(later)])
    assert {sk: d.amount for sk, d in batch.deltas.items()} == {
        "total#ALL": Decimal(2),
        "by_n#1": Decimal(1),
        "by_n#2": Decimal(1),
    }
    [failure] = batch.failures
    assert (failure.rule, failure.cause, failure.replayable) == (
        RECORD_RULE,
        FailureCause.MALFORMED_RECORD,
        False,
    )
    assert failure.sequence_number == "9"
    # the malformed record's number (here beyond every real one) never becomes a checkpoint
    assert batch.last_sequence_number == later["dynamodb"]["SequenceNumber"]
    assert batch.malformed == 1


def test_a_malformed_value_fails_every_rule_that_reads_it_whatever_the_order_of_tests():
    rules = RuleSet.of(
        # the prefix test fails first on this item, but the rule reads `n`
        rule("guarded", match={"sk": {"prefix": "X"}, "n": {"exists": True}}, key="ALL"),
        rule("unrelated", key="ALL"),
    )
    record = stream_record("INSERT", new={"pk": "a", "sk": "b"}, seq=5)
    record["dynamodb"]["NewImage"]["n"] = {"N": "NaN"}
    batch = Engine(rules).process([parse_record(record)])
    assert [(f.rule, f.cause) for f in batch.failures] == [("guarded", FailureCause.INVALID_VALUE)]
    assert {sk: d.amount for sk, d in batch.deltas.items()} == {"unrelated#ALL": Decimal(1)}


def test_failure_reasons_are_bounded():
    rules = RuleSet.of(rule("by_n", key="{n}"))
    record = stream_record("INSERT", new={"pk": "a", "sk": "b", "n": "q" * 5000}, seq=5)
    [failure] = Engine(rules).process([parse_record(record)]).failures
    assert failure.cause == FailureCause.LIMIT_EXCEEDED
    assert len(failure.reason) <= 1000 and "q" * 100 not in failure.reason


def test_record_digest_is_stable_and_distinguishes_records():
    assert record_digest(GOOD) == record_digest(dict(reversed(list(GOOD.items()))))
    assert record_digest(GOOD) != record_digest({**GOOD, "eventID": "other"})
    assert len(record_digest("anything")) == 64

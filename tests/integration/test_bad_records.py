"""Hostile and unlucky stream records on DynamoDB Local, through the Lambda handler.

Each case is one invocation of three records: a good one, the bad one, another good one. The
handler must return no ``batchItemFailures``, count both good records, and dead-letter the bad
one with its real cause, for the rules that cannot evaluate it (the other rules count it), or
count it wholly when it is a record DynamoDB could produce and that is valid.
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from aggregator import handler as handler_module
from aggregator.core.engine import RecordFailure
from aggregator.core.exceptions import FailureCause
from aggregator.core.rules import load_rules
from aggregator.dynamodb.deadletters import (
    DeadLetterWriter,
    list_dead_letters,
    replay_dead_letters,
)
from aggregator.dynamodb.query import AggregateStore
from tests.factories import stream_record
from tests.integration.test_handler import LambdaContext

pytestmark = pytest.mark.integration

SHARD = "shardId-00000001763762400000-4f3a9b21"
RULES_YAML = """
version: 1
rules:
  - name: events
    match: {sk: {prefix: "EV#"}}
    key: TOTAL
  - name: points
    match: {sk: {prefix: "EV#"}}
    key: "{player}"
    delta: {attribute: points}
  - name: per_hour
    match: {sk: {prefix: "EV#"}}
    key: "{player}"
    window: {time: at, unit: iso8601, granularities: [hour]}
"""
HOUR = "2026-11-23T10:00:00Z"


def _rules():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "rules.yaml"
        path.write_text(RULES_YAML)
        return load_rules(path)


RULES = _rules()


def good(seq: int, player: str = "ann", points: int = 3) -> dict[str, Any]:
    item = {"pk": f"P#{seq}", "sk": f"EV#{seq}", "player": player, "points": points, "at": HOUR}
    return stream_record("INSERT", new=item, seq=seq)


def bob(**changes: Any) -> dict[str, Any]:
    """The bad record's item before corruption: bob, 5 points, in the same hour."""
    return {"pk": "P#102", "sk": "EV#102", "player": "bob", "points": 5, "at": HOUR, **changes}


def insert(item: dict[str, Any], **raw_attributes: Any) -> dict[str, Any]:
    """An INSERT of ``item`` whose attributes ``raw_attributes`` are put in as given (raw)."""
    record = stream_record("INSERT", new=item, seq=102)
    record["dynamodb"]["NewImage"].update(raw_attributes)
    return record


def mutate(record: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``record`` with the value at ``path`` replaced (``...`` deletes it)."""
    record = json.loads(json.dumps(record))
    target = record
    for part in path[:-1]:
        target = target[part]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return record


def noise(n: int, seed: int) -> str:
    """Incompressible text (zlib gains little on it)."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=n))


@dataclass
class Case:
    """One bad record and what must come of it.

    ``counted``: rules that count the bad record (bob, 5 points, one event in the hour);
    ``failing``: ``{rule: cause}`` of its dead letters; ``reason``: text every reason contains.
    """

    record: Any
    counted: set[str] = field(default_factory=set)
    failing: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    form: str = "json"
    sequenced: bool = True


MALFORMED = {"*": "malformed-record"}
ALL = {"events", "points", "per_hour"}

CASES: dict[str, Case] = {
    # -- large values ------------------------------------------------------------------------
    "250 KB string in the window's time attribute": Case(
        insert(bob(at="x" * 256_000)),
        counted={"events", "points"},
        failing={"per_hour": "invalid-value"},
        reason="not an ISO 8601 time",
    ),
    "MODIFY with two 300 KB compressible images": Case(
        stream_record("MODIFY", old=bob(at="y" * 300_000), new=bob(at="z" * 300_000), seq=102),
        failing={"per_hour": "invalid-value"},
        reason="not an ISO 8601 time",
        form="zlib",
    ),
    "MODIFY with two 300 KB incompressible images": Case(
        stream_record(
            "MODIFY", old=bob(at=noise(300_000, 1)), new=bob(at=noise(300_000, 2)), seq=102
        ),
        failing={"per_hour": "invalid-value"},
        reason="not an ISO 8601 time",
        form="keys",
    ),
    "200 KB key value": Case(
        insert(bob(player="b" * 200_000)),
        counted={"events"},
        failing={"points": "limit-exceeded", "per_hour": "limit-exceeded"},
        reason="1024-byte limit",
    ),
    # -- numbers DynamoDB JSON can carry but DynamoDB could not store -------------------------
    **{
        f"delta number {text!r}": Case(
            insert(bob(), points={"N": text}),
            counted={"events", "per_hour"},
            failing={"points": "invalid-value"},
            reason="attribute 'points'",
        )
        for text in ("NaN", "Infinity", "-Infinity", "sNaN", "", "abc", "1e400", "1" * 39, "0x10")
    },
    "number sent as a JSON number": Case(
        insert(bob(), points={"N": 5}),
        counted={"events", "per_hour"},
        failing={"points": "invalid-value"},
        reason="must be sent as a string",
    ),
    # -- broken attribute values in attributes rules read -------------------------------------
    "attribute value that is not DynamoDB JSON": Case(
        insert(bob(), player="bob"),
        counted={"events"},
        failing={"points": "invalid-value", "per_hour": "invalid-value"},
        reason="is not DynamoDB JSON",
    ),
    "unknown type tag": Case(
        insert(bob(), points={"Q": "5"}),
        counted={"events", "per_hour"},
        failing={"points": "invalid-value"},
        reason="unknown type tag",
    ),
    "two type tags": Case(
        insert(bob(), player={"S": "bob", "N": "1"}),
        counted={"events"},
        failing={"points": "invalid-value", "per_hour": "invalid-value"},
        reason="exactly one type tag",
    ),
    "string tag holding a number": Case(
        insert(bob(), player={"S": 7}),
        counted={"events"},
        failing={"points": "invalid-value", "per_hour": "invalid-value"},
        reason="a string attribute holds int",
    ),
    # -- structurally broken records -----------------------------------------------------------
    "no dynamodb": Case(
        mutate(insert(bob()), ("dynamodb",), ...),
        failing=MALFORMED,
        reason="dynamodb is missing",
        sequenced=False,
    ),
    "no SequenceNumber": Case(
        mutate(insert(bob()), ("dynamodb", "SequenceNumber"), ...),
        failing=MALFORMED,
        reason="SequenceNumber is missing",
        sequenced=False,
    ),
    "non-numeric SequenceNumber": Case(
        mutate(insert(bob()), ("dynamodb", "SequenceNumber"), "12ab"),
        failing=MALFORMED,
        reason="1 to 40 digits",
        sequenced=False,
    ),
    "41-digit SequenceNumber": Case(
        mutate(insert(bob()), ("dynamodb", "SequenceNumber"), "1" * 41),
        failing=MALFORMED,
        reason="1 to 40 digits",
        sequenced=False,
    ),
    "no eventName": Case(
        mutate(insert(bob()), ("eventName",), ...), failing=MALFORMED, reason="eventName is missing"
    ),
    "unknown eventName": Case(
        mutate(insert(bob()), ("eventName",), "UPSERT"),
        failing=MALFORMED,
        reason="INSERT, MODIFY or REMOVE",
    ),
    "image that is a string": Case(
        mutate(insert(bob()), ("dynamodb", "NewImage"), "oops"),
        failing=MALFORMED,
        reason="NewImage",
    ),
    "image that is a list": Case(
        mutate(insert(bob()), ("dynamodb", "NewImage"), [1, 2]),
        failing=MALFORMED,
        reason="NewImage",
    ),
    "image that is null": Case(
        mutate(insert(bob()), ("dynamodb", "NewImage"), None),
        failing=MALFORMED,
        reason="NewImage",
    ),
    "attribute value that is a list": Case(
        mutate(insert(bob()), ("dynamodb", "NewImage", "player"), ["bob"]),
        counted={"events"},
        failing={"points": "invalid-value", "per_hour": "invalid-value"},
        reason="is not DynamoDB JSON",
    ),
    "Keys that are not a mapping": Case(
        mutate(insert(bob()), ("dynamodb", "Keys"), "P#102"), failing=MALFORMED, reason="Keys"
    ),
    "key of type BOOL": Case(
        mutate(insert(bob()), ("dynamodb", "Keys", "pk"), {"BOOL": True}),
        failing=MALFORMED,
        reason="Keys.pk",
    ),
    "record that is a string": Case("not a record", failing=MALFORMED, sequenced=False),
    "record that is null": Case(None, failing=MALFORMED, sequenced=False),
    "dynamodb that is a list": Case(
        mutate(insert(bob()), ("dynamodb",), []), failing=MALFORMED, sequenced=False
    ),
    # -- the stream's view type lacks an image -------------------------------------------------
    "MODIFY without OldImage": Case(
        mutate(
            stream_record("MODIFY", old=bob(), new=bob(points=6), seq=102),
            ("dynamodb", "OldImage"),
            ...,
        ),
        failing={r: "missing-image" for r in ALL},
        reason="NEW_AND_OLD_IMAGES",
    ),
    # -- odd but valid records DynamoDB can produce: counted ----------------------------------
    "valid record with every attribute type": Case(
        insert(
            bob(),
            blob={"B": "AAECAw=="},
            tags={"SS": ["a", "b"]},
            nums={"NS": ["1", "2.5"]},
            bins={"BS": ["AA=="]},
            nested={"M": {"a": {"L": [{"N": "1"}, {"NULL": True}, {"BOOL": False}]}}},
            nothing={"NULL": True},
        ),
        counted=ALL,
    ),
    "valid record with a malformed attribute no rule reads": Case(
        insert(bob(), junk={"Q": "?"}, more="raw"), counted=ALL
    ),
    "valid record with unicode and separators in the key": Case(
        insert(bob(player="Zoë#50%")), counted=ALL
    ),
}


@pytest.fixture
def definitions(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML)
    return path


@pytest.fixture
def invoke(monkeypatch, definitions, dynamodb_local, table):
    """Configure the handler on a fresh table; returns ``(call(records), table name)``."""
    name, _ = table
    for key, value in {
        "AGGREGATOR_TABLE_NAME": name,
        "AGGREGATOR_DEFINITIONS": str(definitions),
        "AGGREGATOR_ENDPOINT_URL": dynamodb_local.endpoint_url,
        "AGGREGATOR_MODE": "exactly-once",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_METRICS_NAMESPACE": "Test",
    }.items():
        monkeypatch.setenv(key, value)
    handler_module.reset()

    def call(records: list[Any]) -> dict[str, Any]:
        event = {
            "Records": records,
            "shardId": SHARD,
            "eventSourceARN": records[0]["eventSourceARN"],
            "window": {"start": "2026-11-23T10:00:00Z", "end": "2026-11-23T10:01:00Z"},
            "state": {},
            "isFinalInvokeForWindow": False,
            "isWindowTerminatedEarly": False,
        }
        return handler_module.handler(event, LambdaContext())

    yield call, name
    handler_module.reset()


def aggregates(ddb, name: str) -> dict[str, dict[str, Decimal]]:
    store = AggregateStore(ddb, name, RULES)
    out = {}
    for rule_name in ("events", "points", "per_hour"):
        out[rule_name] = {
            (a.key if a.bucket is None else f"{a.key}@{a.bucket}"): a.value
            for a in store.list(rule_name)
            if a.value != 0
        }
    return out


def expected(counted: set[str], player: str = "bob") -> dict[str, dict[str, Decimal]]:
    """Ann's two good events plus the bad record wherever a rule counts it."""
    hour = HOUR
    out: dict[str, dict[str, Decimal]] = {
        "events": {"TOTAL": Decimal(2 + ("events" in counted))},
        "points": {"ann": Decimal(6)},
        "per_hour": {f"ann@{hour}": Decimal(2)},
    }
    if "points" in counted:
        out["points"][player] = Decimal(5)
    if "per_hour" in counted:
        out["per_hour"][f"{player}@{hour}"] = Decimal(1)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_bad_record_between_two_good_ones(name, invoke, ddb, capsys):
    case = CASES[name]
    call, table_name = invoke
    response = call([good(101), case.record, good(103)])

    assert response["batchItemFailures"] == []
    player = "Zoë#50%" if "unicode" in name else "bob"
    assert aggregates(ddb, table_name) == expected(case.counted, player)

    letters = list(list_dead_letters(ddb, table_name))
    assert {d.rule: d.cause for d in letters} == case.failing
    for d in letters:
        assert case.reason in d.reason, d.reason
        assert len(d.reason) <= 1000 and "x" * 100 not in d.reason
        assert d.shard_id == SHARD
        assert d.record_form == case.form
        # a bad new image heals when the item is fixed (never replayed); a record of which
        # nothing applied replays when it was kept whole
        assert d.image == (None if d.cause in ("malformed-record", "missing-image") else "NewImage")
        assert d.replayable == (
            d.image is None and d.rule != "*" and d.record_form in ("json", "zlib")
        )
        if case.sequenced:
            assert d.sequence_number == "102".zfill(21)
        else:
            assert d.sort_key.startswith(f"{SHARD}#unsequenced-")
        if d.record_form in ("json", "zlib"):
            assert d.record == json.loads(json.dumps(case.record))

    # every outcome is visible: dead letters per cause in the EMF output, no value in the logs
    output = capsys.readouterr().out
    blobs = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    causes = Counter()
    for blob in blobs:
        if "DeadLettersByCause" in blob:
            value = blob["DeadLettersByCause"]  # EMF values may be lists
            causes[blob["Cause"]] += int(sum(value) if isinstance(value, list) else value)
    assert causes == Counter(case.failing.values())
    assert "x" * 100 not in output and "y" * 100 not in output


def test_a_malformed_sequence_number_does_not_poison_later_batches(invoke, ddb):
    """The malformed record's text never becomes a checkpoint: later batches still apply."""
    call, table_name = invoke
    bad = mutate(good(102, "bob"), ("dynamodb", "SequenceNumber"), "not-a-number")
    assert call([good(101), bad])["batchItemFailures"] == []
    assert call([good(103), good(104, "cyd", 1)])["batchItemFailures"] == []
    assert aggregates(ddb, table_name)["points"] == {"ann": Decimal(6), "cyd": Decimal(1)}
    # redelivering the first batch changes nothing (exactly-once) and writes no second letter
    assert call([good(101), bad])["batchItemFailures"] == []
    assert aggregates(ddb, table_name)["events"] == {"TOTAL": Decimal(3)}
    assert len(list(list_dead_letters(ddb, table_name))) == 1


def test_a_zlib_dead_letter_keeps_the_record_whole_and_replays_once(invoke, ddb):
    """A compressed dead letter holds the whole record: a letter of which nothing applied (here
    one written as a record failing as a whole) replays from it, once."""
    _, table_name = invoke
    big = stream_record("MODIFY", old=bob(at="y" * 300_000), new=bob(points=7, note="z" * 300_000))
    failure = RecordFailure(
        "102",
        "e",
        "points",
        "the batch's sum needs more than 38 digits",
        big,
        FailureCause.LIMIT_EXCEEDED,
    )
    DeadLetterWriter(ddb, table_name).write([failure], shard_id=SHARD)
    [letter] = list_dead_letters(ddb, table_name)
    assert (letter.record_form, letter.replayable, letter.image) == ("zlib", True, None)
    assert letter.record == json.loads(json.dumps(big))
    first = replay_dead_letters(ddb, table_name, RULES, min_age_seconds=0)
    second = replay_dead_letters(ddb, table_name, RULES, min_age_seconds=0)
    assert (first.replayed, first.still_failing, second.replayed) == (1, [], 0)
    # bob's points 5 -> 7: +2, once
    assert AggregateStore(ddb, table_name, RULES).get("points", ["bob"]).value == Decimal(2)


def test_event_that_is_not_a_stream_event_fails_loudly(invoke):
    from aggregator.core.exceptions import EventError

    sqs_record = {"eventSource": "aws:sqs", "messageId": "1", "body": "{}"}
    with pytest.raises(EventError, match="aws:sqs"):
        handler_module.handler({"Records": [sqs_record]}, LambdaContext())
    with pytest.raises(EventError, match="no 'Records' list"):
        handler_module.handler({"detail-type": "Scheduled Event"}, LambdaContext())
    with pytest.raises(EventError, match="shardId"):
        handler_module.handler({"Records": [good(1)], "shardId": "bad shard/../x"}, LambdaContext())

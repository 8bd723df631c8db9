"""``aggregator explain`` and the explanations under it: the first failing test of a match,
what a matching image adds, and what the handler makes of a stream record."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from aggregator.cli import main
from aggregator.cli.commands.explain import is_dynamodb_json, to_image
from aggregator.core.conditions import MISSING, parse_match
from aggregator.core.engine import Engine
from aggregator.core.explain import explain_image, explain_record
from aggregator.core.records import Image, parse_record
from aggregator.core.rules import RuleSet, rule
from tests.factories import stream_record

NOW = 1_357_020_000.0

RULES = RuleSet.of(
    rule("orders", match={"type": "order", "total": {"numeric": [">", 0]}}, key="{customer}"),
    rule("revenue", match={"type": "order"}, key="{customer}", delta={"attribute": "total"}),
    rule(
        "hourly",
        match={"type": "order"},
        key="{customer}",
        window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]},
    ),
    rule("kept", match={"kind": "event"}, key="TOTAL"),
)
ENGINE = Engine(RULES)


def ddb(item: dict) -> dict:
    return to_image(json.loads(json.dumps(item), parse_float=Decimal, parse_int=Decimal), "t")


@pytest.mark.parametrize(
    ("match", "image", "reason"),
    [
        (
            {"status": "DEPARTED"},
            {"status": "SCHEDULED"},
            "status: expected DEPARTED, got SCHEDULED",
        ),
        ({"status": "DEPARTED"}, {}, "status: expected DEPARTED, got (missing)"),
        (
            {"origin": ["JFK", "LGA"]},
            {"origin": "EWR"},
            "origin: expected one of JFK, LGA, got EWR",
        ),
        ({"a": {"anything-but": ["x"]}}, {"a": "x"}, "a: expected anything but x, got x"),
        (
            {"sk": {"prefix": "LIKE#"}},
            {"sk": "META"},
            "sk: expected text starting with LIKE#, got META",
        ),
        ({"t": {"exists": True}}, {}, "t: expected to exist, got (missing)"),
        ({"t": {"exists": False}}, {"t": Decimal(1)}, "t: expected to be absent, got 1"),
        (
            {"d": {"numeric": [">", 0, "<=", 10]}},
            {"d": Decimal(12)},
            "d: expected a number > 0 and <= 10, got 12",
        ),
        ({"d": {"numeric": [">", 0]}}, {"d": "12"}, "d: expected a number > 0, got text '12'"),
        ({"a": "x", "b": "y"}, {"a": "x", "b": "z"}, "b: expected y, got z"),
        ({"not": {"a": "x"}}, {"a": "x"}, "not (expected x), and it holds"),
    ],
)
def test_first_failure_names_the_test_and_the_value(match, image, reason):
    condition = parse_match(match)
    assert condition.first_failure(image) == reason
    assert not condition.matches(image)


def test_or_lists_every_branch():
    condition = parse_match({"or": [{"a": "x"}, {"b": "y"}]})
    assert condition.first_failure({"a": "z"}) == (
        "none of: a: expected x, got z | b: expected y, got (missing)"
    )


@given(
    st.dictionaries(
        st.sampled_from(["a", "b"]),
        st.one_of(st.sampled_from(["x", "y", "LIKE#1"]), st.integers(-2, 2).map(Decimal)),
    )
)
def test_first_failure_is_none_exactly_when_the_condition_matches(image):
    for spec in (
        {"a": "x"},
        {"a": ["x", "y"], "b": {"numeric": [">=", 0]}},
        {"or": [{"a": {"prefix": "LIKE#"}}, {"not": {"b": {"exists": True}}}]},
    ):
        condition = parse_match(spec)
        assert (condition.first_failure(image) is None) == condition.matches(image)
    assert MISSING is not None


def test_a_matching_item_shows_key_sort_key_bucket_and_delta():
    image = Image(ddb({"type": "order", "customer": "ann", "total": 12.5, "ts": 1357016500}))
    by_rule = {e.rule: e for e in explain_image(ENGINE, image, now=NOW)}
    assert [(c.key, c.sort_key, c.amount) for c in by_rule["orders"].contributions] == [
        ("ann", "orders#ann", Decimal(1))
    ]
    assert [c.amount for c in by_rule["revenue"].contributions] == [Decimal("12.5")]
    (hour,) = by_rule["hourly"].contributions
    assert (hour.granularity, hour.bucket) == ("hour", "2013-01-01T05:00:00Z")
    assert (by_rule["kept"].matched, by_rule["kept"].reason) == (
        False,
        "kind: expected event, got (missing)",
    )


def test_an_item_that_matches_but_cannot_be_evaluated_gives_the_dead_letter_cause():
    image = Image(ddb({"type": "order", "customer": "ann", "total": "12.5", "ts": 1357016500}))
    by_rule = {e.rule: e for e in explain_image(ENGINE, image, now=NOW)}
    assert by_rule["orders"].reason == "total: expected a number > 0, got text '12.5'"
    assert (by_rule["revenue"].matched, by_rule["revenue"].cause) == (True, "wrong-type")
    assert "delta attribute 'total' is str" in by_rule["revenue"].reason


def _record(event: str, old: dict | None, new: dict | None, **extra) -> dict:
    data = {"SequenceNumber": "100", "Keys": ddb({"pk": "O#1", "sk": "O"})}
    if old is not None:
        data["OldImage"] = ddb({"pk": "O#1", "sk": "O", **old})
    if new is not None:
        data["NewImage"] = ddb({"pk": "O#1", "sk": "O", **new})
    return {
        "eventID": "e",
        "eventName": event,
        "eventSource": "aws:dynamodb",
        "dynamodb": data,
        **extra,
    }


def test_a_record_moving_an_order_between_customers():
    order = {"type": "order", "total": 5, "ts": 1357016500}
    raw = _record("MODIFY", {**order, "customer": "ann"}, {**order, "customer": "bob"})
    explained = explain_record(ENGINE, parse_record(raw), now=NOW)
    changes = {(c.ref.rule, c.ref.display_key): c.amount for c in explained.changes}
    assert changes == {
        ("orders", "ann"): Decimal(-1),
        ("orders", "bob"): Decimal(1),
        ("revenue", "ann"): Decimal(-5),
        ("revenue", "bob"): Decimal(5),
        ("hourly", "ann"): Decimal(-1),
        ("hourly", "bob"): Decimal(1),
    }
    assert explained.failures == [] and explained.notes == []


def test_why_a_record_writes_nothing():
    event = {"kind": "event"}
    ttl = _record(
        "REMOVE",
        event,
        None,
        userIdentity={"type": "Service", "principalId": "dynamodb.amazonaws.com"},
    )
    explained = explain_record(ENGINE, parse_record(ttl), now=NOW)
    assert explained.changes == []
    assert explained.notes == [
        "a delete made by TTL: rules with ttl_deletes: keep retract nothing (orders, revenue, "
        "hourly, kept)"
    ]
    own = _record("INSERT", None, {"value": 1})
    own["dynamodb"]["Keys"] = ddb({"pk": "AGGREGATES", "sk": "x#1"})
    own["dynamodb"]["NewImage"] = ddb({"pk": "AGGREGATES", "sk": "x#1", "value": 1})
    assert (
        explain_record(ENGINE, parse_record(own), now=NOW)
        .notes[0]
        .startswith("a write of the framework's own")
    )
    old_order = _record(
        "INSERT", None, {"type": "order", "customer": "ann", "total": 1, "ts": 1000}
    )
    expired = Engine(
        RuleSet.of(
            rule(
                "hourly",
                match={"type": "order"},
                key="{customer}",
                window={
                    "time": "ts",
                    "unit": "epoch_seconds",
                    "granularities": ["hour"],
                    "retention": "1h",
                },
            )
        )
    )
    assert explain_record(expired, parse_record(old_order), now=NOW).notes == [
        "1 change(s) to time buckets past their retention skipped (an expired bucket is never "
        "written again)"
    ]


def test_plain_and_dynamodb_json_items_are_told_apart():
    assert is_dynamodb_json({"pk": {"S": "a"}, "n": {"N": "1"}})
    assert not is_dynamodb_json({"pk": "a", "m": {"S": "not a tag here", "x": 1}})
    assert not is_dynamodb_json({})
    assert to_image({"pk": "a", "n": Decimal("1.5")}, "t") == {"pk": {"S": "a"}, "n": {"N": "1.5"}}


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "version: 1\nrules:\n"
        "  - {name: orders, match: {type: order}, key: '{customer}'}\n"
        "  - {name: refunds, match: {type: refund}, key: '{customer}'}\n"
    )
    return path


def test_the_command_explains_a_plain_item_from_stdin_and_a_dynamodb_json_file(
    rules_file, tmp_path
):
    cli = CliRunner()
    plain = cli.invoke(
        main, ["explain", "-d", str(rules_file), "-"], input='{"type": "order", "customer": "ann"}'
    )
    assert plain.exit_code == 0, plain.output
    text = " ".join(plain.output.split())
    assert "orders: matched" in text and "key ann (sort key orders#ann): +1" in text
    assert "refunds: not matched: type: expected refund, got order" in text
    item = tmp_path / "item.json"
    item.write_text('{"type": {"S": "order"}, "customer": {"S": "ann"}}')
    as_json = cli.invoke(main, ["explain", "-d", str(rules_file), str(item), "--json"])
    assert json.loads(as_json.output) == {
        "item": str(item),
        "rules": [
            {
                "rule": "orders",
                "kind": "sum",
                "matched": True,
                "reason": None,
                "cause": None,
                "contributions": [
                    {
                        "key": "ann",
                        "sort_key": "orders#ann",
                        "amount": "1",
                        "granularity": None,
                        "bucket": None,
                    }
                ],
            },
            {
                "rule": "refunds",
                "kind": "sum",
                "matched": False,
                "reason": "type: expected refund, got order",
                "cause": None,
                "contributions": [],
            },
        ],
    }


def test_the_command_explains_a_record(rules_file, tmp_path):
    record = tmp_path / "record.json"
    record.write_text(
        json.dumps(
            _record(
                "MODIFY",
                {"type": "order", "customer": "ann"},
                {"type": "refund", "customer": "ann"},
            )
        )
    )
    result = CliRunner().invoke(
        main, ["explain", "-d", str(rules_file), "--record", str(record), "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [(c["rule"], c["key"], c["amount"]) for c in out["changes"]] == [
        ("orders", "ann", "-1"),
        ("refunds", "ann", "1"),
    ]
    assert out["changes"][0]["update"].startswith("ADD value -1; SET rule = orders; SET key = ann")
    assert out["record"] == {
        "event_name": "MODIFY",
        "sequence_number": "100",
        "keys": {"pk": {"S": "O#1"}, "sk": {"S": "O"}},
    }
    shown = CliRunner().invoke(main, ["explain", "-d", str(rules_file), "--record", str(record)])
    assert "what the handler writes" in shown.output and "UpdateItem orders#ann" in shown.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            [],
            "error: nothing to explain: give an ITEM file (or -), --record FILE, or --table T "
            "--key NAME=VALUE ...",
        ),
        (
            ["a.json", "--record", "b.json"],
            "error: explain one thing at a time: an ITEM file (or -), --record FILE, or --table "
            "T --key NAME=VALUE ...",
        ),
        (["nope.json"], "error: nope.json: cannot read the item: No such file or directory"),
    ],
)
def test_the_command_refuses_in_one_line(rules_file, args, line, monkeypatch):
    # AGGREGATOR_TABLE_NAME names the table for --key only: an ITEM still is one thing
    monkeypatch.setenv("AGGREGATOR_TABLE_NAME", "orders")
    result = CliRunner().invoke(main, ["explain", "-d", str(rules_file), *args])
    assert result.exit_code == 1
    assert result.output.splitlines() == [line]


def test_a_malformed_record_is_said_so(rules_file, tmp_path):
    record = tmp_path / "bad.json"
    record.write_text('{"eventName": "INSERT"}')
    result = CliRunner().invoke(main, ["explain", "-d", str(rules_file), "--record", str(record)])
    assert result.exit_code == 0
    assert result.output.startswith("malformed stream record: ")


def test_numbers_dynamodb_cannot_hold_are_the_rules_to_report(rules_file, tmp_path):
    """As in the handler: an out-of-range or NaN number in a plain item, or a malformed one in
    DynamoDB JSON, fails the rules that read it (their dead letter's cause), never the command."""
    path = tmp_path / "r.yaml"
    path.write_text(
        "version: 1\nrules:\n  - {name: revenue, match: {type: order}, key: '{c}', "
        "delta: {attribute: amount}}\n"
    )
    for item in (
        '{"type": "order", "c": "x", "amount": 1e400}',
        '{"type": "order", "c": "x", "amount": NaN}',
        '{"type": {"S": "order"}, "c": {"S": "x"}, "amount": {"N": "abc"}}',
    ):
        result = CliRunner().invoke(main, ["explain", "-d", str(path), "-", "--json"], input=item)
        assert result.exit_code == 0, (item, result.output)
        (explained,) = json.loads(result.output)["rules"]
        assert explained["cause"] == "invalid-value", item
        assert explained["contributions"] == []


def test_a_lambda_event_is_explained_record_by_record(rules_file, tmp_path):
    first = _record("INSERT", None, {"type": "order", "customer": "ann"})
    second = _record("REMOVE", {"type": "refund", "customer": "bob"}, None)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"Records": [first, second]}))
    result = CliRunner().invoke(
        main, ["explain", "-d", str(rules_file), "--record", str(event), "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [[(c["rule"], c["key"], c["amount"]) for c in r["changes"]] for r in out] == [
        [("orders", "ann", "1")],
        [("refunds", "bob", "-1")],
    ]


def test_a_record_fixing_a_bad_order_adds_its_total_and_retracts_nothing():
    order = {"type": "order", "customer": "ann", "ts": 1357016500}
    raw = _record("MODIFY", {**order, "total": "12.5"}, {**order, "total": 12.5})
    explained = explain_record(ENGINE, parse_record(raw), now=NOW)
    changes = {(c.ref.rule, c.ref.display_key): c.amount for c in explained.changes}
    # orders did not match the text total before (no failure: a non-match), revenue could not
    # read it (it counted nothing): both now add the fixed order, nothing is taken out
    assert changes == {("orders", "ann"): Decimal(1), ("revenue", "ann"): Decimal("12.5")}
    assert explained.failures == []
    assert explained.notes == [
        "the old image could not be evaluated by revenue: it counted nothing, so nothing of it "
        "is retracted (a bad item heals when it is fixed)"
    ]


def test_a_record_breaking_an_order_retracts_it_and_dead_letters_the_new_image():
    order = {"type": "order", "customer": "ann", "ts": 1357016500}
    raw = _record("MODIFY", {**order, "total": 4}, {**order, "total": "four"})
    explained = explain_record(ENGINE, parse_record(raw), now=NOW)
    changes = {(c.ref.rule, c.ref.display_key): c.amount for c in explained.changes}
    assert changes == {("orders", "ann"): Decimal(-1), ("revenue", "ann"): Decimal(-4)}
    assert [(f.rule, f.image, f.cause) for f in explained.failures] == [
        ("revenue", "NewImage", "wrong-type")
    ]


def test_a_target_rule_is_explained_as_the_write_to_the_application_item(tmp_path):
    """The handler's UpdateItem of a target rule goes to the post's META item (ADD likeTally),
    its ledger only when the item does not exist: explain says so, not an aggregate item."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "version: 1\n"
        "table: {partition_key: PK, sort_key: SK}\n"
        "rules:\n"
        "  - name: like_tally\n"
        "    match: {SK: {prefix: 'LIKE#'}}\n"
        "    target: {partition_key: '{PK}', sort_key: META, attribute: likeTally}\n"
    )
    record = tmp_path / "record.json"
    like = {"PK": "POST#a", "SK": "LIKE#u1"}
    record.write_text(json.dumps(stream_record("INSERT", new=like, keys=("PK", "SK"))))
    shown = CliRunner().invoke(main, ["explain", "-d", str(rules), "--record", str(record)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "key POST#a#META (likeTally of the item PK=POST#a, SK=META): +1" in text
    assert (
        "UpdateItem PK=POST#a, SK=META: ADD likeTally 1 on condition the item exists" in text
        and "the rule's ledger item like_tally#POST%23a#META gets the ADD instead" in text
    )
    as_json = CliRunner().invoke(
        main, ["explain", "-d", str(rules), "--record", str(record), "--json"]
    )
    (contribution,) = json.loads(as_json.stdout)["new_image"][0]["contributions"]
    assert contribution["target"] == ["POST#a", "META"]
    assert contribution["target_attribute"] == "likeTally"

"""Thresholds: the rule field, the crossings read from an aggregate's stream record, the filters
that let those records through, and the role's PutEvents grant."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from aggregator.cli.template import EVENT_BUS_ARN, THRESHOLD_EVENTS_POLICY_NAME, render_regions
from aggregator.core.crossings import event_id, record_crossings
from aggregator.core.exceptions import RuleError
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.records import StreamRecord
from aggregator.core.rules import load_rules
from aggregator.core.text import quote
from aggregator.deploy.filters import filter_patterns
from aggregator.runtime.threshold_events import ThresholdEvents
from tests.factories import stream_record

RULES = """\
version: 1
rules:
  - name: likes
    match: {kind: like}
    key: "{post}"
    thresholds:
      - {name: popular, above: 10}
      - {below: 2.5, keys: ["p1"]}
  - name: hourly
    match: {kind: like}
    key: "{post}"
    window: {time: at, unit: epoch_seconds, granularities: [hour], retention: 2h}
    thresholds: [{above: 3}]
  - name: plain
    match: {kind: like}
    key: "{post}"
"""


def _rules(tmp_path: Path, text: str = RULES) -> Any:
    path = tmp_path / "rules.yaml"
    path.write_text(text, encoding="utf-8")
    return load_rules(path)


def _aggregate(
    event: str, sort_key: str, old: int | None, new: int | None, **extra: Any
) -> StreamRecord:
    def image(value: int | None) -> dict[str, Any] | None:
        if value is None:
            return None
        return {"pk": "AGGREGATES", "sk": sort_key, "value": value, "key": "p1", **extra}

    return StreamRecord(stream_record(event, image(old), image(new), seq=42))


def test_thresholds_parse_with_default_names(tmp_path: Path) -> None:
    rules = _rules(tmp_path)
    likes = rules.get("likes")
    assert [(t.name, t.condition) for t in likes.thresholds] == [
        ("popular", "above 10"),
        ("below-2.5", "below 2.5"),
    ]
    assert likes.observed and not rules.get("plain").observed
    assert likes.thresholds[0].holds(Decimal(10)) and not likes.thresholds[0].holds(Decimal(9))
    assert likes.thresholds[1].holds(Decimal("2.4")) and not likes.thresholds[1].holds(Decimal(3))


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        ("[{above: 1, below: 2}]", "exactly one of above: or below:"),
        ("[{name: x}]", "exactly one of above: or below:"),
        ("[{above: 1, name: a}, {below: 1, name: a}]", "threshold name 'a' is given twice"),
        ("[{above: 1, when: later}]", "when"),
    ],
)
def test_a_bad_threshold_names_the_file_rule_and_field(
    tmp_path: Path, thresholds: str, message: str
) -> None:
    text = f"version: 1\nrules:\n  - {{name: r, key: k, thresholds: {thresholds}}}\n"
    with pytest.raises(RuleError) as info:
        _rules(tmp_path, text)
    text = str(info.value)
    assert "rules.yaml" in text and "'r'" in text and "thresholds" in text and message in text


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        # one line for one mistake, naming the field (not one per item and a count of none)
        (
            "[{above: 5, keys: [p1, {a: 1}]}]",
            "field 'thresholds[0].keys': key 2 is a mapping: give each key as text, as "
            "`aggregator query list` shows it",
        ),
        (
            "[{above: 5, keys: [p1, null]}]",
            "field 'thresholds[0].keys': key 2 is nothing: give each key as text, as "
            "`aggregator query list` shows it",
        ),
        (
            "[{above: 5, keys: []}]",
            "field 'thresholds[0].keys': give at least one key, or leave keys out to watch "
            "every key",
        ),
        (
            "[{above: 5, keys: [.inf]}]",
            "field 'thresholds[0].keys': key number Infinity: not a finite number",
        ),
        (
            "[{above: 5, keys: p1}]",
            "field 'thresholds[0].keys': expected a list, got text 'p1'",
        ),
        # a misspelt field gets the threshold's own names suggested
        ("[{abvoe: 5}]", "field 'thresholds[0].abvoe': unknown field; did you mean 'above'?"),
        (
            "[{above: 5}, {below: 1, key: [p1]}]",
            "field 'thresholds[1].key': unknown field; did you mean 'keys'?",
        ),
        ("[{above: 5, when: later}]", "field 'thresholds[0].when': unknown field"),
        # a line that is not a number DynamoDB can hold, in the project's words
        ("[{above: five}]", "field 'thresholds[0].above': expected a number, got text 'five'"),
        ("[{above: true}]", "field 'thresholds[0].above': expected a number, got a boolean"),
        ("[{below: [1]}]", "field 'thresholds[0].below': expected a number, got a list"),
        ("[{above: .inf}]", "field 'thresholds[0].above': expected a finite number, got Infinity"),
        (
            "[{above: 123456789012345678901234567890123456789}]",
            "field 'thresholds[0].above': 39 significant digits; DynamoDB numbers have at most 38",
        ),
        (
            "[{above: 1e400}]",
            "field 'thresholds[0].above': 1E+400 is too large for DynamoDB (largest magnitude "
            "9.9999999999999999999999999999999999999E+125)",
        ),
        (
            "[{below: -1E-131}]",
            "field 'thresholds[0].below': -1E-131 is too small for DynamoDB (smallest nonzero "
            "magnitude 1E-130)",
        ),
        # a default name over the limit asks for a name (1E+100 written out is 101 digits)
        (
            "[{above: 1e100}]",
            f"field 'thresholds[0]': its default name {quote('above-1' + '0' * 100)} is longer "
            "than 64 characters: give the threshold a name",
        ),
        # a threshold's name has its own limit, 64 (a rule's is 100)
        (
            f"[{{above: 1, name: {'a' * 65}}}]",
            f"field 'thresholds[0].name': {quote('a' * 65)} is not a threshold name: start with "
            "a letter, then letters, digits, '_', '.' or '-', at most 64 characters",
        ),
        (
            "[{above: 1, name: 9x}]",
            "field 'thresholds[0].name': '9x' is not a threshold name: start with a letter, "
            "then letters, digits, '_', '.' or '-', at most 64 characters",
        ),
        # a granularity needs a window (this rule has none)
        (
            "[{above: 1, granularity: hour}]",
            "field 'thresholds[0].granularity': granularity 'hour' needs time buckets: the rule "
            "has no window (leave granularity out)",
        ),
        (
            "[{above: 1, granularity: [hour]}]",
            "field 'thresholds[0].granularity': expected a granularity such as hour, got a list",
        ),
    ],
)
def test_a_threshold_mistake_is_one_line(tmp_path: Path, thresholds: str, message: str) -> None:
    text = f"version: 1\nrules:\n  - {{name: r, key: k, thresholds: {thresholds}}}\n"
    with pytest.raises(RuleError) as info:
        _rules(tmp_path, text)
    assert str(info.value) == f"{tmp_path / 'rules.yaml'}: rule 'r', {message}"


WINDOWED = (
    "version: 1\nrules:\n  - name: r\n    key: k\n"
    "    window: {{time: at, unit: epoch_seconds, granularities: [hour, minute]}}\n"
    "    thresholds: {thresholds}\n"
)


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        (
            "[{above: 1, granularity: hours}]",
            "field 'thresholds[0].granularity': the rule keeps no granularity 'hours' (it keeps "
            "hour, minute); did you mean 'hour'?",
        ),
        (
            "[{above: 1}, {above: 2, granularity: day}]",
            "field 'thresholds[1].granularity': the rule keeps no granularity 'day' (it keeps "
            "hour, minute)",
        ),
        (
            "[{above: 1, granularity: 300}]",
            "field 'thresholds[0].granularity': the rule keeps no granularity '300s' (it keeps "
            "hour, minute)",
        ),
        (
            "[{above: 1, granularity: -5}]",
            "field 'thresholds[0].granularity': granularity must be minute, hour, day or a "
            "positive whole number of seconds, got the number -5",
        ),
    ],
)
def test_a_threshold_granularity_the_rule_does_not_keep_is_one_line(
    tmp_path: Path, thresholds: str, message: str
) -> None:
    with pytest.raises(RuleError) as info:
        _rules(tmp_path, WINDOWED.format(thresholds=thresholds))
    assert str(info.value) == f"{tmp_path / 'rules.yaml'}: rule 'r', {message}"


def test_a_threshold_name_may_have_64_characters_and_a_rule_name_100(tmp_path: Path) -> None:
    name = "t" * 64
    rule = _rules(tmp_path, f"version: 1\nrules:\n  - {{name: r, key: k, thresholds: "
                  f"[{{above: 1, name: {name}}}]}}\n").get("r")  # fmt: skip
    assert rule.thresholds[0].name == name
    with pytest.raises(RuleError) as info:
        _rules(tmp_path, f"version: 1\nrules:\n  - {{name: {'r' * 101}, key: k}}\n")
    assert str(info.value).endswith("is not a rule name: start with a letter, then letters, "
                                    "digits, '_', '.' or '-', at most 100 characters")  # fmt: skip


@pytest.mark.parametrize(
    ("line", "text"),
    [
        # more digits than Python's default decimal context keeps (28): not rounded
        ("1234567890123456789012345678.5", "1234567890123456789012345678.5"),
        ("12345678901234567890123456789012345678", "12345678901234567890123456789012345678"),
        ("0.12345678901234567890123456789012345678", "0.12345678901234567890123456789012345678"),
        ("1000", "1000"),
        ("1E+3", "1000"),
        ("2.50", "2.5"),
        ("-0", "0"),
        ("-7.25", "-7.25"),
        ("1E-130", "0." + "0" * 129 + "1"),
    ],
)
def test_a_line_is_shown_exactly(tmp_path: Path, line: str, text: str) -> None:
    """The default name and the condition carry the line as written, without exponent or
    trailing zeros, never rounded; the comparison is exact at the line."""
    from aggregator.core.numbers import subtract
    from aggregator.core.rules.thresholds import Threshold

    default = len(f"above-{text}") <= 64  # a longer default name is refused (above)
    rule = _rules(
        tmp_path,
        f"version: 1\nrules:\n  - {{name: r, key: k, thresholds: [{{above: {line}"
        f"{'' if default else ', name: a'}}}, {{below: '{line}', name: b}}]}}\n",
    ).get("r")
    above, below = rule.thresholds
    assert (above.condition, below.condition) == (f"above {text}", f"below {text}")
    exact = Decimal(line)
    assert above.line == exact and above.holds(exact) and not below.holds(exact)
    # one unit of the line's last digit below it, in DynamoDB's 38 digits
    under = subtract(exact, Decimal(f"1E{exact.as_tuple().exponent}"))
    assert not above.holds(under) and below.holds(under)
    if default:
        assert above.name == f"above-{text}"
        assert Threshold(below=exact).name == f"below-{text}"  # from Python too


def test_a_misspelt_target_field_gets_the_targets_names(tmp_path: Path) -> None:
    text = (
        "version: 1\nrules:\n  - {name: r, target: {partition_key: '{a}', atribute: n, "
        "partition: x}}\n"
    )
    with pytest.raises(RuleError) as info:
        _rules(tmp_path, text)
    lines = str(info.value).splitlines()
    assert any(
        line.endswith("field 'target.partition': unknown field; did you mean 'partition_key'?")
        for line in lines
    ), lines
    assert any(
        line.endswith("field 'target.atribute': unknown field; did you mean 'attribute'?")
        for line in lines
    ), lines


def test_numbers_and_booleans_in_keys_are_their_key_texts(tmp_path: Path) -> None:
    """``keys: [1, 2.50, true]`` watches the keys a ``{post}`` key renders for those values
    (``"1"``, ``"2.5"``, ``"true"``); a key given as text stays that text."""
    text = (
        "version: 1\nrules:\n  - {name: r, key: '{post}', "
        "thresholds: [{above: 5, keys: [1, 2.50, true, '7.0']}]}\n"
    )
    rule = _rules(tmp_path, text).get("r")
    (threshold,) = rule.thresholds
    assert threshold.keys == ("1", "2.5", "true", "7.0")
    for post in (Decimal(1), Decimal("2.50"), True):
        _, display = rule.key.render({"post": post})
        assert threshold.applies_to(display)
    _, seven = rule.key.render({"post": Decimal("7.0")})
    assert seven == "7" and not threshold.applies_to(seven)
    # from Python too (ints; floats as their shortest text, as a delta takes them)
    from aggregator.core.rules.thresholds import Threshold

    assert Threshold(above=1, keys=[3, 0.5, "x"]).keys == ("3", "0.5", "x")


def test_thresholds_need_a_sum(tmp_path: Path) -> None:
    text = (
        "version: 1\nrules:\n  - {name: r, key: k, kind: mean, delta: {attribute: x}, "
        "thresholds: [{above: 1}]}\n"
    )
    with pytest.raises(RuleError, match="thresholds need kind sum"):
        _rules(tmp_path, text)


def test_a_write_across_the_line_crosses_once_per_threshold(tmp_path: Path) -> None:
    rules = _rules(tmp_path)
    thresholded = {r.name: r for r in rules if r.thresholds}
    up = _aggregate("MODIFY", "likes#p1", 9, 11)
    crossings, expired = record_crossings(thresholded, DEFAULT_LAYOUT, up, now=0)
    assert not expired
    assert [(c.threshold, c.entered, c.old_value, c.new_value) for c in crossings] == [
        ("popular", True, Decimal(9), Decimal(11))
    ]
    (c,) = crossings
    assert (c.rule, c.storage_name, c.key, c.sequence_number) == (
        "likes",
        "likes",
        "p1",
        "42".zfill(21),
    )
    # down through both lines at once: popular left, below-2.5 entered
    down = _aggregate("MODIFY", "likes@2#p1", 11, 2)
    crossings, _ = record_crossings(thresholded, DEFAULT_LAYOUT, down, now=0)
    assert [(c.threshold, c.entered, c.storage_name) for c in crossings] == [
        ("popular", False, "likes@2"),
        ("below-2.5", True, "likes@2"),
    ]
    # no crossing: moves on one side, an unchanged value, a REMOVE, another rule, another key
    for record in (
        _aggregate("MODIFY", "likes#p1", 3, 9),
        _aggregate("MODIFY", "likes#p1", 11, 11),
        _aggregate("REMOVE", "likes#p1", 11, None),
        _aggregate("MODIFY", "plain#p1", 0, 100),
    ):
        assert record_crossings(thresholded, DEFAULT_LAYOUT, record, now=0) == ([], False)
    # an INSERT has no old value: it enters what its new value meets and leaves nothing (a 0
    # before it would have "left below-2.5", a condition never entered)
    crossings, _ = record_crossings(
        thresholded, DEFAULT_LAYOUT, _aggregate("INSERT", "likes#p1", None, 12), now=0
    )
    assert [(c.threshold, c.entered, c.old_value) for c in crossings] == [
        ("popular", True, None),  # no old value: the first write
    ]
    crossings, _ = record_crossings(
        thresholded, DEFAULT_LAYOUT, _aggregate("INSERT", "likes#p1", None, 2), now=0
    )
    assert [(c.threshold, c.entered) for c in crossings] == [("below-2.5", True)]


def test_a_time_bucket_crosses_with_its_bucket_unless_expired(tmp_path: Path) -> None:
    thresholded = {r.name: r for r in _rules(tmp_path) if r.thresholds}
    record = _aggregate(
        "MODIFY",
        "hourly#p1#hour#2026-11-28T07:00:00Z",
        2,
        3,
        granularity="hour",
        bucket="2026-11-28T07:00:00Z",
        ttl=1000,
    )
    (c,), expired = record_crossings(thresholded, DEFAULT_LAYOUT, record, now=999)
    assert not expired and (c.granularity, c.bucket, c.threshold) == (
        "hour",
        "2026-11-28T07:00:00Z",
        "above-3",
    )
    assert record_crossings(thresholded, DEFAULT_LAYOUT, record, now=1000) == ([], True)


def test_a_threshold_with_a_granularity_is_crossed_by_its_buckets_only(tmp_path: Path) -> None:
    """``granularity: hour`` on a rule that keeps hour and minute buckets: an hour bucket
    crosses it, a minute bucket does not; a threshold without one is crossed by both."""
    rules = _rules(
        tmp_path,
        "version: 1\nrules:\n  - name: likes\n    key: '{post}'\n"
        "    window: {time: at, unit: epoch_seconds, granularities: [minute, hour]}\n"
        "    thresholds:\n      - {name: hot_hour, above: 100, granularity: hour}\n"
        "      - {above: 100, granularity: 60}\n"  # seconds: minute's label
        "      - {name: hot, above: 100}\n",
    )
    likes = rules.get("likes")
    assert [(t.name, t.granularity) for t in likes.thresholds] == [
        ("hot_hour", "hour"),
        ("above-100-per-minute", "minute"),  # the default name says which buckets
        ("hot", None),
    ]
    thresholded = {"likes": likes}

    def crossed(granularity: str, start: str) -> list[tuple[str, str | None]]:
        record = _aggregate(
            "MODIFY",
            f"likes#p1#{granularity}#{start}",
            99,
            100,
            granularity=granularity,
            bucket=start,
        )
        crossings, expired = record_crossings(thresholded, DEFAULT_LAYOUT, record, now=0)
        assert not expired
        return [(c.threshold, c.granularity) for c in crossings]

    assert crossed("hour", "2026-11-28T07:00:00Z") == [("hot_hour", "hour"), ("hot", "hour")]
    assert crossed("minute", "2026-11-28T07:05:00Z") == [
        ("above-100-per-minute", "minute"),
        ("hot", "minute"),
    ]


def test_the_first_write_enters_what_its_value_meets_even_zero(tmp_path: Path) -> None:
    """An aggregate's INSERT has no old value (``old_value`` None), also when its value is 0
    (a key whose batch deltas summed to zero, written with its checkpoint): ``below 2.5``
    entered then, so the later rise to 11 leaves it (entered first, then left)."""
    thresholded = {r.name: r for r in _rules(tmp_path) if r.thresholds}
    first, _ = record_crossings(
        thresholded, DEFAULT_LAYOUT, _aggregate("INSERT", "likes#p1", None, 0), now=0
    )
    assert [(c.threshold, c.entered, c.old_value, c.new_value) for c in first] == [
        ("below-2.5", True, None, Decimal(0))
    ]
    then, _ = record_crossings(
        thresholded, DEFAULT_LAYOUT, _aggregate("MODIFY", "likes#p1", 0, 11), now=0
    )
    assert [(c.threshold, c.entered, c.old_value) for c in then] == [
        ("popular", True, Decimal(0)),
        ("below-2.5", False, Decimal(0)),
    ]


def test_the_event_detail_of_a_first_write_has_a_null_old_value(tmp_path: Path) -> None:
    import json

    from aggregator.runtime.threshold_events import event_detail

    thresholded = {r.name: r for r in _rules(tmp_path) if r.thresholds}
    (first,), _ = record_crossings(
        thresholded, DEFAULT_LAYOUT, _aggregate("INSERT", "likes#p1", None, 12), now=0
    )
    (later,), _ = record_crossings(
        thresholded, DEFAULT_LAYOUT, _aggregate("MODIFY", "likes#p1", 9, 12), now=0
    )
    entry = ThresholdEvents(_Events(set()), "t").entry(first)  # type: ignore[arg-type]
    detail = json.loads(entry["Detail"])
    assert (detail["old_value"], detail["new_value"], detail["entered"]) == (None, "12", True)
    assert '"old_value":null' in entry["Detail"]
    assert (event_detail("t", later)["old_value"], event_detail("t", later)["new_value"]) == (
        "9",
        "12",
    )


def test_run_prints_a_first_write_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run`` without ``--event-bus`` prints each event: the first write as ``(first write)``,
    another with its old value."""
    import rich.console

    import aggregator.cli.commands.run as run_command

    thresholded = {r.name: r for r in _rules(tmp_path) if r.thresholds}
    crossings = [
        record_crossings(thresholded, DEFAULT_LAYOUT, record, now=0)[0][0]
        for record in (
            _aggregate("INSERT", "likes#p1", None, 12),
            _aggregate("MODIFY", "likes#p1", 12, 2),
        )
    ]
    printed = run_command._PrintedEvents()
    monkeypatch.setattr(run_command, "console", rich.console.Console(width=300))
    ThresholdEvents(printed, "t").send(crossings)  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    ids = [event_id("t", c) for c in crossings]
    assert lines == [
        f"event: likes p1 entered popular (above 10): (first write) -> 12, id {ids[0]}",
        f"event: likes p1 left popular (above 10): 12 -> 2, id {ids[1]}",
    ]


def test_event_ids_are_stable_and_distinct(tmp_path: Path) -> None:
    thresholded = {r.name: r for r in _rules(tmp_path) if r.thresholds}
    down = _aggregate("MODIFY", "likes#p1", 11, 2)
    first, _ = record_crossings(thresholded, DEFAULT_LAYOUT, down, now=0)
    again, _ = record_crossings(thresholded, DEFAULT_LAYOUT, down, now=0)
    ids = [event_id("t", c) for c in first]
    assert ids == [event_id("t", c) for c in again]  # another delivery of the record
    assert len(set(ids)) == 2 and all(len(i) == 32 for i in ids)
    assert event_id("other-table", first[0]) != ids[0]


class _Events:
    """Answers put_events as EventBridge does: per entry, an id or an error."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse, self.entries = refuse, []  # type: list[dict[str, Any]]

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        answers = []
        for entry in Entries:
            self.entries.append(entry)
            n = len(self.entries)
            answers.append(
                {"ErrorCode": "InternalFailure", "ErrorMessage": "x"}
                if n in self.refuse
                else {"EventId": str(n)}
            )
        return {"FailedEntryCount": sum("ErrorCode" in a for a in answers), "Entries": answers}


def test_send_stops_at_the_first_refused_entry_and_names_its_record(tmp_path: Path) -> None:
    thresholded = {r.name: r for r in _rules(tmp_path) if r.thresholds}
    crossings = []
    for seq in range(1, 13):  # 12 crossings: two requests of at most 10
        record = StreamRecord(
            stream_record(
                "MODIFY",
                {"pk": "AGGREGATES", "sk": "likes#p1", "value": 9, "key": "p1"},
                {"pk": "AGGREGATES", "sk": "likes#p1", "value": 11, "key": "p1"},
                seq=seq,
            )
        )
        crossings += record_crossings(thresholded, DEFAULT_LAYOUT, record, now=0)[0]
    events = _Events(refuse={11})
    result = ThresholdEvents(events, "t", "alerts").send(crossings)  # type: ignore[arg-type]
    assert (result.sent, result.requests, result.failed_from) == (10, 2, "11".zfill(21))
    assert "InternalFailure" in result.errors[0]
    assert {e["EventBusName"] for e in events.entries} == {"alerts"}
    assert ThresholdEvents(_Events(set()), "t").send(crossings).failed_from is None  # type: ignore[arg-type]


def test_the_filters_let_the_thresholded_aggregates_through(tmp_path: Path) -> None:
    patterns = filter_patterns(_rules(tmp_path))
    prefixes = [p["prefix"] for p in patterns[1]["dynamodb"]["Keys"]["sk"]["S"]]
    assert set(prefixes) == {"likes#", "likes@", "hourly#", "hourly@"}
    # a threshold's granularity changes no filter: the rule's aggregates' records all come in
    # (the sort key's granularity follows the key, which no prefix can skip)
    hour_only = tmp_path / "hour-only"
    hour_only.mkdir()
    text = RULES.replace("thresholds: [{above: 3}]", "thresholds: [{above: 3, granularity: hour}]")
    assert "granularity: hour}" in text
    assert filter_patterns(_rules(hour_only, text)) == patterns
    # the template's FilterCriteria region, which the CDK construct reads too
    assert (
        render_regions(_rules(hour_only, text))["filters"]
        == (render_regions(_rules(tmp_path))["filters"])
    )


def test_the_role_may_put_events_on_the_named_bus_only(tmp_path: Path) -> None:
    regions = render_regions(_rules(tmp_path))
    (policy,) = [
        p for p in regions["target-policy"] if p["PolicyName"] == THRESHOLD_EVENTS_POLICY_NAME
    ]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Sid": "ThresholdEvents",
            "Effect": "Allow",
            "Action": "events:PutEvents",
            "Resource": EVENT_BUS_ARN,
        }
    ]
    assert "${ThresholdEventBus}" in EVENT_BUS_ARN["Fn::Sub"]
    # the backfill function's role does not send: its writes cross in the stream function
    names = [p["PolicyName"] for p in regions["backfill-policies"]]
    assert THRESHOLD_EVENTS_POLICY_NAME not in names
    plain = tmp_path / "plain"
    plain.mkdir()
    rules = _rules(plain, "version: 1\nrules:\n  - {name: r, key: k}\n")
    assert not render_regions(rules)["target-policy"]

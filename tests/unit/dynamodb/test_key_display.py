"""KeyTemplate.split_display (a key's display text back to its placeholder values, never
guessing) and AggregateStore taking the key as displayed (stub client, no DynamoDB)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregator.core.exceptions import QueryError
from aggregator.core.rules import KeyTemplate, RuleSet, rule
from aggregator.dynamodb.query import AggregateStore

# -- split_display ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "text", "values"),
    [
        ("{origin}#{dest}", "JFK#LAX", ["JFK", "LAX"]),
        ("{pk}", "PLAYER#bob", ["PLAYER#bob"]),  # one placeholder: the text is the value
        ("{pk}", "", [""]),
        ("P#{pk}", "P#bob", ["bob"]),
        ("P#{pk}", "P#P#bob", ["P#bob"]),  # affixes fixed: a '#' in the one value is fine
        ("{a}#to#{b}!", "x#to#y!", ["x", "y"]),
        ("{a}#{b}#{c}", "1#2.5#true", ["1", "2.5", "true"]),
        ("{origin}#{dest}", "#LAX", ["", "LAX"]),  # empty values are values
        ("{origin}#{dest}", "#", ["", ""]),
        ("{origin}#{dest}", "J%FK#L%23AX", ["J%FK", "L%23AX"]),  # display text is raw
        ("{a}##{b}", "x##y", ["x", "y"]),
        ("TOTAL", "TOTAL", []),
    ],
)
def test_split_display(template, text, values):
    key = KeyTemplate.parse(template)
    assert key.split_display(text) == values
    assert key.render_values(values)[1] == text


@pytest.mark.parametrize(
    ("template", "text", "message"),
    [
        (
            "{origin}#{dest}",
            "JFK",
            "key text 'JFK' does not fit key '{origin}#{dest}': no '#' between origin and dest",
        ),
        (
            "{a}#{b}#{c}",
            "x#y",
            "key text 'x#y' does not fit key '{a}#{b}#{c}': no '#' between b and c",
        ),
        ("P#{pk}", "bob", "key text 'bob' does not fit key 'P#{pk}': it does not start with 'P#'"),
        ("{a}#{b}!", "x#y", "key text 'x#y' does not fit key '{a}#{b}!': it does not end with '!'"),
        (
            "A#{x}#A",
            "A#A",
            "key text 'A#A' does not fit key 'A#{x}#A': it is shorter than the key's literal text",
        ),
        ("TOTAL", "TOTAL#1", "key text 'TOTAL#1' is not the literal key 'TOTAL'"),
    ],
)
def test_split_display_names_what_does_not_fit(template, text, message):
    with pytest.raises(ValueError) as caught:
        KeyTemplate.parse(template).split_display(text)
    assert str(caught.value) == message


def test_split_display_refuses_to_guess_when_a_value_holds_the_separator():
    key = KeyTemplate.parse("{origin}#{dest}")
    with pytest.raises(ValueError) as caught:
        key.split_display("A#B#C")
    assert str(caught.value) == (
        "key text 'A#B#C' fits key '{origin}#{dest}' in more than one way (origin='A', "
        "dest='B#C' or origin='A#B', dest='C'): a value contains '#'; give the 2 values "
        "separately"
    )
    # values with the separator round-trip only as values: both readings render to the text
    assert key.render_values(["A", "B#C"])[1] == key.render_values(["A#B", "C"])[1] == "A#B#C"


@pytest.mark.parametrize(
    ("template", "text", "separator"),
    [
        ("{a}#{b}-#{c}", "x#y-#z-#w", "a value contains '#'"),
        ("{a}-#{b}#{c}", "x-#y-#z#w", "a value contains '-#'"),
        ("{a}##{b}", "x###y", "a value contains part of '##'"),  # a='x', b='#y' or a='x#', b='y'
    ],
)
def test_ambiguity_names_the_separator_the_readings_place_differently(template, text, separator):
    with pytest.raises(ValueError) as caught:
        KeyTemplate.parse(template).split_display(text)
    assert "in more than one way" in str(caught.value)
    assert f"): {separator}; give the" in str(caught.value)


def test_split_display_messages_are_one_bounded_line():
    key = KeyTemplate.parse("{a}#{b}")
    text = "x\n" * 500 + "#" + "y#" * 500
    with pytest.raises(ValueError) as caught:
        key.split_display(text)
    message = str(caught.value)
    assert "\n" not in message
    assert len(message) < 500
    assert "(2001 chars)" in message


def _all_readings(template: KeyTemplate, text: str) -> list[list[str]]:
    """Every list of values whose display text is ``text`` (brute force, small texts)."""
    head, *separators, tail = template.literals
    if not (text.startswith(head) and text.endswith(tail) and len(text) >= len(head + tail)):
        return []
    body = text[len(head) : len(text) - len(tail)]
    out = []
    for cuts in itertools.combinations_with_replacement(range(len(body) + 1), 2 * len(separators)):
        bounds = [0, *cuts, len(body)]
        pieces = [body[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        values, seps = pieces[0::2], pieces[1::2]
        if seps == separators:
            out.append(values)
    return out


@pytest.mark.parametrize("template", ["{a}#{b}", "{a}#{b}#{c}", "x{a}##{b}#", "{a}#-#{b}"])
def test_split_display_agrees_with_brute_force(template):
    key = KeyTemplate.parse(template)
    for length in range(7):
        for chars in itertools.product("a#-", repeat=length):
            text = "".join(chars)
            readings = _all_readings(key, text)
            if len(readings) == 1:
                assert key.split_display(text) == readings[0], text
                continue
            with pytest.raises(ValueError) as caught:
                key.split_display(text)
            verdict = "in more than one way" if readings else "does not fit"
            assert verdict in str(caught.value), (text, readings)


@given(
    template=st.sampled_from(["{a}#{b}", "{a}#{b}#{c}", "K#{a}#to#{b}!", "{a}##{b}"]),
    data=st.data(),
)
def test_split_display_returns_the_values_rendered_or_refuses(template, data):
    key = KeyTemplate.parse(template)
    values = data.draw(
        st.lists(
            st.text(alphabet="ab#%!-", max_size=6),
            min_size=len(key.placeholders),
            max_size=len(key.placeholders),
        )
    )
    _, display = key.render_values(values)
    try:
        split = key.split_display(display)
    except ValueError as exc:
        assert "in more than one way" in str(exc)
        assert any("#" in v for v in values)  # only a value holding a separator makes it so
    else:
        assert split == values


# -- AggregateStore: the key as displayed -------------------------------------------------------

RULES = RuleSet.of(
    rule("route", key="{origin}#{dest}"),
    rule("per_player", key="{pk}"),
    rule("total", key="TOTAL"),
    rule(
        "route_by_hour",
        key="{origin}#{dest}",
        window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]},
    ),
)


class GetStub:
    """Answers GetItem (value 1 for every key) and Query (no items), recording the requests;
    the rule manifest (read for the serving generations) is empty and its reads are counted
    apart."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.manifest_reads = 0

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        if kwargs["Key"]["sk"]["S"] == "manifest":
            self.manifest_reads += 1
            return {}
        self.requests.append(kwargs)
        return {"Item": {**kwargs["Key"], "value": {"N": "1"}}}

    def query(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        return {"Items": []}


@pytest.mark.parametrize(
    ("rule_name", "key", "sort_key"),
    [
        ("route", "JFK#LAX", "route#JFK#LAX"),
        ("route", ["JFK", "LAX"], "route#JFK#LAX"),
        ("route", {"origin": "A", "dest": "1#50%"}, "route#A#1%2350%25"),
        ("route", ["A#1", "50%"], "route#A%231#50%25"),
        ("per_player", "PLAYER#bob", "per_player#PLAYER%23bob"),
        ("per_player", ["PLAYER#bob"], "per_player#PLAYER%23bob"),
        ("total", "TOTAL", "total#TOTAL"),
        ("total", (), "total#TOTAL"),
    ],
)
def test_get_takes_the_key_as_displayed_or_its_values(rule_name, key, sort_key):
    client = GetStub()
    aggregate = AggregateStore(client, "t", RULES).get(rule_name, key)
    assert client.requests[0]["Key"]["sk"] == {"S": sort_key}
    assert aggregate is not None and aggregate.sort_key == sort_key


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("A#1#50%", r"^rule 'route': key text 'A#1#50%' fits key .* in more than one way"),
        ("JFK", r"^rule 'route': key text 'JFK' does not fit key '\{origin\}#\{dest\}'"),
        (["JFK"], r"takes 2 value\(s\)"),
    ],
)
def test_get_refuses_key_text_that_does_not_split_in_one_way(key, message):
    client = GetStub()
    with pytest.raises(QueryError, match=message):
        AggregateStore(client, "t", RULES).get("route", key)
    assert client.requests == []  # nothing is read for a key that is not one


@pytest.mark.parametrize("key", ["all", "TOTALS", ["x", "y"]])
def test_a_fixed_key_takes_no_other(key):
    client = GetStub()
    with pytest.raises(QueryError) as refused:
        AggregateStore(client, "t", RULES).get("total", key)
    assert str(refused.value).startswith(
        "rule 'total' has one aggregate, under the fixed key 'TOTAL': give no key (or 'TOTAL')"
    )
    assert client.requests == []


def test_window_takes_the_key_as_displayed():
    client = GetStub()
    result = AggregateStore(client, "t", RULES).window(
        "route_by_hour", "JFK#LAX", start=0, end=7200, now=0
    )
    assert result.key == "JFK#LAX"
    low = client.requests[0]["ExpressionAttributeValues"][":low"]["S"]
    assert low == "route_by_hour#JFK#LAX#hour#1970-01-01T00:00:00Z"

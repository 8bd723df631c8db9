"""RuleLoader: YAML 1.2 core-schema scalars, exact Decimal numbers, unique mapping keys."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml

from aggregator.core.rules import RuleLoader


def load(text: str):
    return yaml.load(text, Loader=RuleLoader)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # booleans: only the YAML 1.2 core spellings
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("False", False),
        ("FALSE", False),
        ("yes", "yes"),
        ("No", "No"),
        ("NO", "NO"),
        ("on", "on"),
        ("off", "off"),
        ("y", "y"),
        ("'true'", "true"),
        # integers: decimal digits only, exact, never octal, hex or sexagesimal
        ("1", Decimal(1)),
        ("-17", Decimal(-17)),
        ("+5", Decimal(5)),
        ("0123", Decimal(123)),
        (
            "123456789012345678901234567890123456789",
            Decimal("123456789012345678901234567890123456789"),
        ),
        ("0o17", "0o17"),
        ("0x1F", "0x1F"),
        ("1_000", "1_000"),
        ("12:30", "12:30"),
        ("190:20:30", "190:20:30"),
        # floats: exact Decimal from the text
        ("1.2345678901234567890123", Decimal("1.2345678901234567890123")),
        ("0.10000000000000000001", Decimal("0.10000000000000000001")),
        ("1.50", Decimal("1.50")),
        ("-.5", Decimal("-0.5")),
        ("1e3", Decimal("1E+3")),
        ("6.02E+23", Decimal("6.02E+23")),
        ("'1.5'", "1.5"),
        # timestamps stay strings; null as in the core schema
        ("2024-01-01", "2024-01-01"),
        ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
        ("~", None),
        ("null", None),
        ("", None),
    ],
)
def test_core_schema_scalars(text, value):
    loaded = load(f"v: {text}")["v"]
    assert loaded == value
    assert type(loaded) is type(value)


def test_infinity_and_nan_become_decimal_for_validation_to_reject():
    data = load("a: .inf\nb: -.Inf\nc: .NaN")
    assert data["a"] == Decimal("Infinity")
    assert data["b"] == Decimal("-Infinity")
    assert data["c"].is_nan()


def test_safe_loader_itself_is_unchanged():
    assert yaml.safe_load("v: yes") == {"v": True}


def test_explicit_int_tag_that_is_not_decimal_is_an_error():
    with pytest.raises(yaml.YAMLError) as info:
        load("v: !!int 0x1F")
    assert info.value.problem == "'0x1F' is not a decimal number"


def test_merge_keys_still_work_and_explicit_keys_win():
    data = load(
        """
        base: &base {status: departed, carrier: UA}
        rule:
          <<: *base
          carrier: AA
        """
    )
    assert data["rule"] == {"status": "departed", "carrier": "AA"}


def test_nested_merges_are_not_mistaken_for_duplicates():
    data = load(
        """
        deep:
          - inner: &b {<<: {x: 1}, x: 2}
        top: {<<: *b, y: 3}
        again: [*b]
        """
    )
    assert data["top"] == {"x": Decimal(2), "y": Decimal(3)}


@pytest.mark.parametrize(
    ("text", "line", "column", "problem"),
    [
        ("a: 1\nb: 2\na: 3", 3, 1, "duplicate key 'a' (also on line 1)"),
        ("r:\n  m: {status: x, status: y}", 2, 18, "duplicate key 'status' (also on line 2)"),
        ("- {k: 1}\n- k: 1\n  'k': 2", 3, 3, "duplicate key 'k' (also on line 2)"),
        ("1: a\n1.0: b", 2, 1, "duplicate key '1.0' (also on line 1)"),
        (
            "a: {<<: {x: 1},\n  <<: {y: 2}}",
            2,
            3,
            "duplicate key '<<' (also on line 1); merge several mappings with one '<<: [*a, *b]'",
        ),
    ],
)
def test_duplicate_keys_are_errors(text, line, column, problem):
    with pytest.raises(yaml.YAMLError) as info:
        load(text)
    mark = info.value.problem_mark
    assert (mark.line + 1, mark.column + 1, info.value.problem) == (line, column, problem)

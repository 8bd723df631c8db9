"""Rule loading: YAML and Python give the same RuleSet; malformed files give exact messages."""

from __future__ import annotations

import re
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import aggregator.core.rules.keys
from aggregator.cli import main
from aggregator.core.conditions import dynamodb_number_problem, parse_match
from aggregator.core.exceptions import RuleError
from aggregator.core.rules import KeyTemplate, RuleSet, load_rules, rule

ROOT = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_yaml_and_python_give_the_same_ruleset(tmp_path):
    path = write(
        tmp_path,
        """
        version: 1
        rules:
          - name: delay_by_carrier
            match: {status: departed, dep_delay: {numeric: [">", 0]}}
            key: "{carrier}"
            delta: {attribute: dep_delay}
            leaderboard: true
          - name: total
            key: TOTAL
            delta: "2.5"
            ttl_deletes: retract
        """,
    )
    from_python = RuleSet.of(
        rule(
            "delay_by_carrier",
            match={"status": "departed", "dep_delay": {"numeric": [">", 0]}},
            key="{carrier}",
            delta={"attribute": "dep_delay"},
            leaderboard=True,
        ),
        rule("total", key="TOTAL", delta=Decimal("2.5"), ttl_deletes="retract"),
    )
    assert load_rules(path) == from_python
    assert load_rules(path).get("total").delta.constant == Decimal("2.5")


def test_directory_loads_every_yaml_file_in_name_order(tmp_path):
    write(tmp_path, "rules: [{name: b_rule, key: B}]", "b.yaml")
    write(tmp_path, "rules: [{name: a_rule, key: A}]", "a.yml")
    (tmp_path / "notes.txt").write_text("not rules")
    assert [r.name for r in load_rules(tmp_path)] == ["a_rule", "b_rule"]


def test_shipped_definitions_are_valid():
    names = [r.name for r in load_rules(ROOT / "definitions")]
    assert "flights_by_carrier" in names and "paths_per_player" in names


MALFORMED = [
    (
        "unknown-operator",
        """
        rules:
          - name: r1
            match: {status: {startswith: dep}}
            key: "{carrier}"
        """,
        "{f}: rule 'r1', field 'match.status.startswith': unknown operator 'startswith'; "
        "use one of equals, in, anything-but, prefix, exists, numeric",
    ),
    (
        "numeric-odd-list",
        """
        rules:
          - name: r1
            match: {dep_delay: {numeric: [">", 0, "<"]}}
            key: "{carrier}"
        """,
        "{f}: rule 'r1', field 'match.dep_delay.numeric': 'numeric' needs pairs of operator "
        "and number, e.g. ['>', 0, '<=', 10]",
    ),
    (
        "numeric-bad-comparison",
        """
        rules:
          - name: r1
            match: {or: [{a: 1}, {b: {numeric: ["=>", 1]}}]}
            key: K
        """,
        "{f}: rule 'r1', field 'match.or[1].b.numeric[0]': unknown comparison '=>'; "
        "use one of = < <= > >=",
    ),
    (
        "missing-key",
        """
        rules:
          - name: r1
            match: {status: departed}
        """,
        "{f}: rule 'r1', field 'key': Field required",
    ),
    (
        "adjacent-placeholders",
        """
        rules:
          - name: r1
            key: "{origin}{dest}"
        """,
        "{f}: rule 'r1', field 'key': placeholders in key '{{origin}}{{dest}}' must be separated "
        "by '#' (e.g. '{{origin}}#{{dest}}') so that different items never share a key",
    ),
    (
        "placeholder-with-format-spec",
        """
        rules:
          - name: r1
            key: "{origin:>5}"
        """,
        "{f}: rule 'r1', field 'key': invalid placeholder {{origin}} in key '{{origin:>5}}': "
        "use a bare attribute name such as {{carrier}}",
    ),
    (
        "delta-not-a-number",
        """
        rules:
          - name: r1
            key: K
            delta: lots
        """,
        "{f}: rule 'r1', field 'delta': expected a number, got 'lots'; to aggregate the "
        "attribute lots, write delta: {{attribute: lots}}",
    ),
    (
        "delta-both-forms",
        """
        rules:
          - name: r1
            key: K
            delta: {attribute: x, constant: 1}
        """,
        "{f}: rule 'r1', field 'delta': give either a number (delta: 1) or {{attribute: NAME}}, "
        "not both",
    ),
    (
        "unknown-rule-field",
        """
        rules:
          - name: r1
            key: K
            filter: {a: 1}
        """,
        "{f}: rule 'r1', field 'filter': unknown field",
    ),
    (
        "misspelt-field",
        """
        rules:
          - name: r1
            key: K
            leaderbord: true
        """,
        "{f}: rule 'r1', field 'leaderbord': unknown field; did you mean 'leaderboard'?",
    ),
    (
        # a field of the rule inside its window: no "did you mean 'attribute'", and the window's
        # own fields are the ones suggested
        "rule-field-in-window",
        """
        rules:
          - name: r1
            key: K
            window: {time: ts, unit: epoch_seconds, granularities: [day], attribute: ts}
        """,
        "{f}: rule 'r1', field 'window.attribute': unknown field",
    ),
    (
        "misspelt-window-field",
        """
        rules:
          - name: r1
            key: K
            window: {time: ts, unit: epoch_seconds, granularities: [day], retentio: 7d}
        """,
        "{f}: rule 'r1', field 'window.retentio': unknown field; did you mean 'retention'?",
    ),
    (
        "bad-ttl-policy",
        """
        rules:
          - name: r1
            key: K
            ttl_deletes: ignore
        """,
        "{f}: rule 'r1', field 'ttl_deletes': Input should be 'keep' or 'retract'",
    ),
    (
        "bad-rule-name",
        """
        rules:
          - name: "has space"
            key: K
        """,
        "{f}: rule 'has space', field 'name': 'has space' is not a rule name: start with a "
        "letter, then letters, digits, '_', '.' or '-', at most 100 characters",
    ),
    (
        "unnamed-rule-uses-position",
        """
        rules:
          - key: K
          - name: ok
            key: K
        """,
        "{f}: rule #1, field 'name': Field required",
    ),
    (
        "duplicate-name",
        """
        rules:
          - {name: r1, key: A}
          - {name: r1, key: B}
        """,
        "{f}: rule 'r1', field 'name': duplicate rule name (also rule #1 in this file)",
    ),
    (
        "duplicate-yaml-key",
        """
        rules:
          - name: r1
            match: {status: departed}
            key: K
            match: {status: cancelled}
        """,
        "{f}: line 6, column 5: invalid YAML: duplicate key 'match' (also on line 4)",
    ),
    (
        "duplicate-yaml-key-in-match",
        """
        rules:
          - name: r1
            match: {status: departed, "status": cancelled}
            key: K
        """,
        "{f}: line 4, column 31: invalid YAML: duplicate key 'status' (also on line 4)",
    ),
    (
        "leaderboard-quoted-yes",
        """
        rules:
          - name: r1
            key: K
            leaderboard: "yes"
        """,
        "{f}: rule 'r1', field 'leaderboard': expected true or false, got text 'yes'",
    ),
    (
        "leaderboard-yaml11-yes",
        """
        rules:
          - name: r1
            key: K
            leaderboard: yes
        """,
        "{f}: rule 'r1', field 'leaderboard': expected true or false, got text 'yes'",
    ),
    (
        "delta-39-digits",
        """
        rules:
          - name: r1
            key: K
            delta: 1.23456789012345678901234567890123456789
        """,
        "{f}: rule 'r1', field 'delta': 39 significant digits; DynamoDB numbers have at most 38",
    ),
    (
        "delta-too-large",
        """
        rules:
          - name: r1
            key: K
            delta: -1E+126
        """,
        "{f}: rule 'r1', field 'delta': -1E+126 is too large for DynamoDB "
        "(largest magnitude 9.9999999999999999999999999999999999999E+125)",
    ),
    (
        "match-number-too-small",
        """
        rules:
          - name: r1
            match: {x: {numeric: [">", 9E-131]}}
            key: K
        """,
        "{f}: rule 'r1', field 'match.x.numeric[1]': 9E-131 is too small for DynamoDB "
        "(smallest nonzero magnitude 1E-130)",
    ),
    (
        "match-number-39-digits",
        """
        rules:
          - name: r1
            match: {x: [1, 123456789012345678901234567890123456789]}
            key: K
        """,
        "{f}: rule 'r1', field 'match.x[1]': 39 significant digits; "
        "DynamoDB numbers have at most 38",
    ),
    (
        "delta-infinite",
        """
        rules:
          - name: r1
            key: K
            delta: .inf
        """,
        "{f}: rule 'r1', field 'delta': expected a finite number, got Infinity",
    ),
    (
        "match-lone-backslash",
        """
        rules:
          - name: r1
            match: {'\\': 1}
            key: K
        """,
        "{f}: rule 'r1', field 'match.\\': a backslash must be followed by an attribute name",
    ),
    (
        "no-rules-list",
        """
        version: 1
        """,
        "{f}: field 'rules': Field required",
    ),
    (
        "yaml-syntax",
        """
        rules:
          - name: r1
            key: [unclosed
        """,
        "{f}: line 5, column 1: invalid YAML: expected ',' or ']', but got '<stream end>'",
    ),
    (
        "top-level-list",
        """
        - name: r1
          key: K
        """,
        "{f}: field '(top level)': expected a mapping with a 'rules' list, got list",
    ),
    (
        "empty-file",
        "",
        "{f}: field 'rules': the file is empty; expected 'rules: [...]'",
    ),
    (
        "exists-not-bool",
        """
        rules:
          - name: r1
            match: {tailnum: {exists: "yes"}}
            key: K
        """,
        "{f}: rule 'r1', field 'match.tailnum.exists': 'exists' needs true or false",
    ),
    (
        "bad-version",
        """
        version: 2
        rules: [{name: r1, key: K}]
        """,
        "{f}: field 'version': version 2 is not known; this release reads version 1",
    ),
]


@pytest.mark.parametrize(
    ("text", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_rule_file_message(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert str(info.value) == message.format(f=path)


def test_at_least_ten_malformed_cases():
    assert len(MALFORMED) >= 10


def test_duplicate_across_files_names_both(tmp_path):
    a = write(tmp_path, "rules: [{name: r1, key: A}]", "a.yaml")
    b = write(tmp_path, "rules: [{name: r1, key: B}]", "b.yaml")
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    assert (
        str(info.value)
        == f"{b}: rule 'r1', field 'name': duplicate rule name (also defined in {a})"
    )


def test_every_duplicate_name_in_a_file_is_reported(tmp_path):
    path = write(
        tmp_path,
        "rules: [{name: a, key: A}, {name: b, key: B}, {name: a, key: C}, {name: b, key: D}]",
    )
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert str(info.value).splitlines() == [
        f"{path}: rule 'a', field 'name': duplicate rule name (also rule #1 in this file)",
        f"{path}: rule 'b', field 'name': duplicate rule name (also rule #2 in this file)",
    ]


def test_python_duplicate_names_name_rule_and_field():
    with pytest.raises(RuleError) as info:
        RuleSet.of(rule("r1", key="A"), rule("r1", key="B"))
    assert str(info.value) == (
        "<python>: rule 'r1', field 'name': duplicate rule name (also rule #1 in this rule set)"
    )


def test_every_error_of_every_file_is_reported(tmp_path):
    write(tmp_path, "rules: [{name: r1, key: ''}, {name: r2, key: K, delta: x}]", "a.yaml")
    write(tmp_path, "rules: [{name: r3}]", "b.yaml")
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    lines = str(info.value).splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == [
        "rule 'r1', field 'key'",
        "rule 'r2', field 'delta'",
        "rule 'r3', field 'key'",
    ]


def test_missing_path():
    with pytest.raises(RuleError, match=r"^nope\.yaml: no such file or directory$"):
        load_rules("nope.yaml")


def test_python_rule_errors_name_rule_and_field():
    with pytest.raises(RuleError) as info:
        rule("r9", key="{a}{b}")
    assert str(info.value).startswith("<python>: rule 'r9', field 'key': placeholders in key")


def test_python_rule_leaderboard_must_be_a_bool():
    with pytest.raises(RuleError) as info:
        rule("r9", key="K", leaderboard="yes")  # type: ignore[arg-type]
    assert str(info.value) == (
        "<python>: rule 'r9', field 'leaderboard': expected true or false, got text 'yes'"
    )


def test_yaml_numbers_are_exact(tmp_path):
    path = write(
        tmp_path,
        """
        rules:
          - name: r1
            match: {x: 0.10000000000000000001, n: {numeric: ["<", 0.30000000000000000001]}}
            key: "{x}"
            delta: 1.2345678901234567890123
          - name: r2
            key: K
            delta: 12345678901234567890123
        """,
    )
    r1, r2 = load_rules(path)
    assert r1.delta.constant == Decimal("1.2345678901234567890123")
    assert r2.delta.constant == Decimal("12345678901234567890123")
    x = Decimal("0.10000000000000000001")
    assert r1.match.matches({"x": x, "n": Decimal("0.3")})
    assert not r1.match.matches({"x": Decimal("0.1"), "n": Decimal("0.3")})
    assert not r1.match.matches({"x": x, "n": Decimal("0.30000000000000000001")})
    assert r1.contributions({"x": x, "n": Decimal(0)}) == [
        (
            "0.10000000000000000001",
            "0.10000000000000000001",
            Decimal("1.2345678901234567890123"),
            None,
            Decimal(0),
            None,
        )
    ]


def test_yaml_1_1_booleans_octals_and_times_stay_strings(tmp_path):
    path = write(
        tmp_path,
        """
        rules:
          - name: r1
            match: {status: yes, flag: on, answer: NO, code: 0123, hex: 0x1F, at: 12:30,
                    day: 2024-01-01, ok: TRUE}
            key: K
        """,
    )
    cond = load_rules(path).get("r1").match
    image = {
        "status": "yes",
        "flag": "on",
        "answer": "NO",
        "code": Decimal(123),
        "hex": "0x1F",
        "at": "12:30",
        "day": "2024-01-01",
        "ok": True,
    }
    assert cond.matches(image)
    assert not cond.matches({**image, "status": True})
    assert not cond.matches({**image, "code": Decimal(83)})  # never octal


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-0.000",
        "1E-130",
        "-1E-130",
        "9.9999999999999999999999999999999999999E+125",
        "-9.9999999999999999999999999999999999999E+125",
        "12345678901234567890123456789012345678",
        "1" + "0" * 100,  # trailing zeros are not significant
        "0.000" + "1" * 38,  # nor are leading ones
    ],
)
def test_numbers_dynamodb_can_store_are_accepted(text):
    assert dynamodb_number_problem(Decimal(text)) is None
    if Decimal(text):
        assert rule("r1", key="K", delta=Decimal(text)).delta.constant == Decimal(text)
    else:  # storable, but a delta of 0 counts nothing
        with pytest.raises(RuleError, match=r"field 'delta': a delta of \S+ counts nothing"):
            rule("r1", key="K", delta=Decimal(text))
    assert parse_match({"x": {"numeric": [">=", Decimal(text)]}}).matches({"x": Decimal(text)})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1" * 39, "39 significant digits; DynamoDB numbers have at most 38"),
        ("-0.00" + "1" * 40, "40 significant digits; DynamoDB numbers have at most 38"),
        ("1E+126", "1E+126 is too large for DynamoDB"),
        ("-1E+126", "-1E+126 is too large for DynamoDB"),
        ("9.99E-131", "9.99E-131 is too small for DynamoDB"),
        ("-1E-131", "-1E-131 is too small for DynamoDB"),
    ],
)
def test_numbers_dynamodb_cannot_store_are_rejected(text, problem):
    assert (dynamodb_number_problem(Decimal(text)) or "").startswith(problem)
    with pytest.raises(
        RuleError, match="^<python>: rule 'r1', field 'delta': " + re.escape(problem)
    ):
        rule("r1", key="K", delta=Decimal(text))
    with pytest.raises(
        RuleError, match="^<python>: rule 'r1', field 'match.x': " + re.escape(problem)
    ):
        rule("r1", key="K", match={"x": Decimal(text)})


def test_38_digit_number_keys_do_not_collide():
    template = KeyTemplate.parse("{n}")
    a = template.render({"n": Decimal("12345678901234567890123456789012345678")})
    b = template.render({"n": Decimal("12345678901234567890123456789012345679")})
    assert a != b
    assert a == ("12345678901234567890123456789012345678",) * 2
    assert (
        template.render({"n": Decimal("1.2345678901234567890123456789012345670E+5")})
        == ("123456.7890123456789012345678901234567",) * 2
    )


def test_key_render_formats_each_value_once(monkeypatch):
    calls = []
    original = aggregator.core.rules.keys.format_key_value

    def counting(value):
        calls.append(value)
        return original(value)

    monkeypatch.setattr(aggregator.core.rules.keys, "format_key_value", counting)
    template = KeyTemplate.parse("{a}#{b}")
    assert template.render({"a": Decimal("1.50"), "b": True}) == ("1.5#true", "1.5#true")
    assert calls == [Decimal("1.50"), True]


def test_backslash_escapes_combinator_names_in_match(tmp_path):
    path = write(
        tmp_path,
        r"""
        rules:
          - name: r1
            match:
              '\not': {exists: true}
              \and: [x, y]
              "\\or": 1
              '\\dir': {prefix: C}
            key: K
        """,
    )
    cond = load_rules(path).get("r1").match
    assert cond.attributes() == {"not", "and", "or", "\\dir"}
    image = {"not": False, "and": "y", "or": Decimal(1), "\\dir": "C:"}
    assert cond.matches(image)
    assert not cond.matches({k: v for k, v in image.items() if k != "not"})
    assert not cond.matches({**image, "and": "z"})
    assert parse_match({"\\not": "x"}).matches({"not": "x"})
    assert parse_match({"not": {"n": 1}}).matches({"not": "x"})  # unescaped: the combinator


def test_match_language():
    D = Decimal
    cond = parse_match(
        {
            "status": "departed",
            "origin": ["JFK", "LGA"],
            "carrier": {"anything-but": ["HA"]},
            "sk": {"prefix": "F#"},
            "tailnum": {"exists": True},
            "gate": {"exists": False},
            "dep_delay": {"numeric": [">", 0, "<=", 60]},
            "or": [{"dest": "BOS"}, {"not": {"distance": {"numeric": ["<", 500]}}}],
        }
    )
    base = {
        "status": "departed",
        "origin": "JFK",
        "carrier": "UA",
        "sk": "F#1",
        "tailnum": "N1",
        "dep_delay": D(10),
        "dest": "BOS",
        "distance": D(100),
    }
    assert cond.matches(base)
    assert not cond.matches({**base, "origin": "EWR"})
    assert not cond.matches({**base, "carrier": "HA"})
    assert not cond.matches({k: v for k, v in base.items() if k != "carrier"})  # anything-but
    assert not cond.matches({**base, "sk": "G#1"})
    assert not cond.matches({k: v for k, v in base.items() if k != "tailnum"})
    assert not cond.matches({**base, "gate": "B1"})
    assert not cond.matches({**base, "dep_delay": D(61)})
    assert not cond.matches({**base, "dep_delay": "10"})  # wrong type: no match, no error
    assert cond.matches({**base, "dest": "LAX", "distance": D(900)})
    assert not cond.matches({**base, "dest": "LAX"})
    # numbers compare as numbers, booleans are not numbers, strings are not numbers
    assert parse_match({"n": 1}).matches({"n": D("1.0")})
    assert not parse_match({"n": 1}).matches({"n": True})
    assert not parse_match({"n": 1}).matches({"n": "1"})
    assert parse_match({"b": True}).matches({"b": True})


def test_validate_command_prints_summary(tmp_path):
    result = CliRunner().invoke(main, ["validate", str(ROOT / "definitions" / "flights.yaml")])
    assert result.exit_code == 0, result.output
    assert "12 rule(s) valid" in result.output
    assert "delay_minutes_by_carrier" in result.output


def test_validate_command_reports_errors_without_traceback(tmp_path):
    path = write(tmp_path, "rules: [{name: r1, key: K, delta: lots}]")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an uncaught RuleError
    assert f"{path}: rule 'r1', field 'delta': expected a number, got 'lots'" in result.output


def test_one_run_reports_every_problem_of_a_file_cross_rule_ones_too(tmp_path):
    """A rule that fails its own checks does not hide the derived-rule graph's problems."""
    path = tmp_path / "r.yaml"
    path.write_text(
        "rules:\n"
        "  - {name: a, key: '{value}', source: b}\n"
        "  - {name: b, key: '{value}', source: a}\n"
        "  - name: c\n"
        "    key: '{x}'\n"
        "    window: {time: t, unit: epoch_seconds, granularities: [hour]}\n"
        "    leaderboard_partitions: 2\n"
        "  - {name: d, key: '{x}', source: nope}\n"
        "  - {name: d, key: '{y}'}\n"
    )
    with pytest.raises(RuleError) as info:
        load_rules(path)
    lines = str(info.value).splitlines()
    assert [line.split(": ", 1)[1].split(":")[0] for line in lines] == [
        "rule 'c', field 'leaderboard_partitions'",
        "rule 'd', field 'name'",
        "rule 'a', field 'source'",
        "rule 'd', field 'source'",
    ]
    assert lines[2].endswith("derived rules form a cycle: a -> b -> a")
    assert "unknown source rule 'nope'" in lines[3]


def test_validate_shows_each_rules_thresholds(tmp_path, monkeypatch):
    """Names and conditions (keys when given: at most 5 named), after the other options, in the
    table and in --json; a key's [brackets] are shown, not read as markup."""
    path = tmp_path / "t.yaml"
    path.write_text(
        "version: 1\nrules:\n"
        "  - name: likes\n    key: '{post}'\n    thresholds:\n"
        "      - {name: popular, above: 1000}\n"
        "      - {name: quiet, below: 2, keys: [p1, '[b]']}\n"
        "  - name: hourly\n    key: '[bold]{post}'\n"
        "    window: {time: at, unit: epoch_seconds, granularities: [hour, minute], "
        "retention: 2h}\n"
        "    thresholds: [{above: 3.50, keys: [1, 2, 3, 4, 5, 6, 7]}, "
        "{name: hot, above: 9, granularity: hour, keys: [p1]}]\n"
        "  - {name: plain, key: '{post}', leaderboard: true}\n"
    )
    import rich.console

    import aggregator.cli.commands.rules as commands

    # wide enough for the rows whatever width the shared console took when it was first imported
    monkeypatch.setattr(commands, "console", rich.console.Console(soft_wrap=True, width=300))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    cells = {
        row[0]: row[1:]
        for line in result.stdout.splitlines()
        if line.startswith("│")
        for row in [[c.strip() for c in line.strip("│").split("│")]]
    }
    assert cells["likes"][-1] == "thresholds popular above 1000, quiet below 2 (keys p1, [b])"
    assert cells["hourly"][1] == "[bold]{post}"
    assert cells["hourly"][-1] == (
        "per hour+minute of at, kept 2h; thresholds above-3.5 above 3.5 (keys 1, 2, 3, 4, 5 "
        "and 2 more), hot above 9 per hour (keys p1)"
    )
    assert cells["plain"][-1] == "leaderboard"
    shown = CliRunner().invoke(main, ["validate", "--json", str(path)])
    import json

    rules = {r["name"]: r for r in json.loads(shown.stdout)["rules"]}
    assert rules["likes"]["thresholds"] == [
        {"name": "popular", "condition": "above 1000", "granularity": None, "keys": None},
        {"name": "quiet", "condition": "below 2", "granularity": None, "keys": ["p1", "[b]"]},
    ]
    assert rules["hourly"]["thresholds"] == [
        {
            "name": "above-3.5",
            "condition": "above 3.5",
            "granularity": None,
            "keys": [str(k) for k in range(1, 8)],
        },
        {"name": "hot", "condition": "above 9", "granularity": "hour", "keys": ["p1"]},
    ]
    assert rules["plain"]["thresholds"] == []


def test_validate_json_and_the_missing_version_note(tmp_path):
    versioned = tmp_path / "a.yaml"
    versioned.write_text("version: 1\nrules:\n  - {name: a, key: '{x}', leaderboard: true}\n")
    bare = tmp_path / "b.yaml"
    bare.write_text("rules:\n  - {name: b, key: TOTAL, delta: {attribute: amount}}\n")
    result = CliRunner().invoke(main, ["validate", "--json", str(versioned), str(bare)])
    assert result.exit_code == 0, result.output
    import json

    assert json.loads(result.stdout) == {
        "rules": [
            {
                "name": "a",
                "kind": "sum",
                "key": "{x}",
                "delta": "1",
                "reads": ["x"],
                "options": ["leaderboard"],
                "thresholds": [],
            },
            {
                "name": "b",
                "kind": "sum",
                "key": "TOTAL",
                "delta": "{amount}",
                "reads": ["amount"],
                "options": [],
                "thresholds": [],
            },
        ],
        "notes": [f"{bare}: no 'version:' field; version 1 is assumed (write 'version: 1' first)"],
    }
    shown = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert shown.exit_code == 0
    assert shown.stderr == (
        f"note: {bare}: no 'version:' field; version 1 is assumed (write 'version: 1' first)\n"
    )

"""Hardened rule-file loading: alias bombs, deep nesting, huge files, bytes that are not UTF-8,
control characters, values the rules accepted silently before (a delta of 0, odd key templates,
keys too long for DynamoDB, derived rules reading attributes their source lacks), one-line
messages that always name the file, and bounded quoting of item values in evaluation errors."""

from __future__ import annotations

import signal
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

import aggregator.core.rules.yaml_parser as yaml_parser
from aggregator.core import engine as engine_module
from aggregator.core.conditions import MAX_MATCH_DEPTH, ConditionSyntaxError, parse_match
from aggregator.core.exceptions import EvaluationError, RuleError
from aggregator.core.layout import TableLayout
from aggregator.core.rules import (
    MAX_RULE_FILE_BYTES,
    MAX_SORT_KEY_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    KeyTemplate,
    RuleLoader,
    RuleSet,
    derived_attribute_problems,
    format_key_value,
    load_rules,
    rule,
)
from aggregator.core.windows import Granularity, event_time_seconds, parse_duration, parse_instant

D = Decimal


class Overrun(BaseException):
    """Raised by :func:`deadline`; a BaseException so no ``except Exception`` swallows it."""


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (rather than hang for minutes) when the block overruns; main thread only."""

    def expire(signum, frame):
        raise Overrun(f"took more than {seconds} s")

    # pytest-timeout may have a timer running on the same signal: put it back afterwards
    previous = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


def write(tmp_path: Path, content: str | bytes, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(textwrap.dedent(content), encoding="utf-8")
    return path


def error_of(path: Path | list[Path]) -> str:
    with pytest.raises(RuleError) as info:
        load_rules(path)
    message = str(info.value)
    for line in message.split("\n"):
        assert line.splitlines() == [line], f"a problem spans lines: {line!r}"
    return message


def load(text: str):
    return yaml.load(text, Loader=RuleLoader)


# -- alias bombs -------------------------------------------------------------------------------


def laughs(levels: int, width: int, item: str = "[{a}]") -> list[str]:
    """Anchors ``a0 .. a<levels>``, each holding ``width`` aliases of the previous one."""
    lines = [f"a0: &a0 {item.format(a='x, ' * (width - 1) + 'x')}"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} " + item.format(a=", ".join([f"*a{i - 1}"] * width)))
    return lines


BOMBS = {
    "sequences": "\n".join(laughs(9, 10)) + "\nrules: [{name: r, key: K, description: *a9}]\n",
    "mappings": "\n".join(
        ["m0: &m0 {k0: x, k1: x, k2: x, k3: x, k4: x, k5: x}"]
        + [
            f"m{i}: &m{i} {{" + ", ".join(f"k{j}: *m{i - 1}" for j in range(6)) + "}"
            for i in range(1, 12)
        ]
    )
    + "\nrules: [{name: r, key: K}]\n",
    "merge-key lists": "\n".join(
        ["b0: &b0 {k: v}"]
        + [f"b{i}: &b{i} {{<<: [" + ", ".join([f"*b{i - 1}"] * 10) + "]}" for i in range(1, 12)]
    )
    + "\nrules: [{name: r, key: K}]\n",
    "merge and alias doubling": "\n".join(
        ["d0: &d0 {k: v}"] + [f"d{i}: &d{i} {{<<: *d{i - 1}, x: *d{i - 1}}}" for i in range(1, 60)]
    )
    + "\nrules: [{name: r, key: K}]\n",
    "a match of nested and": "\n".join(
        ["m0: &m0 {a: 1}"]
        + [f"m{i}: &m{i} {{and: [" + ", ".join([f"*m{i - 1}"] * 10) + "]}" for i in range(1, 10)]
    )
    + "\nrules: [{name: r, key: K, match: *m9}]\n",
    "aliases as keys": "\n".join(laughs(8, 10))
    + "\nrules: [{name: r, key: K, match: {? *a8 : 1}}]\n",
    "in a one-line flow document": "{a0: &a0 [x, x, x, x, x, x, x, x], "
    + ", ".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 8) + "]" for i in range(1, 9))
    + ", rules: [{name: r, key: K}]}\n",
}


@pytest.mark.parametrize("text", BOMBS.values(), ids=BOMBS.keys())
def test_alias_bombs_are_rejected_in_bounded_time_and_memory(tmp_path, text):
    path = write(tmp_path, text)
    assert path.stat().st_size < 2000
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with deadline(20):
            message = error_of(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 2
    assert peak < 50 * 1024 * 1024
    assert message.startswith(f"{path}: line ")
    assert (
        f"the document expands to more than {MAX_YAML_NODES} YAML nodes through aliases "
        "('&a'/'*a') or merge keys ('<<'); write the rules out instead"
    ) in message
    assert "\n" not in message


def test_anchors_aliases_and_merge_keys_still_work(tmp_path):
    path = write(
        tmp_path,
        """
        rules:
          - name: by_carrier
            match: &departed {status: departed, tailnum: {exists: true}}
            key: "{carrier}"
          - name: by_origin
            match: {<<: *departed, origin: [JFK, LGA]}
            key: "{origin}"
            window: &hourly {time: ts, unit: epoch_seconds, granularities: [hour]}
          - name: late
            match:
              <<: [{dep_delay: {numeric: [">", 0]}}, *departed]
            key: "{carrier}"
            window: {<<: *hourly, granularities: [day]}
        """,
    )
    departed = {"status": "departed", "tailnum": {"exists": True}}
    hourly = {"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]}
    assert load_rules(path) == RuleSet.of(
        rule("by_carrier", match=departed, key="{carrier}"),
        rule(
            "by_origin",
            match={**departed, "origin": ["JFK", "LGA"]},
            key="{origin}",
            window=hourly,
        ),
        rule(
            "late",
            match={**departed, "dep_delay": {"numeric": [">", 0]}},
            key="{carrier}",
            window={**hourly, "granularities": ["day"]},
        ),
    )


def test_node_limit_counts_every_alias_with_its_expansion(monkeypatch):
    monkeypatch.setattr(yaml_parser, "MAX_YAML_NODES", 45)

    def doc(aliases: int) -> str:  # 1 root + 4 for a + 4 per alias (key, sequence, 2 items)
        return "a: &x [1, 2]\n" + "".join(f"k{i}: *x\n" for i in range(aliases))

    assert len(load(doc(10))) == 11  # 45 nodes
    with pytest.raises(yaml.YAMLError) as info:
        load(doc(11))  # 49
    assert "expands to more than 45 YAML nodes through aliases" in info.value.problem
    assert info.value.problem_mark.line == 0  # the root mapping, the smallest node over


def test_node_limit_without_aliases_stops_composing(monkeypatch):
    monkeypatch.setattr(yaml_parser, "MAX_YAML_NODES", 40)
    items = ", ".join(["1"] * 37)  # 1 root + 1 key + 1 sequence + 37
    assert len(load(f"a: [{items}]")["a"]) == 37
    with pytest.raises(yaml.YAMLError) as info:
        load(f"a: [{items}, 1, 1, 1]")
    assert info.value.problem == (
        "the document has more than 40 YAML nodes; split the rules into several files"
    )
    assert (info.value.problem_mark.line, info.value.problem_mark.column) == (0, 4 + 3 * 37)


def test_merge_keys_count_like_aliases(monkeypatch):
    monkeypatch.setattr(yaml_parser, "MAX_YAML_NODES", 23)
    base = "b: &b {x: 1, y: 2}\n"  # root, key and 5 nodes of b: 7
    # each of c and d: key, mapping, '<<' and the 5 nodes of b: 8
    assert load(base + "c: {<<: *b}\nd: {<<: *b}\n")["d"] == {"x": D(1), "y": D(2)}  # 23
    with pytest.raises(yaml.YAMLError, match="through aliases"):
        load(base + "c: {<<: *b}\nd: {<<: [*b]}\n")  # 24: the list is a node too


# -- nesting -----------------------------------------------------------------------------------


def test_nesting_limit_is_exact():
    assert load("[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH) is not None
    with pytest.raises(yaml.YAMLError) as info:
        load("[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1))
    assert info.value.problem.startswith(f"the document nests more than {MAX_YAML_DEPTH} levels")
    assert info.value.problem_mark.column == MAX_YAML_DEPTH  # at the first '[' too deep


def test_nesting_through_aliases_counts(tmp_path):
    def chain(links: int) -> str:  # each anchor one level deeper than the last
        lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, links)]
        return "\n".join(lines) + "\n"

    # the root mapping, then a<n-1> holds n levels: [ [ ... [x] ] ]
    assert load(chain(MAX_YAML_DEPTH - 2))
    with pytest.raises(yaml.YAMLError, match="nests more than"):
        load(chain(MAX_YAML_DEPTH - 1))
    merges = ["n0: &n0 {k: v}"] + [f"n{i}: &n{i} {{<<: *n{i - 1}, k{i}: v}}" for i in range(1, 150)]
    path = write(tmp_path, "\n".join(merges) + "\nrules: [{name: r, key: K}]\n")
    assert "nests more than" in error_of(path)


@pytest.mark.parametrize(
    "text",
    [
        "rules: " + "[" * 10_000 + "]" * 10_000,
        "rules: " + "[" * 10_000,
        "rules: " + "{a: " * 10_000 + "1" + "}" * 10_000,
        "rules:\n" + "- " * 10_000 + "x\n",
        "rules:\n" + "".join(" " * i + "a:\n" for i in range(0, 2000, 2)),
    ],
    ids=["flow-sequences", "unclosed", "flow-mappings", "block-sequences", "block-mappings"],
)
def test_deep_nesting_is_a_clear_error_not_a_recursion_error(tmp_path, text):
    path = write(tmp_path, text)
    with deadline(20):
        message = error_of(path)
    assert message.startswith(f"{path}: line 1") or message.startswith(f"{path}: line ")
    assert f"nests more than {MAX_YAML_DEPTH} levels deep" in message


def _frames() -> int:
    frame, count = sys._getframe(), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1
    return count


def test_recursion_errors_become_rule_errors_near_the_recursion_limit(tmp_path, monkeypatch):
    path = write(tmp_path, "rules: " + "[" * 40 + "]" * 40 + "\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_frames() + 60)  # composing 40 levels needs about 120 frames
    try:
        with pytest.raises(RuleError) as info:
            load_rules(path)
    finally:
        sys.setrecursionlimit(limit)
    assert str(info.value) == (
        f"{path}: the document nests too deeply to read; rule files need far fewer levels"
    )

    def overflow(cls, *args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(RuleSet, "model_validate", classmethod(overflow))
    path = write(tmp_path, "rules: [{name: r, key: K}]\n")
    assert error_of(path) == f"{path}: the rules nest too deeply to validate"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("loop: &a [x, *a]\nrules: [{name: r, key: K}]\n", 1),
        ("rules: [{name: r, key: K, match: &m {a: 1, b: *m}}]\n", 1),
        ("x: 1\nbase: &m {<<: *m, k: v}\nrules: [{name: r, key: K}]\n", 2),
        ("a: &a [[[*a]]]\nrules: [{name: r, key: K}]\n", 1),
    ],
    ids=["sequence", "mapping", "merge", "indirect"],
)
def test_recursive_aliases_are_rejected(tmp_path, text, line):
    path = write(tmp_path, text)
    message = error_of(path)
    assert message.startswith(f"{path}: line {line}, column ")
    assert message.endswith(
        "a collection contains itself through an alias (a recursive structure); rule files "
        "must be trees"
    )


def test_match_nesting_limit(tmp_path):
    def nots(depth: int) -> dict:
        spec: dict = {"a": 1}
        for _ in range(depth):
            spec = {"not": spec}
        return spec

    def ands(depth: int) -> dict:
        spec: dict = {"a": 1}
        for _ in range(depth):
            spec = {"and": [spec, {"b": 2}]}
        return spec

    assert parse_match(nots(MAX_MATCH_DEPTH)).matches({"a": D(1)})  # 32 nots: even, so a == 1
    assert parse_match(ands(MAX_MATCH_DEPTH)).matches({"a": D(1), "b": D(2)})
    with pytest.raises(ConditionSyntaxError) as info:
        parse_match(nots(MAX_MATCH_DEPTH + 1))
    assert info.value.parts == ("not",) * (MAX_MATCH_DEPTH + 1)
    assert info.value.message == (
        f"'and', 'or' and 'not' nest more than {MAX_MATCH_DEPTH} levels deep; write the "
        "condition flatter"
    )
    with pytest.raises(ConditionSyntaxError) as info:
        parse_match(ands(MAX_MATCH_DEPTH + 1))
    assert info.value.path == "and[0]." * MAX_MATCH_DEPTH + "and"
    # the same from a file, where 33 levels of 'and' are still within the YAML depth limit
    text = "rules: [{name: r, key: K, match: " + "{and: [" * 33 + "{a: 1}" + "]}" * 33 + "}]"
    message = error_of(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'rules.yaml'}: rule 'r', field 'match.and[0].and[0].")
    assert "nest more than 32 levels deep" in message


def test_condition_paths_keep_odd_attribute_names_apart(tmp_path):
    with pytest.raises(ConditionSyntaxError) as info:
        parse_match({"a.b": {"bad": 1}})
    assert info.value.parts == ("a.b", "bad")
    path = write(tmp_path, 'rules: [{name: r, key: K, match: {"a.b[0]": {bad: 1}}}]')
    assert "field 'match.'a.b[0]'.bad': unknown operator 'bad'" in error_of(path)


# -- file size, bytes and characters -----------------------------------------------------------


def test_a_file_over_one_mebibyte_is_rejected_before_parsing(tmp_path):
    rule_text = "rules: [{name: r, key: K}]\n"
    path = write(tmp_path, rule_text + "#" * (MAX_RULE_FILE_BYTES - len(rule_text) - 1) + "\n")
    assert path.stat().st_size == MAX_RULE_FILE_BYTES
    assert [r.name for r in load_rules(path)] == ["r"]  # exactly 1 MiB is fine
    with path.open("a") as file:
        file.write("#")
    started = time.perf_counter()
    message = error_of(path)
    assert time.perf_counter() - started < 0.5
    assert message == (
        f"{path}: the file is {MAX_RULE_FILE_BYTES + 1} bytes, over the 1048576-byte (1 MiB) "
        "limit for a rule file; split the rules into several files"
    )


@pytest.mark.parametrize(
    ("content", "where", "byte", "reason"),
    [
        (
            b"rules:\n  - name: r1\n    ke\xff: K\n",
            "line 3, column 7 (byte 26)",
            0xFF,
            "invalid start byte",
        ),
        (b"a: caf\xe9", "line 1, column 7 (byte 6)", 0xE9, "unexpected end of data"),
        (b"a: caf\xe9s\n", "line 1, column 7 (byte 6)", 0xE9, "invalid continuation byte"),
        (
            "a: \u00e9\u00e9".encode() + b"\x80",
            "line 1, column 6 (byte 7)",
            0x80,
            "invalid start byte",
        ),
        (b"a: \xc0\xaf", "line 1, column 4 (byte 3)", 0xC0, "invalid start byte"),
        (
            b"\r\n\r\na: \xed\xa0\x80",
            "line 3, column 4 (byte 7)",
            0xED,
            "invalid continuation byte",
        ),
    ],
    ids=["0xff", "latin-1-at-end", "latin-1", "after-multibyte", "overlong", "surrogate"],
)
def test_bytes_that_are_not_utf8(tmp_path, content, where, byte, reason):
    path = write(tmp_path, content, "defs.yaml")
    assert error_of(path) == (
        f"{path}: {where}: byte 0x{byte:02x} is not valid UTF-8 ({reason}); rule files must be "
        "UTF-8"
    )


def test_utf16_file_gets_a_hint_and_utf8_bom_is_fine(tmp_path):
    path = write(tmp_path, "rules: [{name: r, key: K}]\n".encode("utf-16"))
    assert error_of(path).endswith(
        "rule files must be UTF-8 (it starts with a UTF-16 byte order mark)"
    )
    path = write(tmp_path, b"\xef\xbb\xbfrules: [{name: r, key: K}]\n")
    assert [r.name for r in load_rules(path)] == ["r"]


@pytest.mark.parametrize(
    ("char", "escape"),
    [
        ("\x00", "\\x00"),
        ("\x07", "\\x07"),
        ("\x1b", "\\x1b"),
        ("\x9b", "\\x9b"),
        ("\ufffe", "\\ufffe"),
    ],
)
def test_control_characters_are_one_line_errors_with_a_position(tmp_path, char, escape):
    path = write(tmp_path, f"rules:\n  - name: r1\n    key: K{char}X\n")
    assert error_of(path) == (
        f"{path}: line 3, column 11: invalid YAML: character {char!r} (U+{ord(char):04X}) is "
        f'not allowed in YAML; remove it, or write "{escape}" inside a double-quoted string'
    )


def test_a_lone_surrogate_escape_is_rejected_with_its_position(tmp_path):
    path = write(tmp_path, 'rules:\n  - name: r1\n    key: "ab\\udc00"\n')
    assert error_of(path) == (
        f"{path}: line 3, column 10: the text holds '\\udc00' at character 3, a lone surrogate "
        "that UTF-8 cannot encode"
    )
    with pytest.raises(RuleError, match="lone surrogate"):
        rule("r1", key="\ud800")


@pytest.mark.parametrize(
    ("text", "value"),
    [("!!int 7", D(7)), ("!!float 1.5", D("1.5")), ("!!float .inf", D("Infinity"))],
)
def test_explicit_number_tags_follow_the_core_schema(text, value):
    assert load(f"v: {text}")["v"] == value


@pytest.mark.parametrize(
    "text", ["!!float sNaN", "!!int \u0661\u0662", "!!int 1_000", "!!float Infinity", "!!int ' 1'"]
)
def test_explicit_number_tags_reject_other_spellings(text):
    with pytest.raises(yaml.YAMLError, match="is not a decimal number"):
        load(f"v: {text}")


# -- what used to be accepted silently ----------------------------------------------------------


@pytest.mark.parametrize("delta", ["0", "'0'", "0.0", "-0", "0E+3", "'-0.000'", "{constant: 0}"])
def test_a_delta_of_zero_is_rejected(tmp_path, delta):
    path = write(tmp_path, f"rules:\n  - name: r1\n    key: K\n    delta: {delta}\n")
    message = error_of(path)
    assert message.startswith(f"{path}: rule 'r1', field 'delta': a delta of ")
    assert message.endswith(
        " counts nothing; give a nonzero number such as 1, or {attribute: NAME}"
    )
    with pytest.raises(RuleError, match="counts nothing"):
        rule("r1", key="K", delta=0)


def test_tiny_and_negative_deltas_are_fine():
    assert rule("r1", key="K", delta=D("1E-130")).delta.constant == D("1E-130")
    assert rule("r1", key="K", delta="-2.5").delta.constant == D("-2.5")


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("{{pk}}", "stray '{' at character 1 of key '{{pk}}': doubled braces are no escape"),
        ("a}}b", "stray '}' at character 2 of key 'a}}b': doubled braces are no escape"),
        ("{pk}}", "stray '}' at character 5 of key '{pk}}'"),
        ("a{b", "stray '{' at character 2 of key 'a{b'"),
        ("}", "stray '}' at character 1 of key '}'"),
        ("{a{b}}", "stray '{' at character 1 of key '{a{b}}'"),
        ("{ }", "empty placeholder { } in key '{ }'"),
        ("{}", "empty placeholder {} in key '{}'"),
        ("x#{\t}", "empty placeholder"),
        (
            "{ pk}",
            "placeholder '{ pk}' in key '{ pk}' has spaces around its attribute name; write '{pk}'",
        ),
        ("{pk }", "has spaces around its attribute name; write '{pk}'"),
        ("{pk\n}", "has spaces around its attribute name"),
        ("{a.b}", "invalid placeholder {a.b} in key '{a.b}'"),
        ("{a[0]}", "invalid placeholder {a[0]}"),
        ("{a!r}", "invalid placeholder {a}"),
        ("{a:>5}", "invalid placeholder {a}"),
        ("{a}{b}", "must be separated by '#'"),
        ("", "key must be a non-empty string"),
    ],
)
def test_key_templates_that_are_neither_placeholders_nor_literals(key, problem):
    with pytest.raises(RuleError) as info:
        rule("r1", key=key)
    message = str(info.value)
    assert message.startswith("<python>: rule 'r1', field 'key': ")
    assert problem in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("key", "literals", "placeholders"),
    [
        ("TOTAL", ("TOTAL",), ()),
        ("{pk}", ("", ""), ("pk",)),
        ("{origin}#{dest}", ("", "#", ""), ("origin", "dest")),
        ("A#{my attr}#%", ("A#", "#%"), ("my attr",)),
        ("\u00fcber#{\u00e9t\u00e9}", ("\u00fcber#", ""), ("\u00e9t\u00e9",)),
        ("{\\not}", ("", ""), ("\\not",)),
    ],
)
def test_valid_key_templates(key, literals, placeholders):
    template = KeyTemplate.parse(key)
    assert (template.literals, template.placeholders) == (literals, placeholders)


def test_literal_key_sort_key_limit_is_exact():
    # DynamoDB: sort key at most 1,024 bytes of UTF-8; "r#" is 2 of them
    fits = rule("r", key="k" * (MAX_SORT_KEY_BYTES - 2))
    [contribution] = fits.contributions({})
    assert len(f"r#{contribution.key}".encode()) == MAX_SORT_KEY_BYTES
    with pytest.raises(RuleError) as info:
        rule("r", key="k" * (MAX_SORT_KEY_BYTES - 1))
    assert str(info.value) == (
        "<python>: rule 'r', field 'key': the aggregate's sort key would be 1025 bytes ('r#': "
        "2, key: 1023), over DynamoDB's 1024-byte limit for a sort key"
    )
    # bytes, not characters: 511 two-byte characters fit, 512 do not
    rule("r", key="\u00e9" * 511)
    with pytest.raises(RuleError, match="would be 1026 bytes"):
        rule("r", key="\u00e9" * 512)


def test_windowed_sort_key_limit_uses_the_longest_granularity_label():
    window = {"time": "ts", "unit": "epoch_seconds", "granularities": ["day", "minute"]}
    suffix = len("#minute#2013-01-01T05:00:00Z")
    fits = rule("w", key="k" * (MAX_SORT_KEY_BYTES - 2 - suffix), window=window)
    sizes = {len(f"w#{c.key}".encode()) for c in fits.contributions({"ts": D(1357016400)})}
    assert max(sizes) == MAX_SORT_KEY_BYTES
    with pytest.raises(RuleError) as info:
        rule("w", key="k" * (MAX_SORT_KEY_BYTES - 1 - suffix), window=window)
    assert "'#minute#YYYY-MM-DDTHH:MM:SSZ': 28), over DynamoDB's 1024-byte limit" in str(info.value)


def test_templated_keys_are_checked_on_their_literal_parts():
    literal = "x" * (MAX_SORT_KEY_BYTES - 3)  # "r#" + "{a}#" + literal with a = "" is 1024
    fits = rule("r", key="{a}#" + literal)
    [contribution] = fits.contributions({"a": ""})
    assert len(f"r#{contribution.key}".encode()) == MAX_SORT_KEY_BYTES
    with pytest.raises(RuleError) as info:
        rule("r", key="{a}#" + literal + "x")
    assert "would be at least 1025 bytes ('r#': 2, key outside its placeholders: 1023)" in str(
        info.value
    )


def test_empty_rule_lists_are_rejected(tmp_path):
    path = write(tmp_path, "version: 1\nrules: []\n")
    assert error_of(path) == f"{path}: field 'rules': the list is empty; give at least one rule"
    both = write(tmp_path, "version: 2\nrules: []\n", "both.yaml")
    assert error_of(both).splitlines() == [
        f"{both}: field 'rules': the list is empty; give at least one rule",
        f"{both}: field 'version': version 2 is not known; this release reads version 1",
    ]
    assert error_of([]) == "no paths given: no rules; give at least one rule"


def test_derived_attribute_typos_are_reported_by_load_rules_with_the_file(tmp_path):
    write(tmp_path, "rules: [{name: src, key: '{pk}'}]\n", "a.yaml")
    derived = write(
        tmp_path,
        """
        rules:
          - {name: hist, source: src, key: "{vlaue}"}
          - {name: fine, source: src, key: "{value}", match: {key: {prefix: A}}}
          - {name: buckets, source: src, key: "{bucket}"}
        """,
        "b.yaml",
    )
    assert error_of(tmp_path).splitlines() == [
        f"{derived}: rule 'hist', field 'key': reads 'vlaue', which the aggregates of 'src' "
        "do not have; they have key, pk, rule, sk, value",
        f"{derived}: rule 'buckets', field 'key': reads 'bucket', which the aggregates of "
        "'src' do not have; they have key, pk, rule, sk, value",
    ]


def test_derived_attribute_problems_match_the_engine_and_follow_the_layout(tmp_path):
    rules = RuleSet.of(
        rule(
            "src", key="{pk}", window={"time": "ts", "unit": "iso8601", "granularities": ["hour"]}
        ),
        rule(
            "kept",
            key="{pk}",
            window={"time": "ts", "unit": "iso8601", "granularities": ["hour"], "retention": "1d"},
        ),
        rule("a", source="src", key="{ttl}#{bucket}"),
        rule("b", source="kept", key="{ttl}#{vlaue}", match={"granularity": "hour"}),
    )
    problems = derived_attribute_problems(rules)
    assert problems == [
        "rule 'a', field 'key': reads 'ttl', which the aggregates of 'src' do not have; they "
        "have bucket, granularity, key, pk, rule, sk, value",
        "rule 'b', field 'key': reads 'vlaue', which the aggregates of 'kept' do not have; "
        "they have bucket, granularity, key, pk, rule, sk, ttl, value",
    ]
    if hasattr(engine_module, "derived_attribute_problems"):
        assert engine_module.derived_attribute_problems(rules) == problems
    path = write(tmp_path, "rules: [{name: s, key: '{pk}'}, {name: d, source: s, key: '{count}'}]")
    assert [r.name for r in load_rules(path, layout=TableLayout(value_attribute="count"))] == [
        "s",
        "d",
    ]
    assert "reads 'count'" in error_of(path)


# -- one line per problem, bounded values ------------------------------------------------------


def test_every_problem_is_one_bounded_line(tmp_path):
    long = "v" * 100_000
    # explicit keys ("? ..."): YAML limits implicit ones to 1,024 characters
    path = write(
        tmp_path,
        "rules:\n"
        '  - name: "a\\nb"\n'
        "    key: K\n"
        "  - name: r2\n"
        "    key: K\n"
        "    match:\n"
        '      "x\\u2028y": {bad: 1}\n'
        "  - name: r2b\n"
        "    key: K\n"
        "    match:\n"
        f"      z:\n        ? {long}\n        : 1\n"
        f"  - {{name: r3, key: K, delta: {long}}}\n"
        f'  - {{name: r4, key: "{{{long}}}{{b}}"}}\n'
        "  - name: r5\n"
        "    key: K\n"
        f"    window: {{time: ts, unit: {long}, granularities: [{long}], retention: {long}}}\n",
    )
    lines = error_of(path).split("\n")
    assert len(lines) == 8
    assert all(line.startswith(f"{path}: rule '") for line in lines)
    assert all(len(line) < len(str(path)) + 400 for line in lines)
    assert lines[0].startswith(f"{path}: rule 'a\\nb', field 'name': ")
    assert lines[1].startswith(
        f"{path}: rule 'r2', field 'match.'x\\u2028y'.bad': unknown operator 'bad'"
    )
    assert lines[2].startswith(f"{path}: rule 'r2b', field 'match.z.'vvvvvvvvv")
    assert "… (100000 chars)': unknown operator 'vvv" in lines[2]


def test_problems_per_file_are_capped(tmp_path):
    path = write(
        tmp_path,
        "rules:\n" + "".join(f"  - {{name: r{i}, key: K, delta: x{i}}}\n" for i in range(250)),
    )
    lines = error_of(path).splitlines()
    assert len(lines) == 201
    assert lines[-1] == f"{path}: … and 50 more problem(s)"


def test_the_same_problem_in_several_rules_is_one_line_naming_them(tmp_path):
    """A typo in a YAML anchor that the rules merge (or the same mistake made in each): one line,
    naming the rules; a different problem in one of them keeps a line of its own."""
    path = write(
        tmp_path,
        "x-base: &base {key: K, delta: lots}\n"
        "rules:\n"
        + "".join(f"  - {{name: r{i}, <<: *base}}\n" for i in range(3))
        + "  - {name: r3, key: K, delta: lots, leaderboard: 2}\n",
    )
    assert error_of(path).splitlines() == [
        f"{path}: rules 'r0', 'r1', 'r2' and 'r3', field 'delta': expected a number, got "
        "'lots'; to aggregate the attribute lots, write delta: {attribute: lots}",
        f"{path}: rule 'r3', field 'leaderboard': expected true or false, got the number 2",
    ]


def test_unknown_rule_names_and_sources_list_a_bounded_number_of_rules():
    rules = RuleSet.of(*(rule(f"r{i:03}", key="K") for i in range(50)))
    with pytest.raises(RuleError) as info:
        rules.get("x" * 1000)
    message = str(info.value)
    assert len(message) < 400 and message.endswith(", … (50 rules)")


# -- evaluation errors quote a short prefix of item values ------------------------------------

BIG = "2013-01-01T05:00:00Z" + "9" * 250_000


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            lambda: parse_instant(BIG),
            "'2013-01-01T05:00:00Z99999999999999999999'… (250020 chars) is not an ISO 8601 time",
        ),
        (lambda: event_time_seconds(BIG, "iso8601"), "… (250020 chars) is not an ISO 8601 time"),
        (
            lambda: event_time_seconds(D("9" * 5000), "epoch_seconds"),
            "… (5000 chars) (epoch_seconds) is outside years",
        ),
        (
            lambda: event_time_seconds(D("1E+400"), "epoch_seconds"),
            "time 1E+400 (epoch_seconds) is outside years",
        ),
        (
            lambda: format_key_value(D("9" * 60)),
            "key number '9999999999999999999999999999999999999999'… (60 chars): 60 significant",
        ),
        (lambda: format_key_value(D("1E+200")), "key number 1E+200: 1E+200 is too large"),
        (
            lambda: rule("r", key="{" + "k" * 300 + "}").contributions({}),
            "key attribute 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk'… (300 chars) is missing",
        ),
        (
            lambda: rule("r", key="K", delta={"attribute": "d" * 300}).contributions({}),
            "delta attribute 'dddddddddddddddddddddddddddddddddddddddd'… (300 chars) is missing",
        ),
    ],
    ids=[
        "instant",
        "iso-time",
        "epoch-digits",
        "epoch-exponent",
        "key-digits",
        "key-range",
        "key-attribute",
        "delta-attribute",
    ],
)
def test_evaluation_errors_quote_a_short_prefix(call, expected):
    with pytest.raises(EvaluationError) as info:
        call()
    message = str(info.value)
    assert expected in message
    assert len(message) < 300


def test_windowed_rule_with_a_huge_time_value_gives_a_short_message():
    window = {"time": "ts", "unit": "iso8601", "granularities": ["hour"]}
    with pytest.raises(EvaluationError) as info:
        rule("w", key="K", window=window).contributions({"ts": BIG})
    assert str(info.value).startswith("time attribute 'ts': '2013-01-01T05:00:00Z9999")
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    "call",
    [
        lambda: parse_duration("x" * 100_000),
        lambda: parse_duration("9" * 100_000),
        lambda: parse_duration("9" * 100_000 + "h"),
        lambda: parse_duration(D("1E+999999999")),
        lambda: Granularity.parse("w" * 100_000),
        lambda: Granularity.parse(D("1E+999999999")),
    ],
)
def test_durations_and_granularities_are_bounded(call):
    with deadline(5), pytest.raises(ValueError) as info:
        call()
    assert len(str(info.value)) < 200


def test_longest_duration_and_granularity_are_accepted():
    from aggregator.core.windows import MAX_DURATION

    assert parse_duration(MAX_DURATION) == MAX_DURATION
    assert Granularity.parse(MAX_DURATION).seconds == MAX_DURATION
    with pytest.raises(ValueError, match="longer than"):
        parse_duration(MAX_DURATION + 1)


def test_top_level_x_keys_hold_anchors_and_are_ignored(tmp_path):
    path = write(
        tmp_path,
        """
        version: 1
        x-departed: &departed {status: departed}
        rules:
          - name: by_origin
            match: {<<: *departed, origin: JFK}
            key: "{origin}"
        """,
    )
    assert load_rules(path) == RuleSet.of(
        rule("by_origin", match={"status": "departed", "origin": "JFK"}, key="{origin}")
    )


def test_a_blank_key_is_refused(tmp_path):
    path = write(tmp_path, "rules:\n  - {name: r, key: '  '}\n")
    with pytest.raises(RuleError, match="key must be a non-empty string"):
        load_rules(path)


def test_a_derived_rules_unknown_attribute_is_reported_under_the_field_that_reads_it():
    from aggregator.core.rules import derived_attribute_problems

    rules = RuleSet.of(
        rule("src", key="{pk}"),
        rule("m", source="src", key="{value}", match={"vlaue": {"numeric": [">", 1]}}),
        rule("d", source="src", key="TOTAL", delta={"attribute": "cuont"}),
    )
    assert [line.split(": reads")[0] for line in derived_attribute_problems(rules)] == [
        "rule 'm', field 'match'",
        "rule 'd', field 'delta'",
    ]

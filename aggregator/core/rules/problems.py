"""Validation problems as one line each: pydantic's errors formatted as ``<source>: rule 'x',
field 'f': <message>``, and the errors whole-rule and rule-set checks raise to say which field
or rule a problem belongs to."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from aggregator.core.conditions import ConditionSyntaxError
from aggregator.core.rules.messages import one_line, rule_name, type_word
from aggregator.core.rules.model import MAX_RULE_NAME_CHARS, FieldError, Rule
from aggregator.core.rules.thresholds import MAX_THRESHOLD_NAME_CHARS
from aggregator.core.text import MAX_QUOTED_CHARS, quote


class RuleSetProblems(ValueError):
    """Problems across the rules of a set, all of them: duplicate names and the derived-rule
    graph's unknown sources and cycles, as ``(index, field, message)``."""

    def __init__(self, rules: Sequence[Rule], problems: list[tuple[int, str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"rule {rule_name(rules[i].name)}: {m}" for i, _, m in problems))


MAX_PROBLEMS_PER_FILE = 200
"""Most problem lines reported for one file (then a count of the rest)."""


_PLAIN_FIELD = re.compile(r"[^\s.\[\]'\"]+|\\")
"""A location part shown as it is; others (dots, brackets, quotes, spaces, control
characters, long names) are quoted so that the dotted path stays unambiguous."""


def _field_path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            plain = text.isprintable() and _PLAIN_FIELD.fullmatch(text)
            if len(text) > MAX_QUOTED_CHARS or not plain:
                text = quote(text)  # an odd attribute name of a match, an unknown field...
            out += ("." if out else "") + text
    return out


def _clean_message(msg: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def _field_names(container: Sequence[Any] = ()) -> list[str]:
    """The field names a rule file may hold where ``container`` (the location of the mapping
    that holds the unknown field: ``("rules", 0, "window")``, ``("rules", 0, "thresholds",
    1)``...) is, for "did you mean" hints on an unknown field: the names of the model there
    (a rule, its ``window``, ``delta``, ``target`` or one of its ``thresholds``, the file's
    ``table``); every model's names (fields and YAML aliases) where it is something else."""
    from pydantic import BaseModel

    from aggregator.core.layout import TableLayout
    from aggregator.core.rules.buckets import Window
    from aggregator.core.rules.deltas import DeltaSpec
    from aggregator.core.rules.targets import Target
    from aggregator.core.rules.thresholds import Threshold

    nested: dict[object, type[BaseModel]] = {
        "window": Window,
        "delta": DeltaSpec,
        "target": Target,
        "table": TableLayout,
    }
    listed: dict[object, type[BaseModel]] = {"thresholds": Threshold}  # lists of models
    models: tuple[type[BaseModel], ...] = (Rule, Window, DeltaSpec, Target, TableLayout)
    names: set[str] = {"version", "rules", "table"}
    parent = container[-1] if container else None
    above = container[-2] if len(container) >= 2 else None
    if isinstance(parent, int) and isinstance(above, str) and above in listed:
        models, names = (listed[above],), set()  # an item of a rule's list of models
    elif isinstance(parent, int):  # a rule of the rules list
        models, names = (Rule,), set()
    elif isinstance(parent, str) and parent in nested:
        models, names = (nested[parent],), set()
    for model in models:
        for name, info in model.model_fields.items():
            names.add(info.alias or name)
    return sorted(names)


def _plain_input(value: Any) -> str:
    return quote(value) if isinstance(value, str) else str(value)


def _message(err: Any) -> str:
    """A pydantic error in the words of a rule file: an unknown field with the nearest known
    name, a name that breaks its pattern with the rule spelt out."""
    kind = err.get("type")
    loc: tuple[Any, ...] = tuple(err.get("loc") or ())
    field = str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        known = [n for n in _field_names(loc[:-1]) if n != field]
        close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
        if close:
            return f"unknown field; did you mean {close[0]!r}?"
        if len(loc) == 1:  # a key of the file's own, such as a YAML anchor to share
            return f"unknown field; keys of your own start with 'x-' ({quote('x-' + field)})"
        return "unknown field"
    if kind in ("tuple_type", "list_type"):
        return f"expected a list, got {type_word(err.get('input'))}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {type_word(err.get('input'))}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {type_word(err.get('input'))}"
    if kind == "literal_error" and field == "version":
        return (
            f"version {_plain_input(err.get('input'))} is not known; this release reads version 1"
        )
    if kind == "string_pattern_mismatch" and field == "name":
        # a threshold's name (rules[i].thresholds[j].name) has a limit of its own
        threshold = len(loc) >= 3 and loc[-3] == "thresholds"
        what, most = (
            ("threshold", MAX_THRESHOLD_NAME_CHARS) if threshold else ("rule", MAX_RULE_NAME_CHARS)
        )
        return (
            f"{quote(str(err.get('input')))} is not a {what} name: start with a letter, then "
            f"letters, digits, '_', '.' or '-', at most {most} characters"
        )
    return _clean_message(err["msg"])


def _error_locations(
    exc: ValidationError, source: str, prefix: tuple[Any, ...]
) -> Iterator[tuple[tuple[Any, ...], str]]:
    """``(location, message)`` per problem, locating errors raised deep inside a validator."""
    for err in exc.errors(include_url=False):
        loc = prefix + tuple(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ConditionSyntaxError | FieldError):
            yield loc + cause.parts, cause.message
        elif isinstance(cause, RuleSetProblems):
            where = "in this rule set" if source == "<python>" else "in this file"
            for index, field, message in cause.problems:
                yield (*loc, index, *field.split(".")), message.format(where=where)
        else:
            yield loc, _message(err)


MAX_RULES_NAMED = 10
"""Most rules one line names when several share a problem (then how many more)."""


def _rules_phrase(whos: list[str]) -> str:
    """``rule 'a'``, or ``rules 'a', 'b' and 'c'`` (at most :data:`MAX_RULES_NAMED` named)."""
    if len(whos) == 1:
        return f"rule {whos[0]}"
    if len(whos) > MAX_RULES_NAMED:
        named = whos[:MAX_RULES_NAMED]
        return f"rules {', '.join(named)} and {len(whos) - len(named)} more"
    return f"rules {', '.join(whos[:-1])} and {whos[-1]}"


def format_errors(
    exc: ValidationError,
    source: str,
    data: Any,
    prefix: tuple[Any, ...] = (),
) -> str:
    """One line per problem: ``<source>: rule 'x', field 'f': <message>`` (``rule #n`` for a
    rule without a usable name; ``<source>: field 'f': ...`` outside the rules). The same
    problem (field and message) in several rules, such as a typo in a YAML anchor that they
    all merge, is one line naming them: ``<source>: rules 'a', 'b' and 'c', field 'f': ...``.
    At most :data:`MAX_PROBLEMS_PER_FILE` lines, then one counting the rest."""
    rules_data = data.get("rules") if isinstance(data, Mapping) else None
    # (in a rule?, field, message) -> the rules that have it (none outside the rules), in the
    # order the problems come
    found: dict[tuple[bool, str, str], list[str]] = {}
    for loc, msg in _error_locations(exc, source, prefix):
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            index = loc[1]
            name = None
            if isinstance(rules_data, list) and index < len(rules_data):
                raw = rules_data[index]
                if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
                    name = raw["name"]
            who = rule_name(name) if name else f"#{index + 1}"
            whos = found.setdefault((True, _field_path(loc[2:]) or "(rule)", msg), [])
            if who not in whos:
                whos.append(who)
        else:
            found.setdefault((False, _field_path(loc) or "(top level)", msg), [])
    lines = []
    for (in_rule, field, msg), whos in found.items():
        who = f"{_rules_phrase(whos)}, " if in_rule else ""
        lines.append(one_line(f"{source}: {who}field '{field}': {msg}"))
    if len(lines) > MAX_PROBLEMS_PER_FILE:
        rest = len(lines) - MAX_PROBLEMS_PER_FILE
        lines[MAX_PROBLEMS_PER_FILE:] = [f"{source}: … and {rest} more problem(s)"]
    return "\n".join(lines)

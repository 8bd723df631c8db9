"""Validation problems as one line each: pydantic's errors formatted as ``<source>: rule 'x',
field 'f': <message>``, and the errors whole-rule and rule-set checks raise to say which field
or rule a problem belongs to."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from aggregator.core.conditions import ConditionSyntaxError
from aggregator.core.rules.messages import _name, _one_line
from aggregator.core.rules.model import Rule, _FieldError
from aggregator.core.text import MAX_QUOTED_CHARS, quote


class _GraphProblems(ValueError):
    """Unknown sources or cycles among derived rules: ``(index, message)`` pairs."""

    def __init__(self, rules: Sequence[Rule], problems: list[tuple[int, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"rule {_name(rules[i].name)}: {m}" for i, m in problems))


class _DuplicateNames(ValueError):
    """Rule names used twice: ``(index, index of the first rule of that name)`` pairs."""

    def __init__(self, rules: Sequence[Rule], duplicates: list[tuple[int, int]]) -> None:
        self.duplicates = duplicates
        names = ", ".join(repr(rules[index].name) for index, _ in duplicates)
        super().__init__(f"duplicate rule name(s) {names}")


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


def _error_locations(
    exc: ValidationError, source: str, prefix: tuple[Any, ...]
) -> Iterator[tuple[tuple[Any, ...], str]]:
    """``(location, message)`` per problem, locating errors raised deep inside a validator."""
    for err in exc.errors(include_url=False):
        loc = prefix + tuple(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ConditionSyntaxError | _FieldError):
            yield loc + cause.parts, cause.message
        elif isinstance(cause, _GraphProblems):
            for index, message in cause.problems:
                yield (*loc, index, "source"), message
        elif isinstance(cause, _DuplicateNames):
            where = "in this rule set" if source == "<python>" else "in this file"
            for index, first in cause.duplicates:
                yield (*loc, index, "name"), f"duplicate rule name (also rule #{first + 1} {where})"
        else:
            yield loc, _clean_message(err["msg"])


def _format_errors(
    exc: ValidationError,
    source: str,
    data: Any,
    prefix: tuple[Any, ...] = (),
) -> str:
    """One line per problem: ``<source>: rule 'x', field 'f': <message>`` (``rule #n`` for a
    rule without a usable name; ``<source>: field 'f': ...`` outside the rules). At most
    :data:`MAX_PROBLEMS_PER_FILE` lines, then one counting the rest."""
    lines = []
    rules_data = data.get("rules") if isinstance(data, Mapping) else None
    for loc, msg in _error_locations(exc, source, prefix):
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            index = loc[1]
            name = None
            if isinstance(rules_data, list) and index < len(rules_data):
                raw = rules_data[index]
                if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
                    name = raw["name"]
            who = f"rule {_name(name)}" if name else f"rule #{index + 1}"
            field = _field_path(loc[2:]) or "(rule)"
            lines.append(_one_line(f"{source}: {who}, field '{field}': {msg}"))
        else:
            field = _field_path(loc) or "(top level)"
            lines.append(_one_line(f"{source}: field '{field}': {msg}"))
    if len(lines) > MAX_PROBLEMS_PER_FILE:
        rest = len(lines) - MAX_PROBLEMS_PER_FILE
        lines[MAX_PROBLEMS_PER_FILE:] = [f"{source}: … and {rest} more problem(s)"]
    return "\n".join(lines)

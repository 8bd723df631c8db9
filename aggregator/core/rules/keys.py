"""Key templates: a rule's ``key`` (``"{carrier}"``, ``"{origin}#{dest}"`` or a literal),
parsed and rendered into sort-key text, with the escaping that keeps ``#`` a separator."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, DecimalException
from typing import Any

from aggregator.core.conditions import MISSING, dynamodb_number_problem
from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.numbers import CONTEXT
from aggregator.core.rules.messages import plain_number, unencodable
from aggregator.core.text import MAX_QUOTED_CHARS, quote


def escape_key_part(value: str) -> str:
    """Escape ``%`` and ``#`` so that ``#`` stays a separator in sort keys (injective)."""
    return value.replace("%", "%25").replace("#", "%23")


def unescape_key_part(value: str) -> str:
    """Inverse of :func:`escape_key_part`."""
    return value.replace("%23", "#").replace("%25", "%")


def format_key_value(value: Any) -> str:
    """Render one attribute value as key text.

    Strings are used as they are, numbers in plain decimal notation without exponent or trailing
    zeros (``Decimal("1.50")`` -> ``"1.5"``, ``Decimal("1E+2")`` -> ``"100"``) with all of
    DynamoDB's 38 significant digits, booleans as ``true`` / ``false``.

    Raises
    ------
    EvaluationError
        For any other type (lists, maps, sets, binary, null), and for numbers DynamoDB cannot
        hold (more than 38 significant digits, out of range).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, Decimal):
        if value == 0:
            return "0"
        problem = "not a finite number" if not value.is_finite() else dynamodb_number_problem(value)
        if not problem:
            try:
                return format(value.normalize(CONTEXT), "f")
            except DecimalException as exc:
                problem = f"{type(exc).__name__} in DynamoDB's 38-digit context"
        raise EvaluationError(f"key number {plain_number(value)}: {problem}")
    raise EvaluationError(
        f"{_DYNAMODB_KINDS.get(type(value), type(value).__name__)}, not a string, number or "
        "boolean",
        FailureCause.WRONG_TYPE,
    )


_DYNAMODB_KINDS: dict[type, str] = {
    dict: "a map (M)",
    list: "a list (L)",
    set: "a set (SS, NS or BS)",
    frozenset: "a set (SS, NS or BS)",
    bytes: "binary (B)",
    type(None): "null (NULL)",
}
"""How a key value a key cannot use is named: by its DynamoDB type (Developer Guide,
"Supported data types")."""


_KEY_TOKEN = re.compile(r"\{([^{}]*)\}|([{}])|([^{}]+)")
"""A key's parts: a placeholder (its name), a stray brace, or literal text."""

_FORMAT_SYNTAX = re.compile(r"[!:\[\].]")
"""``str.format`` syntax a placeholder must not use: conversions, specs, indexes, attributes."""


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """A key such as ``"{carrier}"``, ``"{origin}#{dest}"`` or the literal ``"TOTAL_PATHS_FOUND"``.

    ``render(image)`` returns ``(encoded, display)``: ``encoded`` goes into the sort key with each
    substituted value escaped (``%`` -> ``%25``, ``#`` -> ``%23``); ``display`` is the text with
    raw values. Adjacent placeholders must be separated by literal text containing ``#`` so that
    the encoding is injective.
    """

    template: str
    literals: tuple[str, ...]
    placeholders: tuple[str, ...]

    @classmethod
    def parse(cls, template: str) -> KeyTemplate:
        """Parse a key: literal text and ``{attribute}`` placeholders, nothing else.

        Literal text may not contain ``{`` or ``}`` (doubled braces are no escape here), and a
        placeholder holds a bare attribute name: not empty, no spaces around it, no format
        syntax (``!`` ``:`` ``[`` ``]`` ``.``).

        Raises
        ------
        ValueError
            For anything else, with a one-line message quoting at most a prefix of the key.
        """
        if not isinstance(template, str) or not template.strip():
            raise ValueError("key must be a non-empty string such as '{carrier}' or 'TOTAL'")
        shown = quote(template)
        problem = unencodable(template)
        if problem:
            raise ValueError(f"key {shown} {problem}")
        literals: list[str] = []
        placeholders: list[str] = []
        pending = ""
        for token in _KEY_TOKEN.finditer(template):
            field, brace, text = token.groups()
            if text is not None:
                pending += text
                continue
            if brace is not None:
                doubled = template[token.start() : token.start() + 2] in ("{{", "}}")
                hint = "doubled braces are no escape in keys; " if doubled else ""
                raise ValueError(
                    f"stray {brace!r} at character {token.start() + 1} of key {shown}: {hint}"
                    "a key holds literal text and placeholders such as {carrier}, no other "
                    "braces"
                )
            if not field.strip():
                raise ValueError(
                    f"empty placeholder {{{field}}} in key {shown}: put an attribute name "
                    "inside, such as {carrier}"
                )
            if field != field.strip():
                raise ValueError(
                    f"placeholder {quote('{' + field + '}')} in key {shown} has spaces around "
                    f"its attribute name; write {quote('{' + field.strip() + '}')}"
                )
            if _FORMAT_SYNTAX.search(field):
                name = "{" + re.split(r"[!:]", field, maxsplit=1)[0] + "}"  # as str.format sees it
                if len(name) > MAX_QUOTED_CHARS or not name.isprintable():
                    name = quote(name)
                raise ValueError(
                    f"invalid placeholder {name} in key {shown}: use a bare attribute name such "
                    "as {carrier}"
                )
            if placeholders and "#" not in pending:
                raise ValueError(
                    f"placeholders in key {shown} must be separated by '#' "
                    "(e.g. '{origin}#{dest}') so that different items never share a key"
                )
            literals.append(pending)
            placeholders.append(field)
            pending = ""
        literals.append(pending)
        return cls(template, tuple(literals), tuple(placeholders))

    def attributes(self) -> frozenset[str]:
        return frozenset(self.placeholders)

    @property
    def is_literal(self) -> bool:
        return not self.placeholders

    def render_values(self, values: Sequence[Any]) -> tuple[str, str]:
        """Render from placeholder values in order; returns ``(encoded, display)``."""
        return self._assemble([format_key_value(value) for value in values])

    def _assemble(self, texts: Sequence[str]) -> tuple[str, str]:
        encoded = [self.literals[0]]
        display = [self.literals[0]]
        for text, literal in zip(texts, self.literals[1:], strict=True):
            encoded += (escape_key_part(text), literal)
            display += (text, literal)
        return "".join(encoded), "".join(display)

    def split_display(self, text: str) -> list[str]:
        """The placeholder values, in order, of a key's display text: the template with raw
        values, as :meth:`render` returns it and ``aggregator query list`` shows it.

        ``"{origin}#{dest}"`` splits ``"JFK#LAX"`` into ``["JFK", "LAX"]``; a one-placeholder
        template gives the text between its literal prefix and suffix (``"P#{pk}"``:
        ``"P#bob"`` -> ``["bob"]``, ``"{pk}"``: the text itself); a literal template gives
        ``[]`` for its own text. Values are raw, so one may contain a separator: the text then
        splits in more than one way, and nothing is guessed.

        Raises
        ------
        ValueError
            When the text does not fit the template, or fits it in more than one way; one line
            naming the problem (two of the readings when ambiguous).
        """
        shown, key = quote(text), quote(self.template)
        if self.is_literal:
            if text != self.template:
                raise ValueError(f"key text {shown} is not the literal key {key}")
            return []
        head, *separators, tail = self.literals
        problem = ""
        if not text.startswith(head):
            problem = f"it does not start with {quote(head)}"
        elif not text.endswith(tail):
            problem = f"it does not end with {quote(tail)}"
        elif len(text) < len(head) + len(tail):
            problem = "it is shorter than the key's literal text"
        if problem:
            raise ValueError(f"key text {shown} does not fit key {key}: {problem}")
        body = text[len(head) : len(text) - len(tail)]
        # Leftmost and rightmost placements of the separators: every split lies between the two
        # (componentwise), so the split is unique exactly when they agree.
        first, missing = _split_leftmost(body, separators)
        if first is None:
            before, after = self.placeholders[missing], self.placeholders[missing + 1]
            raise ValueError(
                f"key text {shown} does not fit key {key}: no {quote(separators[missing])} "
                f"between {before} and {after}"
            )
        last = _split_rightmost(body, separators)
        if first != last:
            at = next(i for i, (a, b) in enumerate(zip(first, last, strict=True)) if a != b)
            separator = separators[at]  # placed differently by the two readings
            part = "" if any(separator in v for v in (*first, *last)) else "part of "
            raise ValueError(
                f"key text {shown} fits key {key} in more than one way ({self._reading(first)} "
                f"or {self._reading(last)}): a value contains {part}{quote(separator)}; give the "
                f"{len(self.placeholders)} values separately"
            )
        return first

    def _reading(self, values: Sequence[str]) -> str:
        return ", ".join(f"{n}={quote(v)}" for n, v in zip(self.placeholders, values, strict=True))

    def render(self, image: Mapping[str, Any]) -> tuple[str, str]:
        """Render the key for an image.

        Raises
        ------
        EvaluationError
            When a placeholder attribute is missing or of an unsupported type.
        """
        texts = []
        for name in self.placeholders:
            value = image.get(name, MISSING)
            if value is MISSING:
                raise EvaluationError(
                    f"key attribute {quote(name)} is missing", FailureCause.MISSING_ATTRIBUTE
                )
            try:
                texts.append(format_key_value(value))
            except EvaluationError as exc:
                raise EvaluationError(f"key attribute {quote(name)}: {exc}", exc.cause) from None
        return self._assemble(texts)


def _split_leftmost(body: str, separators: Sequence[str]) -> tuple[list[str] | None, int]:
    """Split ``body`` at the first occurrence of each separator in turn: ``(values, -1)``, or
    ``(None, i)`` when separator ``i`` is not found (then no split exists)."""
    values: list[str] = []
    pos = 0
    for i, separator in enumerate(separators):
        at = body.find(separator, pos)
        if at < 0:
            return None, i
        values.append(body[pos:at])
        pos = at + len(separator)
    values.append(body[pos:])
    return values, -1


def _split_rightmost(body: str, separators: Sequence[str]) -> list[str]:
    """Split ``body`` at the last occurrence of each separator, from the end; only called when
    :func:`_split_leftmost` found a split, so every separator is found."""
    values: list[str] = []
    end = len(body)
    for separator in reversed(separators):
        at = body.rfind(separator, 0, end)
        assert at >= 0, "a leftmost split exists, so a rightmost one does"
        values.append(body[at + len(separator) : end])
        end = at
    values.append(body[:end])
    values.reverse()
    return values

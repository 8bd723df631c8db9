"""Rule definitions: pydantic models, YAML loading and Python registration (pure, no I/O but files).

A rule says *what* to count or sum (``delta``), over *which* items (``match``), under *which*
aggregate (``key``)::

    rules:
      - name: delay_minutes_by_carrier
        description: Total departure delay in minutes per carrier
        match: {status: departed}
        key: "{carrier}"
        delta: {attribute: dep_delay}
        leaderboard: true

Loading a file or a directory and building rules in Python give the same validated
:class:`RuleSet`. Every validation problem raises :class:`~aggregator.core.exceptions.RuleError`
whose message names the file, the rule and the field.

Rule files are read with :class:`RuleLoader`: YAML 1.2 core-schema scalars (only ``true`` /
``false`` are booleans, so ``yes``, ``on`` or ``NO`` stay strings; integers are decimal only;
``12:30`` and dates stay strings), every number becomes an exact ``Decimal`` built from its text,
and a key given twice in one mapping is an error.

Loading is hardened against hostile or broken files: a file over :data:`MAX_RULE_FILE_BYTES`, a
file that is not UTF-8, control characters, a document expanding to more than
:data:`MAX_YAML_NODES` nodes through aliases or merge keys ("billion laughs"), a recursive
alias, or nesting deeper than :data:`MAX_YAML_DEPTH` is rejected in bounded time and memory,
with one line per problem naming the file (and the line and column, or the rule and field).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, DecimalException, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from aggregator.core.conditions import (
    MISSING,
    Condition,
    ConditionSyntaxError,
    MatchAll,
    dynamodb_number_problem,
    parse_match,
)
from aggregator.core.exceptions import EvaluationError, FailureCause, RuleError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.numbers import CONTEXT
from aggregator.core.text import MAX_QUOTED_CHARS, MAX_REASON_CHARS, quote
from aggregator.core.windows import (
    EVENT_TIME_UNITS,
    EventTimeUnit,
    Granularity,
    bucket_text,
    event_time_seconds,
    parse_duration,
)

__all__ = [
    "MAX_RULE_FILE_BYTES",
    "MAX_SORT_KEY_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "Bucket",
    "Contribution",
    "DeltaSpec",
    "KeyTemplate",
    "Rule",
    "RuleLoader",
    "RuleSet",
    "Window",
    "derived_attribute_indexes",
    "derived_attribute_problems",
    "load_rules",
    "rule",
]

RULE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$"

MAX_SORT_KEY_BYTES = 1024
"""Longest sort key DynamoDB accepts, in UTF-8 bytes (DynamoDB Developer Guide, "Service,
account, and table quotas": sort key length 1 to 1,024 bytes). A rule whose literal key text
alone cannot fit is rejected when it loads; longer keys built from item values are record
failures (dead-lettered) in the engine."""

BUCKET_TEXT_BYTES = len("2013-01-01T05:00:00Z")
"""Length of a bucket start in a windowed aggregate's sort key (fixed-width UTC text)."""

MAX_RULE_FILE_BYTES = 1024 * 1024
"""Largest rule file read (1 MiB); a larger one is rejected before parsing."""

MAX_YAML_NODES = 100_000
"""Most YAML nodes a rule file may expand to, aliases (``*a``) and merge keys (``<<: *a``)
counted with their full expansion (a few hundred bytes of nested aliases can otherwise expand
to billions of nodes). The shipped definitions have a few hundred."""

MAX_YAML_DEPTH = 100
"""Deepest nesting of YAML collections, through aliases too. Rule files need about 10 levels; a
match with ``and`` nested :data:`~aggregator.core.conditions.MAX_MATCH_DEPTH` times needs about
70, so that limit (with its clearer message) is met first. Keeps the recursive composer, merge-
key flattening and validation far from Python's recursion limit."""


def _plain(value: Any) -> str:
    """A number for a message: as it is (``1E+20``) when short, else a bounded quote."""
    text = str(value)
    return text if len(text) <= MAX_QUOTED_CHARS else quote(text)


def _name(name: Any) -> str:
    """A rule name for a message: valid names (at most 100 characters) are quoted whole."""
    return quote(name, limit=100)


def _names(names: Iterable[str], most: int = 20) -> str:
    """Comma-separated rule names, at most ``most`` of them (then how many there are)."""
    listed = list(names)
    shown = ", ".join(listed[:most]) or "none"
    return shown if len(listed) <= most else f"{shown}, … ({len(listed)} rules)"


_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every character :meth:`str.splitlines` splits at."""


def _one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` on one line (each line break escaped, ``\\n``), cut at ``limit`` characters."""
    text = _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unencodable(text: str) -> str | None:
    """Why UTF-8 (so DynamoDB) cannot hold ``text``: a lone surrogate, or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds {quote(text[exc.start])} at character {exc.start + 1}, a lone surrogate "
            "that UTF-8 cannot encode"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Key templates
# ---------------------------------------------------------------------------------------------


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
        raise EvaluationError(f"key number {_plain(value)}: {problem}")
    kind = "null" if value is None else type(value).__name__
    raise EvaluationError(
        f"key attribute has unsupported type {kind}; use a string, number or bool",
        FailureCause.WRONG_TYPE,
    )


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
        if not isinstance(template, str) or not template:
            raise ValueError("key must be a non-empty string such as '{carrier}' or 'TOTAL'")
        shown = quote(template)
        problem = _unencodable(template)
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


# ---------------------------------------------------------------------------------------------
# Deltas
# ---------------------------------------------------------------------------------------------


def _to_decimal(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, int | float | str | Decimal):
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            raise ValueError(f"expected a number, got {quote(value)}") from None
        if not number.is_finite():
            raise ValueError(f"expected a finite number, got {quote(value)}")
        problem = dynamodb_number_problem(number)
        if problem:
            raise ValueError(problem)
        return number
    raise ValueError(f"expected a number, got {type(value).__name__}")


class DeltaSpec(BaseModel):
    """How much one matching item contributes: a constant or a numeric attribute.

    YAML: ``delta: 1`` (the default), ``delta: "2.5"``, or ``delta: {attribute: dep_delay}``.
    The amount is always a ``Decimal``. A constant must be a nonzero number DynamoDB can store
    (``0``, ``"0"``, ``0.0`` and ``-0`` count nothing and are rejected).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    constant: Decimal | None = None
    attribute: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return data
        return {"constant": _to_decimal(data)}

    @field_validator("constant", mode="before")
    @classmethod
    def _constant(cls, value: Any) -> Any:
        return None if value is None else _to_decimal(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> DeltaSpec:
        if (self.constant is None) == (self.attribute is None):
            raise ValueError("give either a number (delta: 1) or {attribute: NAME}, not both")
        if self.attribute is not None and not self.attribute:
            raise ValueError("attribute name must not be empty")
        if self.constant is not None and self.constant == 0:
            raise ValueError(
                f"a delta of {_plain(self.constant)} counts nothing; give a nonzero number such "
                "as 1, or {attribute: NAME}"
            )
        return self

    def attributes(self) -> frozenset[str]:
        return frozenset() if self.attribute is None else frozenset((self.attribute,))

    def evaluate(self, image: Mapping[str, Any]) -> Decimal:
        """The amount for one image.

        Raises
        ------
        EvaluationError
            When the delta attribute is missing or not a number.
        """
        if self.constant is not None:
            return self.constant
        value = image.get(self.attribute, MISSING)
        if value is MISSING:
            raise EvaluationError(
                f"delta attribute {quote(self.attribute)} is missing",
                FailureCause.MISSING_ATTRIBUTE,
            )
        if not isinstance(value, Decimal) or isinstance(value, bool):
            kind = "null" if value is None else type(value).__name__
            raise EvaluationError(
                f"delta attribute {quote(self.attribute)} is {kind}, not a number",
                FailureCause.WRONG_TYPE,
            )
        return value


# ---------------------------------------------------------------------------------------------
# Time windows
# ---------------------------------------------------------------------------------------------


GranularityField = Annotated[Granularity, BeforeValidator(Granularity.parse)]


@dataclass(frozen=True, slots=True)
class Bucket:
    """The time bucket of one windowed aggregate item.

    Attributes
    ----------
    granularity
        Its label: ``minute``, ``hour``, ``day`` or ``"<n>s"``.
    start
        Bucket start, epoch seconds (UTC-aligned).
    text
        ``start`` as fixed-width UTC text, ``2013-01-01T05:00:00Z`` (sorts in time order).
    expires
        The item's TTL, epoch seconds: bucket end plus the rule's retention; ``None`` when the
        rule keeps buckets forever.
    """

    granularity: str
    start: int
    text: str
    expires: int | None

    def suffix(self) -> str:
        """The sort-key suffix after the key: ``"<granularity>#<bucket start text>"``."""
        return f"{self.granularity}#{self.text}"

    def expired(self, now: float) -> bool:
        """Whether the bucket is past its retention at ``now`` (epoch seconds): its TTL is at or
        before ``now``, so DynamoDB may delete it at any moment."""
        return self.expires is not None and self.expires <= now


class Window(BaseModel):
    """Time bucketing of a rule: each matching item counts in one bucket per granularity.

    YAML::

        window:
          time: insertUtcTime          # the event-time attribute of the image
          unit: epoch_milliseconds     # epoch_seconds | epoch_milliseconds | iso8601
          granularities: [hour, minute]
          retention: 25h               # optional; "90m", "2d", "1h30m" or seconds

    Attributes
    ----------
    time
        Image attribute holding the event time.
    unit
        One of :data:`aggregator.core.windows.EVENT_TIME_UNITS`. ISO 8601 times need a UTC offset.
    granularities
        One or more bucket sizes (``minute``, ``hour``, ``day`` or whole seconds), finest last
        after validation sorts them coarsest first; each size must be a multiple of every smaller
        one so that window queries can combine them.
    retention
        Seconds a bucket is kept after its end: its items get ``ttl = bucket end + retention``
        (epoch seconds), and deltas aimed at a bucket past that are skipped and counted, never
        recreating an expired bucket. ``None``: buckets are kept forever.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    time: str = Field(min_length=1)
    unit: EventTimeUnit
    granularities: tuple[GranularityField, ...]
    retention: int | None = None

    @field_validator("unit", mode="before")
    @classmethod
    def _unit(cls, value: Any) -> Any:
        if value not in EVENT_TIME_UNITS:
            raise ValueError(
                f"unit must be one of {', '.join(EVENT_TIME_UNITS)}, got {quote(value)}"
            )
        return value

    @field_validator("granularities", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | int | Decimal) else value

    @field_validator("granularities")
    @classmethod
    def _nested(cls, value: tuple[Granularity, ...]) -> tuple[Granularity, ...]:
        if not value:  # checked here: a min_length would repeat every item's own error
            raise ValueError("give at least one granularity, e.g. [hour, minute]")
        ordered = tuple(sorted(value, key=lambda g: g.seconds, reverse=True))
        sizes = [g.seconds for g in ordered]
        if len(set(sizes)) != len(sizes):
            raise ValueError("a granularity is listed twice")
        for coarse, fine in itertools.pairwise(ordered):
            if coarse.seconds % fine.seconds:
                raise ValueError(
                    f"{coarse.label} ({coarse.seconds} s) is not a multiple of {fine.label} "
                    f"({fine.seconds} s); window queries need nested buckets"
                )
        return ordered

    @field_validator("retention", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @property
    def finest(self) -> Granularity:
        return self.granularities[-1]

    def granularity(self, label: str) -> Granularity:
        """The granularity called ``label``.

        Raises
        ------
        ValueError
            If the window has none of that name.
        """
        for g in self.granularities:
            if g.label == label:
                return g
        known = ", ".join(g.label for g in self.granularities)
        raise ValueError(f"no granularity {quote(label)}; this rule has {known}")

    def bucket(self, granularity: Granularity, start: int) -> Bucket:
        """The bucket of ``granularity`` starting at ``start`` (epoch seconds, aligned), with
        its TTL."""
        expires = None if self.retention is None else start + granularity.seconds + self.retention
        return Bucket(granularity.label, start, bucket_text(start), expires)

    def buckets(self, image: Mapping[str, Any]) -> list[Bucket]:
        """One bucket per granularity for an image's event time.

        Raises
        ------
        EvaluationError
            When the time attribute is missing or not a valid time in the declared unit.
        """
        value = image.get(self.time, MISSING)
        if value is MISSING:
            raise EvaluationError(
                f"time attribute {quote(self.time)} is missing", FailureCause.MISSING_ATTRIBUTE
            )
        try:
            seconds = event_time_seconds(value, self.unit)
        except EvaluationError as exc:
            raise EvaluationError(f"time attribute {quote(self.time)}: {exc}", exc.cause) from None
        return [self.bucket(g, g.start(seconds)) for g in self.granularities]


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------


class _FieldError(ValueError):
    """A problem found by a whole-rule check that belongs to one field: ``path`` names it
    (``key``), so messages say ``field 'key'`` rather than ``field '(rule)'``."""

    def __init__(self, path: str, message: str) -> None:
        self.parts: tuple[str | int, ...] = (path,)
        self.message = message
        super().__init__(message)


def _parse_condition(value: Any) -> Condition:
    if isinstance(value, Condition):
        return value
    return parse_match(value)  # ConditionSyntaxError is a ValueError carrying its sub-path


def _parse_key(value: Any) -> KeyTemplate:
    if isinstance(value, KeyTemplate):
        return value
    return KeyTemplate.parse(value)


MatchField = Annotated[Condition, BeforeValidator(_parse_condition)]
KeyField = Annotated[KeyTemplate, BeforeValidator(_parse_key)]


class Rule(BaseModel):
    """One aggregation rule.

    Attributes
    ----------
    name
        Unique within a rule set; letters, digits, ``_ . -``, starting with a letter; it prefixes
        the sort key of every aggregate item of the rule (``"<name>#<key>"``).
    match
        Condition on an item image (see :mod:`aggregator.core.conditions`); default: every item.
    key
        Key template over image attributes, or a literal.
    delta
        Amount per matching item (``Decimal``), constant or attribute.
    ttl_deletes
        ``keep`` (default): a REMOVE made by DynamoDB's TTL (``userIdentity.principalId ==
        "dynamodb.amazonaws.com"``) retracts nothing, so counters of expiring raw events do not
        shrink. ``retract``: treat it like any delete.
    leaderboard
        Also put the aggregate items into the sparse ``leaderboard`` GSI for top-N queries.
    window
        Optional :class:`Window`: count per time bucket of an event-time attribute; the sort key
        becomes ``"<name>#<key>#<granularity>#<bucket start>"``.
    source
        Optional name of another rule whose aggregates are this rule's input (a *derived*
        rule): its images are the source aggregate item before and after each change, with
        attributes ``value`` (the counter), ``key`` (the source key as text) and ``rule``, plus
        ``granularity`` and ``bucket`` for windowed sources. A source aggregate whose value is 0
        counts as absent. ``key: "{value}"`` gives a histogram (how many keys have each value),
        a literal key a distinct count (how many keys have a non-zero value).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(pattern=RULE_NAME_PATTERN)
    description: str = ""
    match: MatchField = Field(default_factory=MatchAll)
    key: KeyField
    delta: DeltaSpec = Field(default_factory=lambda: DeltaSpec(constant=Decimal(1)))
    ttl_deletes: Literal["keep", "retract"] = "keep"
    leaderboard: StrictBool = False
    window: Window | None = None
    source: str | None = Field(default=None, pattern=RULE_NAME_PATTERN)

    @model_validator(mode="after")
    def _window_without_leaderboard(self) -> Rule:
        if self.window is not None and self.leaderboard:
            raise ValueError(
                "leaderboard cannot be combined with window: the index would rank buckets of "
                "all times together"
            )
        problem = self._sort_key_problem()
        if problem:
            raise _FieldError("key", problem)
        return self

    def _sort_key_problem(self) -> str | None:
        """Why no aggregate of this rule could have a sort key DynamoDB accepts, or ``None``.

        The sort key is ``<name>#<key>`` (``<name>#<key>#<granularity>#<bucket start>`` for
        windowed rules) and must be at most :data:`MAX_SORT_KEY_BYTES` UTF-8 bytes (DynamoDB
        Developer Guide, "Service, account, and table quotas": sort key length 1 to 1,024
        bytes). Literal key text goes in as it is (only substituted values are escaped), so the
        rule name, the literal parts of the key and, for windowed rules, the suffix of the
        longest granularity label are a lower bound: reached by a literal key, and by a
        templated one whose values are empty.
        """
        prefix = len(self.name.encode("utf-8")) + 1
        literal = sum(len(part.encode("utf-8")) for part in self.key.literals)
        suffix = 0
        if self.window is not None:
            label = max((g.label for g in self.window.granularities), key=len)
            suffix = len(f"#{label}#".encode()) + BUCKET_TEXT_BYTES
        size = prefix + literal + suffix
        if size <= MAX_SORT_KEY_BYTES:
            return None
        parts = f"'{self.name}#': {prefix}, key"
        parts += f": {literal}" if self.key.is_literal else f" outside its placeholders: {literal}"
        if suffix:
            parts += f", '#{label}#YYYY-MM-DDTHH:MM:SSZ': {suffix}"
        at_least = "" if self.key.is_literal else "at least "
        return (
            f"the aggregate's sort key would be {at_least}{size} bytes ({parts}), over "
            f"DynamoDB's {MAX_SORT_KEY_BYTES}-byte limit for a sort key"
        )

    @property
    def is_derived(self) -> bool:
        return self.source is not None

    def attributes(self) -> frozenset[str]:
        """Names of every image attribute this rule reads (match, key, delta and time)."""
        names = self.match.attributes() | self.key.attributes() | self.delta.attributes()
        return names | ({self.window.time} if self.window else set())

    def contributions(self, image: Mapping[str, Any] | None) -> list[Contribution]:
        """What one image adds: one :class:`Contribution` (one per granularity for windowed
        rules), or none if the image does not match.

        Raises
        ------
        EvaluationError
            When the image matches but its key, delta or event time cannot be evaluated.
        """
        if image is None or not self.match.matches(image):
            return []
        encoded, display = self.key.render(image)
        amount = self.delta.evaluate(image)
        if self.window is None:
            return [Contribution(encoded, display, amount, None)]
        return [
            Contribution(f"{encoded}#{b.suffix()}", display, amount, b)
            for b in self.window.buckets(image)
        ]


class Contribution(NamedTuple):
    """What one image adds to one aggregate item of a rule.

    ``key`` is the encoded sort-key part after ``"<rule>#"`` (with ``"#<granularity>#<bucket>"``
    for windowed rules), ``display`` the key with raw values, ``bucket`` the time bucket or
    ``None``.
    """

    key: str
    display: str
    amount: Decimal
    bucket: Bucket | None


class RuleSet(BaseModel):
    """A validated, ordered collection of rules with unique names.

    Build with :func:`load_rules` (YAML) or :meth:`RuleSet.of` (Python).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    rules: tuple[Rule, ...]

    @field_validator("rules")
    @classmethod
    def _unique(cls, rules: tuple[Rule, ...], info: ValidationInfo) -> tuple[Rule, ...]:
        first: dict[str, int] = {}
        duplicates: list[tuple[int, int]] = []
        for index, r in enumerate(rules):
            if r.name in first:
                duplicates.append((index, first[r.name]))
            else:
                first[r.name] = index
        if duplicates:
            raise _DuplicateNames(rules, duplicates)
        # one file of several: the graph is checked once all files are loaded
        partial = bool(info.context and info.context.get("partial"))
        problems = [] if partial else graph_problems(rules)
        if problems:
            raise _GraphProblems(rules, problems)
        return rules

    @classmethod
    def of(cls, *rules: Rule) -> RuleSet:
        """A rule set from rules built in Python (see :func:`rule`).

        Raises
        ------
        RuleError
            On duplicate names.
        """
        try:
            return cls(rules=rules)
        except ValidationError as exc:
            raise RuleError(
                _format_errors(exc, "<python>", {"rules": [r.model_dump() for r in rules]})
            ) from None

    def __iter__(self):  # type: ignore[override]
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, name: str) -> Rule:
        """The rule called ``name``.

        Raises
        ------
        RuleError
            If there is none.
        """
        for r in self.rules:
            if r.name == name:
                return r
        known = _names(r.name for r in self.rules)
        raise RuleError(f"no rule named {quote(name, limit=100)}; known rules: {known}")

    def attributes(self) -> frozenset[str]:
        """Every image attribute any rule reads (the engine deserializes only these)."""
        return frozenset().union(*(r.attributes() for r in self.rules))

    @property
    def base_rules(self) -> tuple[Rule, ...]:
        """Rules over the user's items (not derived)."""
        return tuple(r for r in self.rules if not r.is_derived)

    @property
    def derived_rules(self) -> tuple[Rule, ...]:
        """Rules whose input is another rule's aggregates."""
        return tuple(r for r in self.rules if r.is_derived)

    def derived_from(self, source: str) -> tuple[Rule, ...]:
        """The derived rules reading ``source``'s aggregates."""
        return tuple(r for r in self.rules if r.source == source)

    def lineage(self, name: str) -> RuleSet:
        """The rule called ``name`` with the chain of rules it derives from (sources first), as
        a rule set of its own: over records of its source's aggregates, an engine built on it
        evaluates that rule alone (over user items it also evaluates the chain's base rule).

        Raises
        ------
        RuleError
            If there is no such rule.
        """
        chain = [self.get(name)]
        while chain[0].source is not None:
            chain.insert(0, self.get(chain[0].source))
        return RuleSet(rules=tuple(chain))

    @property
    def sources(self) -> tuple[str, ...]:
        """Names of rules that some derived rule reads, sorted: their aggregate items' stream
        records must reach the handler (see :func:`aggregator.runtime.filters.filter_criteria`)."""
        return tuple(sorted({r.source for r in self.rules if r.source is not None}))


def graph_problems(rules: Sequence[Rule]) -> list[tuple[int, str]]:
    """Problems of the derived-rule graph as ``(rule index, message)``: unknown sources and
    cycles (each cycle reported once, at its first rule, naming every rule on it)."""
    index = {r.name: i for i, r in enumerate(rules)}
    problems: list[tuple[int, str]] = []
    for i, r in enumerate(rules):
        if r.source is not None and r.source not in index:
            known = _names(sorted(index))
            problems.append((i, f"unknown source rule {_name(r.source)}; known rules: {known}"))
    reported: set[str] = set()
    for r in rules:
        path = [r.name]
        current = r
        while current.source is not None and current.source in index:
            if current.source in path:
                cycle = [*path[path.index(current.source) :], current.source]
                if not reported.intersection(cycle):
                    reported.update(cycle)
                    first = min(cycle[:-1], key=index.__getitem__)
                    start = cycle.index(first)
                    ordered = cycle[start:-1] + cycle[:start] + [first]
                    problems.append(
                        (index[first], "derived rules form a cycle: " + " -> ".join(ordered))
                    )
                break
            path.append(current.source)
            current = rules[index[current.source]]
    return sorted(problems)


def derived_attribute_indexes(
    rules: Sequence[Rule], layout: TableLayout = DEFAULT_LAYOUT
) -> list[tuple[int, str]]:
    """Derived rules reading attributes their source's aggregate items never have, as
    ``(rule index, message)``: a typo such as ``{vlaue}``, or ``bucket`` / ``granularity`` of a
    source without a window. Rules whose source is unknown are skipped
    (:func:`graph_problems` reports them).

    An aggregate item has ``layout``'s partition key, sort key and value attribute, ``key`` and
    ``rule``; a windowed source's also ``granularity`` and ``bucket``, and with a retention
    ``layout.ttl_attribute``.
    """
    index = {r.name: i for i, r in enumerate(rules)}
    problems: list[tuple[int, str]] = []
    for i, r in enumerate(rules):
        if r.source is None or r.source not in index:
            continue
        source = rules[index[r.source]]
        known = {layout.partition_key, layout.sort_key, layout.value_attribute, "key", "rule"}
        if source.window is not None:
            known |= {"granularity", "bucket"}
            if source.window.retention is not None:
                known.add(layout.ttl_attribute)
        unknown = sorted(r.attributes() - known)
        if unknown:
            reads = ", ".join(quote(name) for name in unknown[:10])
            if len(unknown) > 10:
                reads += f", … ({len(unknown)} attributes)"
            problems.append(
                (
                    i,
                    f"reads {reads}, which the aggregates of {_name(r.source)} do not have; "
                    f"they have {', '.join(sorted(known))}",
                )
            )
    return problems


def derived_attribute_problems(
    rules: RuleSet | Sequence[Rule], layout: TableLayout = DEFAULT_LAYOUT
) -> list[str]:
    """Derived rules reading attributes their source's aggregate items never have, one line
    each: ``rule 'bad', field 'source': reads 'carrier', which the aggregates of 'src' do not
    have; they have key, pk, rule, sk, value``.

    :func:`load_rules` reports these (with the file) for rules from files; the engine checks
    rule sets built in Python. See :func:`derived_attribute_indexes` for what aggregates have.
    """
    listed = tuple(rules)
    return [
        f"rule {_name(listed[i].name)}, field 'source': {message}"
        for i, message in derived_attribute_indexes(listed, layout)
    ]


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


def rule(
    name: str,
    *,
    key: str,
    match: Mapping[str, Any] | None = None,
    delta: int | str | Decimal | Mapping[str, Any] = 1,
    description: str = "",
    ttl_deletes: Literal["keep", "retract"] = "keep",
    leaderboard: bool = False,
    window: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> Rule:
    """Build one validated rule from Python, with the same fields and checks as YAML.

    ``window`` takes the YAML mapping (``{"time": "ts", "unit": "epoch_seconds",
    "granularities": ["hour", "minute"], "retention": "25h"}``); ``source`` names the rule a
    derived rule reads (the graph is checked when the rules form a :class:`RuleSet`).

    Examples
    --------
    >>> r = rule("paths_per_player", match={"sk": {"prefix": "PATH#"}}, key="{pk}")
    >>> r.key.placeholders
    ('pk',)
    >>> rule("players_by_paths", source="paths_per_player", key="{value}").source
    'paths_per_player'

    Raises
    ------
    RuleError
        Naming the rule and field, e.g. ``<python>: rule 'x', field 'key': ...``.
    """
    data = {
        "name": name,
        "description": description,
        "match": match,
        "key": key,
        "delta": delta,
        "ttl_deletes": ttl_deletes,
        "leaderboard": leaderboard,
        "window": window,
        "source": source,
    }
    try:
        return Rule.model_validate(data)
    except ValidationError as exc:
        raise RuleError(
            _format_errors(exc, "<python>", {"rules": [data]}, prefix=("rules", 0))
        ) from None


# ---------------------------------------------------------------------------------------------
# Loading and error messages
# ---------------------------------------------------------------------------------------------


MAX_PROBLEMS_PER_FILE = 200
"""Most problem lines reported for one file (then a count of the rest)."""


def _source_name(path: Path | str) -> str:
    """A file name for messages, on one line."""
    return _one_line(str(path), limit=10 * MAX_REASON_CHARS)


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


# ---------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------

_YAML_TAG = "tag:yaml.org,2002:"

_INT_PATTERN = r"^[-+]?[0-9]+$"
_FLOAT_PATTERN = (
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_NUMBER = re.compile(f"{_INT_PATTERN}|{_FLOAT_PATTERN}")


class RuleFileLimitError(yaml.MarkedYAMLError):
    """A rule file's YAML is well-formed but unacceptable: it expands past
    :data:`MAX_YAML_NODES`, nests past :data:`MAX_YAML_DEPTH`, refers to itself through an
    alias, or holds a string UTF-8 cannot encode. ``problem`` says which, ``problem_mark``
    where."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(None, None, problem, mark)


class RuleLoader(yaml.SafeLoader):
    """A safe YAML loader with YAML 1.2 core-schema scalars, exact numbers and unique keys.

    Plain scalars resolve as in the YAML 1.2 core schema, not PyYAML's YAML 1.1 rules: booleans
    are only ``true``/``True``/``TRUE``/``false``/``False``/``FALSE`` (``yes``, ``on``, ``NO``
    stay strings); integers are decimal digits only (``0123`` is 123, never octal; ``0x1F`` and
    ``1_000`` stay strings); ``12:30`` and ``2024-01-01`` stay strings. Anchors, aliases and
    merge keys (``<<: *base``, ``<<: [*a, *b]``) work.

    Integers and floats become ``Decimal`` built from the scalar text, so
    ``1.2345678901234567890123`` stays exact; ``.inf`` and ``.nan`` become infinite and NaN
    ``Decimal`` values, which rule validation rejects; an explicit ``!!int`` / ``!!float`` must
    be written like a core-schema number. A key that appears twice in one mapping raises
    :class:`yaml.constructor.ConstructorError` marked at the second occurrence.

    Before anything is constructed (and before the duplicate-key check), the composed document
    is measured: :class:`RuleFileLimitError` when it expands to more than
    :data:`MAX_YAML_NODES` nodes through aliases and merge keys, nests deeper than
    :data:`MAX_YAML_DEPTH` (also through aliases), contains itself through an alias, or holds a
    lone surrogate (``"\\ud800"``). Composition itself stops at the same limits, so a file of
    10,000 nested ``[`` never reaches Python's recursion limit.

    Examples
    --------
    >>> yaml.load("a: 0.10000000000000000001\\nb: yes", Loader=RuleLoader)
    {'a': Decimal('0.10000000000000000001'), 'b': 'yes'}
    """

    # Replaces SafeLoader's YAML 1.1 table; filled below with the YAML 1.2 core schema.
    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    _composing_depth = 0
    _composed_nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        # PyYAML composes recursively (three frames per level): stop well before the
        # recursion limit, and stop a huge flat document before it is all in memory.
        depth = self._composing_depth + 1
        self._composed_nodes += 1
        if depth > MAX_YAML_DEPTH:
            raise RuleFileLimitError(_too_deep(), self.peek_event().start_mark)
        if self._composed_nodes > MAX_YAML_NODES:
            raise RuleFileLimitError(_too_many(aliases=False), self.peek_event().start_mark)
        self._composing_depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._composing_depth = depth - 1

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_expansion(node)
        self._check_unique_keys(node)
        return super().construct_document(node)

    @staticmethod
    def _check_expansion(root: yaml.Node) -> None:
        """Measure the document as construction would expand it, in time linear in its
        distinct nodes (iterative, memoized by node identity).

        Raises
        ------
        RuleFileLimitError
            Over :data:`MAX_YAML_NODES` nodes or :data:`MAX_YAML_DEPTH` levels once aliases
            and merge keys are expanded, a node containing itself, or a lone surrogate.
        """
        size: dict[int, int] = {}  # node id -> expanded node count, once finished
        height: dict[int, int] = {}  # node id -> expanded nesting depth, once finished
        open_nodes: set[int] = set()  # expanded, not finished: the current path
        shared = False
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        while stack:
            node, finished = stack.pop()
            key = id(node)
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = node.value
            elif isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            if finished:
                open_nodes.discard(key)
                total = 1 + sum(size[id(child)] for child in children)
                levels = 1 + max((height[id(child)] for child in children), default=0)
                if total > MAX_YAML_NODES:
                    raise RuleFileLimitError(_too_many(aliases=shared), node.start_mark)
                if levels > MAX_YAML_DEPTH:
                    raise RuleFileLimitError(_too_deep(), node.start_mark)
                size[key], height[key] = total, levels
                continue
            if key in size:
                shared = True
                continue
            if key in open_nodes:
                raise RuleFileLimitError(
                    "a collection contains itself through an alias (a recursive structure); "
                    "rule files must be trees",
                    node.start_mark,
                )
            if isinstance(node, yaml.ScalarNode):
                problem = _unencodable(node.value) if isinstance(node.value, str) else None
                if problem:
                    raise RuleFileLimitError(f"the text {problem}", node.start_mark)
                size[key], height[key] = 1, 1
                continue
            open_nodes.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) in size:
                    shared = True
                else:
                    stack.append((child, False))

    def _check_unique_keys(self, root: yaml.Node) -> None:
        # Before construction: merging (<<) rewrites mapping nodes in place.
        seen_nodes: set[int] = set()
        stack = [root]
        while stack:
            node = stack.pop()
            if id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)
            elif isinstance(node, yaml.MappingNode):
                keys: dict[Any, yaml.Node] = {}
                for key_node, value_node in node.value:
                    stack.extend((key_node, value_node))
                    if not isinstance(key_node, yaml.ScalarNode):
                        continue  # unhashable: construction reports it
                    if key_node.tag == _YAML_TAG + "merge":
                        continue
                    # Equal as dict keys (1 and 1.0 too): one would silently replace the other.
                    first = keys.setdefault(self.construct_object(key_node), key_node)
                    if first is not key_node:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"duplicate key {quote(key_node.value)} "
                            f"(also on line {first.start_mark.line + 1})",
                            key_node.start_mark,
                        )

    def construct_number(self, node: yaml.ScalarNode) -> Decimal:
        text = str(self.construct_scalar(node))
        special = {".inf": "Infinity", "+.inf": "Infinity", "-.inf": "-Infinity", ".nan": "NaN"}
        if _NUMBER.match(text):
            try:
                return Decimal(special.get(text.lower(), text))
            except InvalidOperation:  # pragma: no cover - the pattern admits decimals only
                pass
        raise yaml.constructor.ConstructorError(
            None, None, f"{quote(text)} is not a decimal number", node.start_mark
        )


def _too_many(*, aliases: bool) -> str:
    if aliases:
        return (
            f"the document expands to more than {MAX_YAML_NODES} YAML nodes through aliases "
            "('&a'/'*a') or merge keys ('<<'); write the rules out instead"
        )
    return (
        f"the document has more than {MAX_YAML_NODES} YAML nodes; split the rules into "
        "several files"
    )


def _too_deep() -> str:
    return (
        f"the document nests more than {MAX_YAML_DEPTH} levels deep (aliases included); "
        "rule files need far fewer"
    )


for _tag, _pattern, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", _INT_PATTERN, "-+0123456789"),
    ("float", _FLOAT_PATTERN, "-+.0123456789"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("merge", r"^(?:<<)$", "<"),
):
    RuleLoader.add_implicit_resolver(_YAML_TAG + _tag, re.compile(_pattern), list(_first))
for _tag in ("int", "float"):
    RuleLoader.add_constructor(_YAML_TAG + _tag, RuleLoader.construct_number)


def _position(text: str | bytes, offset: int) -> tuple[int, int]:
    """1-based ``(line, column)`` of ``offset`` in ``text`` (columns in characters)."""
    newline = "\n" if isinstance(text, str) else b"\n"
    line_start = text.rfind(newline, 0, offset) + 1  # type: ignore[arg-type]
    before = text[line_start:offset]
    if isinstance(before, bytes):
        before = before.decode("utf-8", errors="replace")
    return text.count(newline, 0, offset) + 1, len(before) + 1  # type: ignore[arg-type]


def _read_rule_file(path: Path, source: str) -> str:
    """The text of a rule file: at most :data:`MAX_RULE_FILE_BYTES`, strictly UTF-8 (a
    leading byte order mark is allowed).

    Raises
    ------
    RuleError
        When it cannot be read, is too large, or is not UTF-8 (naming line, column, byte
        offset and the bad byte).
    """
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_RULE_FILE_BYTES + 1)
            if len(raw) > MAX_RULE_FILE_BYTES:
                size = os.fstat(file.fileno()).st_size
                shown = f"{size} bytes" if size > MAX_RULE_FILE_BYTES else "larger"
                raise RuleError(
                    f"{source}: the file is {shown}, over the {MAX_RULE_FILE_BYTES}-byte (1 MiB) "
                    "limit for a rule file; split the rules into several files"
                )
    except OSError as exc:
        raise RuleError(
            f"{source}: cannot read rule file: {_one_line(exc.strerror or str(exc))}"
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _position(raw, exc.start)
        hint = ""
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            hint = " (it starts with a UTF-16 byte order mark)"
        raise RuleError(
            f"{source}: line {line}, column {column} (byte {exc.start}): byte "
            f"0x{raw[exc.start]:02x} is not valid UTF-8 ({exc.reason}); rule files must be "
            f"UTF-8{hint}"
        ) from None


def _parse_yaml(text: str, source: str) -> Any:
    """The YAML document of a rule file, through :class:`RuleLoader`.

    Raises
    ------
    RuleError
        One line with line and column: syntax errors, control characters, the loader's limits;
        never a ``RecursionError``.
    """
    try:
        return yaml.load(text, Loader=RuleLoader)  # a SafeLoader subclass
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        escape = f"\\x{char:02x}" if char < 0x100 else f"\\u{char:04x}"
        raise RuleError(
            f"{source}: line {line}, column {column}: invalid YAML: character "
            f"{chr(char)!r} (U+{char:04X}) is not allowed in YAML; remove it, or write "
            f'"{escape}" inside a double-quoted string'
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context_mark = getattr(exc, "context_mark", None)
        if isinstance(exc, yaml.composer.ComposerError) and exc.context and context_mark:
            # "second occurrence" / "but found another document" need their first half
            problem = f"{exc.context} on line {context_mark.line + 1}, {problem}"
        problem = _one_line(problem, limit=300)
        kind = "" if isinstance(exc, RuleFileLimitError) else "invalid YAML: "
        raise RuleError(f"{source}: {where}{kind}{problem}") from None
    except RecursionError:  # only when called near the recursion limit: the depth limit is far
        raise RuleError(
            f"{source}: the document nests too deeply to read; rule files need far fewer levels"
        ) from None


def _load_file(path: Path) -> list[Rule]:
    """The rules of one file (the derived-rule graph is checked by :func:`load_rules`).

    Raises
    ------
    RuleError
        One line per problem, each naming the file.
    """
    source = _source_name(path)
    data = _parse_yaml(_read_rule_file(path, source), source)
    if data is None:
        raise RuleError(f"{source}: field 'rules': the file is empty; expected 'rules: [...]'")
    if not isinstance(data, Mapping):
        raise RuleError(
            f"{source}: field '(top level)': expected a mapping with a 'rules' list, "
            f"got {type(data).__name__}"
        )
    problems = []
    if isinstance(data.get("rules"), list) and not data["rules"]:
        problems.append(f"{source}: field 'rules': the list is empty; give at least one rule")
    try:
        ruleset = RuleSet.model_validate(data, context={"partial": True})
    except ValidationError as exc:
        problems.append(_format_errors(exc, source, data))
    except RecursionError:  # as above; validation recurses less deeply than composing
        problems.append(f"{source}: the rules nest too deeply to validate")
    if problems:
        raise RuleError("\n".join(problems))
    return list(ruleset.rules)


def load_rules(
    path: str | Path | Iterable[str | Path], *, layout: TableLayout = DEFAULT_LAYOUT
) -> RuleSet:
    """Load and validate rules from a YAML file, a directory of YAML files, or several paths.

    Parameters
    ----------
    path
        A ``.yaml``/``.yml`` file; a directory (every ``*.yaml`` and ``*.yml`` in it, sorted by
        name, not recursive); or an iterable of such paths. Each file holds
        ``{version: 1, rules: [...]}`` (``version`` optional) with at least one rule.
    layout
        The table layout: names the attributes of aggregate items that derived rules may read
        (:func:`derived_attribute_indexes`).

    Returns
    -------
    RuleSet
        At least one rule.

    Raises
    ------
    RuleError
        With one line per problem, each naming the file (and the rule and field, or the line
        and column), e.g. ``definitions/flights.yaml: rule 'by_carrier', field 'key': ...``;
        also when a rule name appears in two files, a derived rule's source is unknown, forms a
        cycle or lacks an attribute the rule reads, a directory has no rule files, or the paths
        hold no rule at all. Files are read within the limits of :class:`RuleLoader` and
        :data:`MAX_RULE_FILE_BYTES`.
    """
    paths: list[Path] = []
    inputs = [path] if isinstance(path, str | Path) else list(path)
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
            if not found:
                raise RuleError(
                    f"{_source_name(p)}: no rule files (*.yaml, *.yml) in this directory"
                )
            paths.extend(found)
        elif p.exists():
            paths.append(p)
        else:
            raise RuleError(f"{_source_name(p)}: no such file or directory")
    rules: list[Rule] = []
    origin: dict[str, str] = {}
    errors: list[str] = []
    for p in paths:
        try:
            file_rules = _load_file(p)
        except RuleError as exc:
            errors.append(str(exc))
            continue
        for r in file_rules:
            if r.name in origin:
                errors.append(
                    f"{_source_name(p)}: rule {_name(r.name)}, field 'name': duplicate rule "
                    f"name (also defined in {origin[r.name]})"
                )
                continue
            origin[r.name] = _source_name(p)
            rules.append(r)
    if not errors:
        problems = graph_problems(rules) or derived_attribute_indexes(rules, layout)
        for index, message in problems:
            errors.append(
                f"{origin[rules[index].name]}: rule {_name(rules[index].name)}, "
                f"field 'source': {message}"
            )
    if errors:
        raise RuleError("\n".join(errors))
    if not rules:
        where = ", ".join(_source_name(p) for p in paths) or "no paths given"
        raise RuleError(f"{where}: no rules; give at least one rule")
    return RuleSet(rules=tuple(rules))

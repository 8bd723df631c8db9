"""The match language: declarative conditions on one item image (pure, no I/O).

A rule's ``match`` is a mapping from attribute names to tests, all of which must hold, plus the
combinators ``and`` (list), ``or`` (list) and ``not`` (one match). The vocabulary follows Lambda's
event-filter patterns so that simple rules can later be pushed down into ``FilterCriteria``::

    match:
      status: departed                    # equality (numbers compare as Decimal)
      origin: [JFK, LGA]                  # a list means "equals any of"
      carrier: {anything-but: [HA, OO]}   # present and equal to none of them
      tailnum: {exists: true}             # present (false: absent)
      sk: {prefix: "PATH#"}               # string starts with
      dep_delay: {numeric: [">", 0, "<=", 60]}
      or:
        - {dest: {in: [BOS]}}
        - not: {distance: {numeric: ["<", 500]}}

A test on a missing attribute is false (except ``exists: false``); a test on a value of another
type (``prefix`` on a number, ``numeric`` on a string) is false, never an error: matching is a
filter. Evaluation errors come only from a rule's key and delta.

Attributes are top-level attribute names of the image. A name starting with a backslash is
taken literally without that one backslash, so attributes called ``and``, ``or`` or ``not`` can
be tested too (and a name that itself starts with a backslash is written with two)::

    match:
      '\\not': {exists: true}     # the attribute "not", not the combinator
      '\\or': [a, b]              # the attribute "or" equals a or b

Numeric literals must be numbers DynamoDB can store (at most 38 significant digits, magnitude
from 1E-130 to 9.9999999999999999999999999999999999999E+125, or zero); anything else could
never equal a stored value and is rejected when the rule is loaded.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from aggregator.core.text import quote

__all__ = [
    "MAX_MATCH_DEPTH",
    "MISSING",
    "All",
    "Any_",
    "AnythingBut",
    "Condition",
    "ConditionSyntaxError",
    "Equals",
    "Exists",
    "MatchAll",
    "Not",
    "Numeric",
    "OneOf",
    "Prefix",
    "dynamodb_number_problem",
    "parse_match",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Sentinel returned by an image lookup for an absent attribute."""


MatchPath = tuple[str | int, ...]
"""Where in a ``match`` mapping: attribute names, operators and list indexes, outermost first."""


class ConditionSyntaxError(ValueError):
    """An invalid ``match`` mapping.

    Attributes
    ----------
    parts
        The offending part's :data:`MatchPath`, e.g. ``("a.b", "numeric", 0)``: exact even when
        attribute names contain dots or brackets.
    path
        The same as text, e.g. ``a.b.numeric[0]``.
    message
        What is wrong, one line.
    """

    def __init__(self, path: str | MatchPath, message: str) -> None:
        self.parts: MatchPath = (
            tuple(path) if isinstance(path, tuple) else ((path,) if path else ())
        )
        self.path = _path_text(self.parts)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


def _path_text(parts: MatchPath) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# DynamoDB Developer Guide, "Supported data types and naming rules", Number: up to 38 significant
# digits; positive range 1E-130 to 9.9999999999999999999999999999999999999E+125, negatives alike.
_MAX_DIGITS = 38
_MIN_ADJUSTED_EXPONENT = -130
_MAX_ADJUSTED_EXPONENT = 125


def dynamodb_number_problem(number: Decimal) -> str | None:
    """Why DynamoDB cannot store the finite ``number``, or ``None`` if it can.

    Leading and trailing zeros are not significant (``1E+50`` has one digit); zero is valid.

    Examples
    --------
    >>> dynamodb_number_problem(Decimal("-9.5E+125")) is None
    True
    >>> dynamodb_number_problem(Decimal("1E-131"))
    '1E-131 is too small for DynamoDB (smallest nonzero magnitude 1E-130)'
    """
    if not number:
        return None
    digits = "".join(map(str, number.as_tuple().digits)).strip("0")
    if len(digits) > _MAX_DIGITS:
        return f"{len(digits)} significant digits; DynamoDB numbers have at most {_MAX_DIGITS}"
    if number.adjusted() > _MAX_ADJUSTED_EXPONENT:
        return (
            f"{number} is too large for DynamoDB "
            "(largest magnitude 9.9999999999999999999999999999999999999E+125)"
        )
    if number.adjusted() < _MIN_ADJUSTED_EXPONENT:
        return f"{number} is too small for DynamoDB (smallest nonzero magnitude 1E-130)"
    return None


def _lookup(image: Mapping[str, Any], name: str) -> Any:
    return image.get(name, MISSING)


def _same(expected: Any, actual: Any) -> bool:
    """Equality without Python's cross-type surprises (True == 1, '1' != 1)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, Decimal):
        return isinstance(actual, Decimal) and actual == expected
    return type(actual) is type(expected) and actual == expected


def _shown(value: Any) -> str:
    """A value as an explanation shows it: text as it is, numbers in plain form, ``(missing)``
    for an absent attribute, other values by their repr; at most 40 characters."""
    if value is MISSING:
        return "(missing)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = value
        # text that reads as a number or a literal is said to be text (a string "12.5")
        if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|true|false|null", value):
            text = f"text {value!r}"
    else:
        text = str(value) if isinstance(value, Decimal) else repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


class Condition:
    """Base class: ``matches(image) -> bool``, the attribute names it reads, and
    ``first_failure(image)``, which explains a non-match with the same tests."""

    def matches(self, image: Mapping[str, Any]) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def expected(self) -> str:  # pragma: no cover - abstract
        """What the test wants, in words (``expected DEPARTED``)."""
        raise NotImplementedError

    def first_failure(self, image: Mapping[str, Any]) -> str | None:
        """``None`` when the image matches, else the first test that fails and the value it
        saw, e.g. ``status: expected DEPARTED, got SCHEDULED`` (decided by :meth:`matches`
        itself, so an explanation never disagrees with the evaluation)."""
        if self.matches(image):
            return None
        attribute = getattr(self, "attribute", None)
        if attribute is None:  # pragma: no cover - leaves have an attribute
            return self.expected()
        return f"{attribute}: {self.expected()}, got {_shown(_lookup(image, attribute))}"

    def attributes(self) -> frozenset[str]:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class MatchAll(Condition):
    """Matches every image (an empty or omitted ``match``)."""

    def matches(self, image: Mapping[str, Any]) -> bool:
        return True

    def expected(self) -> str:
        return "anything"

    def attributes(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Equals(Condition):
    attribute: str
    value: Any

    def matches(self, image: Mapping[str, Any]) -> bool:
        return _same(self.value, _lookup(image, self.attribute))

    def expected(self) -> str:
        return f"expected {_shown(self.value)}"

    def attributes(self) -> frozenset[str]:
        return frozenset((self.attribute,))


@dataclass(frozen=True, slots=True)
class OneOf(Condition):
    attribute: str
    values: tuple[Any, ...]

    def matches(self, image: Mapping[str, Any]) -> bool:
        actual = _lookup(image, self.attribute)
        return any(_same(v, actual) for v in self.values)

    def expected(self) -> str:
        return "expected one of " + ", ".join(_shown(v) for v in self.values)

    def attributes(self) -> frozenset[str]:
        return frozenset((self.attribute,))


@dataclass(frozen=True, slots=True)
class AnythingBut(Condition):
    attribute: str
    values: tuple[Any, ...]

    def matches(self, image: Mapping[str, Any]) -> bool:
        actual = _lookup(image, self.attribute)
        return actual is not MISSING and not any(_same(v, actual) for v in self.values)

    def expected(self) -> str:
        return "expected anything but " + ", ".join(_shown(v) for v in self.values)

    def attributes(self) -> frozenset[str]:
        return frozenset((self.attribute,))


@dataclass(frozen=True, slots=True)
class Prefix(Condition):
    attribute: str
    prefix: str

    def matches(self, image: Mapping[str, Any]) -> bool:
        actual = _lookup(image, self.attribute)
        return isinstance(actual, str) and actual.startswith(self.prefix)

    def expected(self) -> str:
        return f"expected text starting with {_shown(self.prefix)}"

    def attributes(self) -> frozenset[str]:
        return frozenset((self.attribute,))


@dataclass(frozen=True, slots=True)
class Exists(Condition):
    attribute: str
    present: bool = True

    def matches(self, image: Mapping[str, Any]) -> bool:
        return (_lookup(image, self.attribute) is not MISSING) is self.present

    def expected(self) -> str:
        return "expected to exist" if self.present else "expected to be absent"

    def attributes(self) -> frozenset[str]:
        return frozenset((self.attribute,))


_COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True, slots=True)
class Numeric(Condition):
    attribute: str
    bounds: tuple[tuple[str, Decimal], ...]

    def matches(self, image: Mapping[str, Any]) -> bool:
        actual = _lookup(image, self.attribute)
        if not isinstance(actual, Decimal) or isinstance(actual, bool):
            return False
        return all(_COMPARATORS[op](actual, bound) for op, bound in self.bounds)

    def expected(self) -> str:
        return "expected a number " + " and ".join(f"{op} {b}" for op, b in self.bounds)

    def attributes(self) -> frozenset[str]:
        return frozenset((self.attribute,))


@dataclass(frozen=True, slots=True)
class All(Condition):
    conditions: tuple[Condition, ...]

    def matches(self, image: Mapping[str, Any]) -> bool:
        return all(c.matches(image) for c in self.conditions)

    def expected(self) -> str:
        return "all of: " + "; ".join(c.expected() for c in self.conditions)

    def first_failure(self, image: Mapping[str, Any]) -> str | None:
        for c in self.conditions:
            failure = c.first_failure(image)
            if failure is not None:
                return failure
        return None

    def attributes(self) -> frozenset[str]:
        return frozenset().union(*(c.attributes() for c in self.conditions))


@dataclass(frozen=True, slots=True)
class Any_(Condition):
    conditions: tuple[Condition, ...]

    def matches(self, image: Mapping[str, Any]) -> bool:
        return any(c.matches(image) for c in self.conditions)

    def expected(self) -> str:
        return "one of: " + "; ".join(c.expected() for c in self.conditions)

    def first_failure(self, image: Mapping[str, Any]) -> str | None:
        if self.matches(image):
            return None
        return "none of: " + " | ".join(str(c.first_failure(image)) for c in self.conditions)

    def attributes(self) -> frozenset[str]:
        return frozenset().union(*(c.attributes() for c in self.conditions))


@dataclass(frozen=True, slots=True)
class Not(Condition):
    condition: Condition

    def matches(self, image: Mapping[str, Any]) -> bool:
        return not self.condition.matches(image)

    def expected(self) -> str:
        return f"not ({self.condition.expected()})"

    def first_failure(self, image: Mapping[str, Any]) -> str | None:
        if self.matches(image):
            return None
        return f"not ({self.condition.expected()}), and it holds"

    def attributes(self) -> frozenset[str]:
        return self.condition.attributes()


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_COMBINATORS = ("and", "or", "not")
_OPERATORS = ("equals", "in", "anything-but", "prefix", "exists", "numeric")

MAX_MATCH_DEPTH = 32
"""Deepest nesting of ``and`` / ``or`` / ``not`` in one ``match``. Real conditions nest a few
levels; the limit keeps parsing and evaluation (both recursive) far from Python's recursion
limit whatever a rule file holds."""


def _join(path: MatchPath, part: str | int) -> MatchPath:
    return (*path, part)


def _scalar(value: Any, path: MatchPath) -> Any:
    """A literal to compare against: str, bool or Decimal (YAML ints/floats become Decimal)."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float | Decimal):
        try:
            number = Decimal(str(value))
        except InvalidOperation:  # pragma: no cover - str() of a number always parses
            raise ConditionSyntaxError(path, f"not a number: {quote(value)}") from None
        if not number.is_finite():
            raise ConditionSyntaxError(path, f"numbers must be finite, got {quote(value)}")
        problem = dynamodb_number_problem(number)
        if problem:
            raise ConditionSyntaxError(path, problem)
        return number
    raise ConditionSyntaxError(
        path, f"expected a string, number or boolean, got {type(value).__name__}"
    )


def _scalars(value: Any, path: MatchPath, op: str) -> tuple[Any, ...]:
    if not isinstance(value, list) or not value:
        raise ConditionSyntaxError(path, f"'{op}' needs a non-empty list of values")
    return tuple(_scalar(v, _join(path, i)) for i, v in enumerate(value))


def _numeric(attribute: str, value: Any, path: MatchPath) -> Numeric:
    if not isinstance(value, list) or not value or len(value) % 2:
        raise ConditionSyntaxError(
            path, "'numeric' needs pairs of operator and number, e.g. ['>', 0, '<=', 10]"
        )
    bounds = []
    for i in range(0, len(value), 2):
        op, bound = value[i], value[i + 1]
        if op not in _COMPARATORS:
            raise ConditionSyntaxError(
                _join(path, i), f"unknown comparison {quote(op)}; use one of = < <= > >="
            )
        number = _scalar(bound, _join(path, i + 1))
        if not isinstance(number, Decimal):
            raise ConditionSyntaxError(_join(path, i + 1), f"expected a number, got {quote(bound)}")
        bounds.append((op, number))
    return Numeric(attribute, tuple(bounds))


def _attribute_test(attribute: str, spec: Any, path: MatchPath) -> Condition:
    if isinstance(spec, list):
        return OneOf(attribute, _scalars(spec, path, "in"))
    if not isinstance(spec, Mapping):
        return Equals(attribute, _scalar(spec, path))
    if not spec:
        raise ConditionSyntaxError(path, "empty test; give a value or an operator")
    tests: list[Condition] = []
    for op, value in spec.items():
        op_path = _join(path, str(op))
        if op == "equals":
            tests.append(Equals(attribute, _scalar(value, op_path)))
        elif op == "in":
            tests.append(OneOf(attribute, _scalars(value, op_path, "in")))
        elif op == "anything-but":
            values = value if isinstance(value, list) else [value]
            tests.append(AnythingBut(attribute, _scalars(values, op_path, "anything-but")))
        elif op == "prefix":
            if not isinstance(value, str):
                raise ConditionSyntaxError(op_path, "'prefix' needs a string")
            tests.append(Prefix(attribute, value))
        elif op == "exists":
            if not isinstance(value, bool):
                raise ConditionSyntaxError(op_path, "'exists' needs true or false")
            tests.append(Exists(attribute, value))
        elif op == "numeric":
            tests.append(_numeric(attribute, value, op_path))
        else:
            raise ConditionSyntaxError(
                op_path, f"unknown operator {quote(op)}; use one of {', '.join(_OPERATORS)}"
            )
    return tests[0] if len(tests) == 1 else All(tuple(tests))


def parse_match(spec: Any, path: str = "") -> Condition:
    """Parse a ``match`` mapping into a :class:`Condition`.

    Parameters
    ----------
    spec
        ``None`` or ``{}`` (match everything) or a mapping as described in the module docstring.
    path
        Location prefix used in error messages.

    Returns
    -------
    Condition
        An immutable condition tree; ``cond.matches(image)`` with ``image`` a mapping of
        attribute names to deserialized values (``Decimal`` for numbers).

    Raises
    ------
    ConditionSyntaxError
        With ``.path`` naming the offending part, e.g. ``dep_delay.numeric[0]``; also when
        ``and`` / ``or`` / ``not`` nest more than :data:`MAX_MATCH_DEPTH` levels deep (the path
        then names the combinator one level too deep).

    Examples
    --------
    >>> from decimal import Decimal
    >>> parse_match({"status": "departed"}).matches({"status": "departed"})
    True
    >>> parse_match({"d": {"numeric": [">", 0]}}).matches({"d": Decimal("-3")})
    False
    """
    return _parse_match(spec, (path,) if path else (), 0)


def _parse_match(spec: Any, path: MatchPath, depth: int) -> Condition:
    """:func:`parse_match` at ``depth`` combinators below the top."""
    if spec is None:
        return MatchAll()
    if not isinstance(spec, Mapping):
        raise ConditionSyntaxError(
            path, f"expected a mapping of attribute tests, got {type(spec).__name__}"
        )
    conditions: list[Condition] = []
    for name, value in spec.items():
        if not isinstance(name, str) or not name:
            raise ConditionSyntaxError(
                path, f"attribute names must be non-empty strings, got {quote(name)}"
            )
        sub = _join(path, name)
        if name.startswith("\\"):
            attribute = name[1:]
            if not attribute:
                raise ConditionSyntaxError(sub, "a backslash must be followed by an attribute name")
            conditions.append(_attribute_test(attribute, value, sub))
        elif name in _COMBINATORS and depth >= MAX_MATCH_DEPTH:
            raise ConditionSyntaxError(
                sub,
                f"'and', 'or' and 'not' nest more than {MAX_MATCH_DEPTH} levels deep; "
                "write the condition flatter",
            )
        elif name in ("and", "or"):
            if not isinstance(value, list) or not value:
                raise ConditionSyntaxError(sub, f"'{name}' needs a non-empty list of matches")
            parts = tuple(_parse_match(v, _join(sub, i), depth + 1) for i, v in enumerate(value))
            conditions.append(All(parts) if name == "and" else Any_(parts))
        elif name == "not":
            conditions.append(Not(_parse_match(value, sub, depth + 1)))
        else:
            conditions.append(_attribute_test(name, value, sub))
    if not conditions:
        return MatchAll()
    return conditions[0] if len(conditions) == 1 else All(tuple(conditions))

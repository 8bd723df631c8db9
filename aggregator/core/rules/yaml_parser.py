"""The YAML loader of rule files, :class:`RuleLoader`, and its limits.

Rule files are read with :class:`RuleLoader`: YAML 1.2 core-schema scalars (only ``true`` /
``false`` are booleans, so ``yes``, ``on`` or ``NO`` stay strings; integers are decimal only;
``12:30`` and dates stay strings), every number becomes an exact ``Decimal`` built from its text,
and a key given twice in one mapping is an error. A document expanding to more than
:data:`MAX_YAML_NODES` nodes through aliases or merge keys ("billion laughs"), a recursive
alias, or nesting deeper than :data:`MAX_YAML_DEPTH` is rejected in bounded time and memory
(:class:`RuleFileLimitError`).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

from aggregator.core.rules.messages import unencodable
from aggregator.core.text import quote

MAX_YAML_NODES = 100_000
"""Most YAML nodes a rule file may expand to, aliases (``*a``) and merge keys (``<<: *a``)
counted with their full expansion (a few hundred bytes of nested aliases can otherwise expand
to billions of nodes). The shipped definitions have a few hundred."""

MAX_YAML_DEPTH = 100
"""Deepest nesting of YAML collections, through aliases too. Rule files need about 10 levels; a
match with ``and`` nested :data:`~aggregator.core.conditions.MAX_MATCH_DEPTH` times needs about
70, so that limit (with its clearer message) is met first. Keeps the recursive composer, merge-
key flattening and validation far from Python's recursion limit."""


_YAML_TAG = "tag:yaml.org,2002:"

_Pair = tuple[yaml.Node, yaml.Node]
_MERGE_KEY = object()  # the identity of '<<' in the duplicate-key check

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
    merge keys (``<<: *base``, ``<<: [*a, *b]``) work, resolved by :meth:`merged_pairs` (the
    YAML merge-key rule, the same on every PyYAML release, not PyYAML's own flattening).

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
    _merged: dict[int, tuple[yaml.MappingNode, list[_Pair]]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # PyYAML composes recursively (three frames per level): stop well before the
        # recursion limit, and stop a huge flat document before it is all in memory.
        depth = self._composing_depth + 1
        self._composed_nodes += 1
        if depth > MAX_YAML_DEPTH:
            raise RuleFileLimitError(_too_deep(), self._next_mark())
        if self._composed_nodes > MAX_YAML_NODES:
            raise RuleFileLimitError(_too_many(aliases=False), self._next_mark())
        self._composing_depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._composing_depth = depth - 1

    def _next_mark(self) -> yaml.Mark | None:
        """Where the next event starts."""
        # types-PyYAML leaves Parser.peek_event unannotated (it returns the next yaml.Event;
        # this pure-Python parser's events carry yaml.Mark, not the C parser's mark)
        mark: yaml.Mark | None = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        return mark

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_expansion(node)
        self._check_unique_keys(node)
        self._merged: dict[int, tuple[yaml.MappingNode, list[_Pair]]] = {}
        try:
            return super().construct_document(node)
        finally:
            self._merged = {}

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        """Construct a mapping with its merge keys resolved by :meth:`merged_pairs`.

        Replaces ``SafeConstructor.construct_mapping``, whose merge-key flattening changed
        between PyYAML releases (6.0.4 lets a merged-in key override an explicit key of the
        merged mapping); the composed nodes are left as they are.
        """
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, f"expected a mapping node, but found {_kind(node)}", node.start_mark
            )
        flat = yaml.MappingNode(
            node.tag, self.merged_pairs(node), node.start_mark, node.end_mark, node.flow_style
        )
        return yaml.constructor.BaseConstructor.construct_mapping(self, flat, deep=deep)

    def merged_pairs(self, node: yaml.MappingNode) -> list[_Pair]:
        """The key/value node pairs of a mapping once its merge key (``<<``) is resolved.

        Values follow the merge-key rule of YAML (https://yaml.org/type/merge.html): a key
        written in the mapping itself wins over every merged one; ``<<: *a`` inserts each key
        of ``*a`` (with ``*a``'s own merge resolved first) that the mapping does not have;
        ``<<: [*a, *b]`` merges the mappings in turn, so a key of ``*a`` wins over the same key
        of ``*b``. Keys are compared as constructed values (``1`` and ``1.0`` are one key).

        The order of the keys is PyYAML 6.0.3's (the merged mappings' keys, the last of a
        sequence first, then the mapping's own): a rule's match conditions are evaluated, shown
        and fingerprinted in that order, so a file keeps the fingerprint it had.

        Raises
        ------
        yaml.constructor.ConstructorError
            A ``<<`` value that is neither a mapping nor a sequence of mappings.
        """
        cached = self._merged.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        own: list[_Pair] = []
        sources: list[yaml.MappingNode] = []  # highest precedence first
        for key_node, value_node in node.value:
            if key_node.tag != _YAML_TAG + "merge":
                own.append((key_node, value_node))
            else:
                sources.extend(self._merge_sources(node, value_node))
        merged = [self.merged_pairs(source) for source in sources]
        winners: dict[Any, _Pair] = {}
        for pairs in (own, *merged):
            for pair in pairs:
                winners.setdefault(self._merge_identity(pair[0]), pair)
        order: dict[Any, None] = {}
        for pairs in (*reversed(merged), own):
            for key_node, _ in pairs:
                order.setdefault(self._merge_identity(key_node), None)
        result = [winners[identity] for identity in order]
        self._merged[id(node)] = (node, result)
        return result

    @staticmethod
    def _merge_sources(node: yaml.MappingNode, value: yaml.Node) -> list[yaml.MappingNode]:
        """The mappings a ``<<`` value names, highest precedence first."""

        def refuse(problem: str, where: yaml.Node) -> yaml.constructor.ConstructorError:
            return yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, problem, where.start_mark
            )

        if isinstance(value, yaml.MappingNode):
            return [value]
        if not isinstance(value, yaml.SequenceNode):
            raise refuse(
                f"expected a mapping or list of mappings for merging, but found {_kind(value)}",
                value,
            )
        for source in value.value:
            if not isinstance(source, yaml.MappingNode):
                raise refuse(f"expected a mapping for merging, but found {_kind(source)}", source)
        return list(value.value)

    def _merge_identity(self, key_node: yaml.Node) -> Any:
        """What makes two keys one key for merging: the constructed key (an unhashable one
        stays distinct, and construction reports it)."""
        key = self.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            return ("unhashable", id(key_node))
        return key

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
                problem = unencodable(node.value) if isinstance(node.value, str) else None
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
                        # '<<' twice: no rule says which wins; a sequence says it
                        identity: Any = _MERGE_KEY
                        hint = "; merge several mappings with one '<<: [*a, *b]'"
                    else:
                        # Equal as dict keys (1 and 1.0 too): one would silently replace the
                        # other.
                        identity, hint = self.construct_object(key_node), ""
                    first = keys.setdefault(identity, key_node)
                    if first is not key_node:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"duplicate key {quote(key_node.value)} "
                            f"(also on line {first.start_mark.line + 1}){hint}",
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


def _kind(node: yaml.Node) -> str:
    """``scalar``, ``sequence`` or ``mapping``, as PyYAML's messages name nodes."""
    return str(getattr(node, "id", type(node).__name__))


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

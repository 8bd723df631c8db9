"""Rule sets: :class:`RuleSet` (validated rules with unique names), :func:`rule` (one rule
built in Python with the checks YAML gets) and the checks of derived rules: unknown sources,
cycles, and attributes their source's aggregates never have."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from aggregator.core.exceptions import RuleError
from aggregator.core.kinds import Sum
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.rules.messages import rule_name, rule_names
from aggregator.core.rules.model import Rule
from aggregator.core.rules.problems import RuleSetProblems, format_errors
from aggregator.core.text import quote


class RuleSet(BaseModel):
    """A validated, ordered collection of rules with unique names, and the table layout they
    are deployed on.

    Build with :func:`load_rules` (YAML: the layout is the ``table:`` section of one file) or
    :meth:`RuleSet.of` (Python).

    Attributes
    ----------
    rules
        The rules, in file order.
    layout
        Where the framework's items live in the table (:class:`~aggregator.core.layout.
        TableLayout`); YAML key ``table``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    version: Literal[1] = 1
    # the layout first: the rules' checks read it (fields validate in this order)
    layout: TableLayout = Field(default=DEFAULT_LAYOUT, alias="table")
    rules: tuple[Rule, ...] = ()

    @field_validator("rules")
    @classmethod
    def _unique(cls, rules: tuple[Rule, ...], info: ValidationInfo) -> tuple[Rule, ...]:
        first: dict[str, int] = {}
        problems: list[tuple[int, str, str]] = []
        for index, r in enumerate(rules):
            if r.name in first:
                message = f"duplicate rule name (also rule #{first[r.name] + 1} {{where}})"
                problems.append((index, "name", message))
            else:
                first[r.name] = index
        # one file of several: the graph is checked once all files are loaded
        partial = bool(info.context and info.context.get("partial"))
        if not partial:
            problems += [
                (i, "source", m.replace("{", "{{").replace("}", "}}"))
                for i, m in graph_problems(rules)
            ]
            layout = info.data.get("layout", DEFAULT_LAYOUT)
            problems += [
                (i, f, m.replace("{", "{{").replace("}", "}}"))
                for i, f, m in target_problems(rules, layout)
            ]
            problems += [
                (i, "partitions", m) for i, m in enumerate(_partition_problems(rules, layout)) if m
            ]
        if problems:
            raise RuleSetProblems(rules, sorted(problems))
        if partial:
            return rules
        # the table's aggregate_partitions for every rule that does not say (left unset at 1,
        # which Rule.spread reads as 1), whatever reads it: a rule's place must not depend on
        # the other rules
        spread = info.data.get("layout", DEFAULT_LAYOUT).aggregate_partitions
        if spread == 1:
            return rules
        return tuple(
            r if r.partitions is not None else r.model_copy(update={"partitions": spread})
            for r in rules
        )

    @classmethod
    def of(cls, *rules: Rule, layout: TableLayout = DEFAULT_LAYOUT) -> RuleSet:
        """A rule set from rules built in Python (see :func:`rule`), on ``layout``.

        Raises
        ------
        RuleError
            On duplicate names, unknown sources or cycles.
        """
        try:
            return cls(rules=rules, layout=layout)
        except ValidationError as exc:
            raise RuleError(
                format_errors(exc, "<python>", {"rules": [r.model_dump() for r in rules]})
            ) from None

    # iterates its rules, not BaseModel's (field, value) pairs: a deliberate incompatible override
    def __iter__(self) -> Iterator[Rule]:  # type: ignore[override]
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
        known = rule_names(r.name for r in self.rules)
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
        return RuleSet(rules=tuple(chain), layout=self.layout)

    @property
    def sources(self) -> tuple[str, ...]:
        """Names of rules that some derived rule reads, sorted: their aggregate items' stream
        records must reach the handler (see :func:`aggregator.deploy.filters.filter_criteria`)."""
        return tuple(sorted({r.source for r in self.rules if r.source is not None}))


def graph_problems(rules: Sequence[Rule]) -> list[tuple[int, str]]:
    """Problems of the derived-rule graph as ``(rule index, message)``: unknown sources,
    sources of a kind other than ``sum``, and cycles (each cycle reported once, at its first
    rule, naming every rule on it)."""
    index = {r.name: i for i, r in enumerate(rules)}
    problems: list[tuple[int, str]] = []
    for i, r in enumerate(rules):
        if r.source is not None and r.source not in index:
            known = rule_names(sorted(index))
            problems.append((i, f"unknown source rule {rule_name(r.source)}; known rules: {known}"))
        elif r.source is not None and not getattr(rules[index[r.source]], "kind", Sum()).ranks:
            # (a rule of a file that failed to validate is a stub without a kind: not judged)
            kind = rules[index[r.source]].kind.name
            problems.append(
                (
                    i,
                    f"source rule {rule_name(r.source)} is of kind {kind!r}: a derived rule reads "
                    "the totals of a rule of kind sum",
                )
            )
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


def target_problems(
    rules: Sequence[Rule], layout: TableLayout = DEFAULT_LAYOUT
) -> list[tuple[int, str, str]]:
    """Problems of target rules on ``layout``, as ``(rule index, field, message)``: a target
    key that does not fit the table's keys, a target in a reserved partition or on a key or the
    checkpoint map, a rule reading the checkpoint map, and feedback cycles (a rule whose target
    attribute is read, directly or through other target rules, by the rule that writes it: its
    own write would come back on the stream as a change to count; each cycle reported once, at
    its first rule)."""
    problems: list[tuple[int, str, str]] = []
    protocol = layout.target_checkpoints_attribute
    writers: dict[str, list[int]] = {}
    for i, r in enumerate(rules):
        if protocol in r.attributes():
            problems.append(
                (
                    i,
                    _reading(r, protocol),
                    f"reads {protocol!r}, the framework's checkpoint map on target items "
                    "(table: target_checkpoints_attribute); no rule may read it",
                )
            )
        target = getattr(r, "target", None)
        if target is None:
            continue
        if target.attribute in writers:
            first = rules[writers[target.attribute][0]].name
            problems.append(
                (
                    i,
                    "target.attribute",
                    f"rule {rule_name(first)} already writes {target.attribute!r}: each target "
                    "attribute belongs to one rule (its reconcile and drop-rule act on it)",
                )
            )
        writers.setdefault(target.attribute, []).append(i)
        if layout.has_sort_key and target.sort_key is None:
            problems.append(
                (
                    i,
                    "target",
                    f"the table has a sort key ({layout.sort_key!r}): give the target's "
                    "sort_key too",
                )
            )
        elif not layout.has_sort_key and target.sort_key is not None:
            problems.append(
                (
                    i,
                    "target.sort_key",
                    "the table has no sort key (table: sort_key: null): leave sort_key out",
                )
            )
        reserved = _framework_attributes(layout)
        if target.attribute in reserved:
            problems.append(
                (
                    i,
                    "target.attribute",
                    f"{target.attribute!r} is not the rule's to write: "
                    + reserved[target.attribute],
                )
            )
            writers[target.attribute].remove(i)  # its own error: no cycle reported on top
        pk = target.partition_key
        if pk.is_literal and (
            layout.reserved_partition(pk.template) is not None
            or (
                not layout.has_sort_key
                and any(pk.template.startswith(f"{p}#") for p in layout.reserved_partition_keys)
            )
        ):
            problems.append(
                (
                    i,
                    "target.partition_key",
                    f"{pk.template!r} is a partition the framework reserves; a target is an "
                    "application item",
                )
            )
    problems += _feedback_cycles(rules, writers)
    return sorted(problems)


def _partition_problems(rules: Sequence[Rule], layout: TableLayout) -> list[str]:
    """Per rule, what is wrong with its ``partitions`` on ``layout`` (an empty text: nothing)."""
    return [
        "partitions above 1 need a table with a sort key: without one every aggregate has a "
        "partition key value of its own already"
        if r.partitions is not None and r.partitions > 1 and not layout.has_sort_key
        else ""
        for r in rules
    ]


def _framework_attributes(layout: TableLayout) -> dict[str, str]:
    """Attributes of application items a target may not write, with why: the table's keys, the
    checkpoint map, and the attributes the layout gives a meaning on every item of the table (the
    TTL attribute: DynamoDB would delete the item; the leaderboard and collection index keys:
    the item would enter an index, or the write would fail on the index key's type; the value
    attribute the leaderboard index sorts by)."""
    out = {
        layout.partition_key: "it is the table's partition key",
        layout.target_checkpoints_attribute: "it is the framework's checkpoint map on targets",
        layout.ttl_attribute: "it is the table's TTL attribute (a count there would expire the "
        "item)",
        layout.leaderboard_attribute: "it is the leaderboard index's partition key",
        layout.value_attribute: "it is the value attribute the leaderboard index sorts by",
    }
    if layout.sort_key is not None:
        out[layout.sort_key] = "it is the table's sort key"
    if not layout.has_sort_key:
        out[layout.collection_attribute] = "it is the collection index's partition key"
    return out


def _reading(rule: Rule, attribute: str) -> str:
    for field, names in (
        ("match", rule.match.attributes()),
        ("delta", rule.delta.attributes()),
        ("window", {rule.window.time} if rule.window is not None else set()),
    ):
        if attribute in names:
            return field
    return "target" if getattr(rule, "target", None) is not None else "key"


def _feedback_cycles(
    rules: Sequence[Rule], writers: Mapping[str, list[int]]
) -> list[tuple[int, str, str]]:
    """Cycles of "rule a writes attribute x, which target rule b reads" (b's own write then
    changes what a counts, and so on without end)."""
    edges: dict[int, list[tuple[int, str]]] = {}
    for attribute, written_by in writers.items():
        for j, r in enumerate(rules):
            if getattr(r, "target", None) is not None and attribute in r.attributes():
                for i in written_by:
                    edges.setdefault(i, []).append((j, attribute))
    problems: list[tuple[int, str, str]] = []
    reported: set[int] = set()
    for start in sorted(edges):
        # depth-first search for a path back to start
        stack: list[tuple[int, list[tuple[int, str]]]] = [(start, [])]
        seen: set[int] = set()
        while stack:
            node, path = stack.pop()
            for nxt, attribute in edges.get(node, []):
                step = [*path, (node, attribute)]
                if nxt == start:
                    members = {n for n, _ in step}
                    if not members & reported:
                        reported |= members
                        said = "; ".join(
                            f"{rule_name(rules[n].name)} writes {a!r}, which "
                            + rule_name(rules[step[k + 1][0] if k + 1 < len(step) else start].name)
                            + " reads"
                            for k, (n, a) in enumerate(step)
                        )
                        problems.append(
                            (
                                start,
                                "target",
                                f"a target attribute feeds back into the rule that writes it "
                                f"({said}): each write would come back on the stream as a "
                                "change to count",
                            )
                        )
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, step))
    return problems


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
        known = {layout.partition_key, layout.value_attribute, "key", "rule"}
        if layout.sort_key is not None:
            known.add(layout.sort_key)
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
                    f"reads {reads}, which the aggregates of {rule_name(r.source)} do not have; "
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
        f"rule {rule_name(listed[i].name)}, field {reading_field(listed[i], message)!r}: {message}"
        for i, message in derived_attribute_indexes(listed, layout)
    ]


def reading_field(rule: Rule, message: str) -> str:
    """The field of ``rule`` that reads the first attribute a :func:`derived_attribute_indexes`
    message names (``key``, ``match``, ``delta`` or ``window``), else ``source``."""
    found = re.search(r"reads '([^']*)'", message)
    name = found.group(1) if found else ""
    for field, names in (
        ("key", rule.key.attributes()),
        ("match", rule.match.attributes()),
        ("delta", rule.delta.attributes()),
        ("window", {rule.window.time} if rule.window is not None else set()),
    ):
        if name in names:
            return field
    return "source"


def rule(
    name: str,
    *,
    key: str | None = None,
    match: Mapping[str, Any] | None = None,
    delta: int | str | Decimal | Mapping[str, Any] = 1,
    description: str = "",
    ttl_deletes: Literal["keep", "retract"] = "keep",
    leaderboard: bool = False,
    leaderboard_partitions: int = 1,
    leaderboard_store: Literal["index", "list"] = "index",
    write_shards: int | Literal["auto"] = 1,
    window: Mapping[str, Any] | None = None,
    source: str | None = None,
    kind: str | Mapping[str, Any] = "sum",
    target: Mapping[str, Any] | None = None,
    partitions: int | None = None,
) -> Rule:
    """Build one validated rule from Python, with the same fields and checks as YAML.

    ``window`` takes the YAML mapping (``{"time": "ts", "unit": "epoch_seconds",
    "granularities": ["hour", "minute"], "retention": "25h"}``); ``source`` names the rule a
    derived rule reads (the graph is checked when the rules form a :class:`RuleSet`); ``kind``
    takes a kind's name or the YAML mapping (``{"name": "distribution", "relative_accuracy":
    "0.01"}``; :mod:`aggregator.core.kinds`); ``target`` the YAML mapping of an application item
    to keep the sum on instead of ``key`` (``{"partition_key": "{PK}", "sort_key": "META",
    "attribute": "likeTally"}``; :mod:`aggregator.core.rules.targets`); ``partitions`` how many
    partition key values its aggregates spread over (``None``: the table's
    ``aggregate_partitions``, filled in by a :class:`RuleSet`).

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
    data: dict[str, Any] = {
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
    if leaderboard_partitions != 1:
        data["leaderboard_partitions"] = leaderboard_partitions
    if leaderboard_store != "index":
        data["leaderboard_store"] = leaderboard_store
    if write_shards != 1:
        data["write_shards"] = write_shards
    if partitions is not None:
        data["partitions"] = partitions
    if kind != "sum":
        data["kind"] = kind
    if target is not None:
        data["target"] = target
        if key is None:
            del data["key"]
    try:
        return Rule.model_validate(data)
    except ValidationError as exc:
        raise RuleError(
            format_errors(exc, "<python>", {"rules": [data]}, prefix=("rules", 0))
        ) from None

"""The event source mapping's ``FilterCriteria``, rendered from the rules, and a check of a SAM
template against it.

Lambda drops stream records that match no filter before invoking the function (Lambda Developer
Guide, "Lambda event filtering"; filters are ORed, at most 5 per event source mapping by default,
each pattern at most 4,096 characters). The filters here let through:

1. every record whose partition key is not one of the framework's reserved ones, and
2. records of aggregate items whose sort key starts with ``"<source>#"`` for each rule that a
   derived rule reads (their images are the derived rules' input), and with ``"<rule>#"`` or
   ``"<rule>@"`` (its rebuilt generations) for each ``leaderboard_store: list`` rule (their
   images feed its top lists: :mod:`aggregator.core.top_list_merge`) and each rule with
   ``thresholds`` (their old and new images cross them: :mod:`aggregator.core.crossings`).

Everything else the framework writes (other aggregates, runner positions, dead letters) never
reaches the function; the engine applies the same rule again (:meth:`Engine.is_self_write`).

On a table without a sort key the framework's items are told apart by a key *prefix*
(``AGGREGATES#...``), and Lambda's filters have no "anything but this prefix" on DynamoDB
records. Every framework item carries the collection attribute instead
(:mod:`aggregator.core.layout`), so the first filter lets through the records where neither
image has it (``{"exists": false}``, the "does not exist" rule of the Lambda Developer Guide's
filter syntax table; it matches a missing image too), and the second matches source aggregates
by the prefix ``"AGGREGATES#<source>#"`` of their partition key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet

__all__ = [
    "MAX_PATTERN_CHARS",
    "check_template",
    "filter_criteria",
    "filter_patterns",
    "parse_template",
]

MAX_PATTERN_CHARS = 4096
"""Longest filter pattern Lambda accepts (Lambda Developer Guide, "Lambda event filtering")."""


def filter_patterns(rules: RuleSet, layout: TableLayout | None = None) -> list[dict[str, Any]]:
    """The filter patterns (as objects) for ``rules``: one for the user's items, and one for
    the source aggregates of derived rules when there are any.

    Raises
    ------
    ConfigError
        When a pattern would exceed :data:`MAX_PATTERN_CHARS`.
    """
    layout = rules.layout if layout is None else layout
    pk, sk = layout.partition_key, layout.sort_key
    read = list(dict.fromkeys(f"{source}#" for source in rules.sources))
    for r in rules:
        if r.observed:
            read += [p for p in (f"{r.name}#", f"{r.name}@") if p not in read]
    patterns: list[dict[str, Any]]
    if sk is not None:
        # every value the framework's items are under, spread values included: Lambda's "not"
        # takes exact values only (Lambda Developer Guide, "Lambda event filtering": no
        # anything-but with a prefix)
        spread = max((r.spread for r in rules), default=1)
        aggregates = layout.aggregate_partitions_of(spread)
        reserved = [
            *layout.reserved_partition_keys,
            *(value for value in aggregates if value != layout.aggregates_pk),
            *(value for value in layout.control_partition_values if value != layout.control_pk),
        ]
        patterns = [{"dynamodb": {"Keys": {pk: {"S": [{"anything-but": reserved}]}}}}]
        if read:
            # the values the read rules' aggregates are under (a rule at 1 under aggregates_pk)
            sources = set(rules.sources)
            values = dict.fromkeys(
                value
                for r in rules
                if r.name in sources or r.observed
                for value in layout.aggregate_partitions_of(r.spread)
            )
            patterns.append(
                {
                    "dynamodb": {
                        "Keys": {
                            pk: {"S": list(values)},
                            sk: {"S": [{"prefix": prefix} for prefix in read]},
                        }
                    }
                }
            )
    else:
        absent = {layout.collection_attribute: {"S": [{"exists": False}]}}
        patterns = [{"dynamodb": {"NewImage": absent, "OldImage": absent}}]
        if read:
            prefixes = [{"prefix": f"{layout.aggregates_pk}#{prefix}"} for prefix in read]
            patterns.append({"dynamodb": {"Keys": {pk: {"S": prefixes}}}})
    for pattern in patterns:
        if len(_compact(pattern)) > MAX_PATTERN_CHARS:
            raise ConfigError(
                f"the filter pattern for the aggregates the handler reads ({', '.join(read)}) is "
                f"longer than {MAX_PATTERN_CHARS} characters; shorten those rules' names"
            )
    return patterns


def _compact(pattern: dict[str, Any]) -> str:
    return json.dumps(pattern, separators=(", ", ": "))


def filter_criteria(rules: RuleSet, layout: TableLayout | None = None) -> dict[str, Any]:
    """``{"Filters": [{"Pattern": "<json>"}, ...]}`` as the template's ``FilterCriteria`` takes
    it (patterns are JSON strings)."""
    return {"Filters": [{"Pattern": _compact(p)} for p in filter_patterns(rules, layout)]}


class _TemplateLoader(yaml.SafeLoader):
    """Reads CloudFormation YAML, keeping short-form intrinsic functions (``!Ref``) as plain
    values: only the filter patterns matter here."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_TemplateLoader.add_multi_constructor("!", _any_tag)


def parse_template(text: str, source: str) -> dict[str, Any]:
    """A CloudFormation/SAM template's YAML as plain data; an intrinsic function's tag is
    dropped and its argument kept (``!If [c, a, b]`` reads as ``[c, a, b]``).

    Raises
    ------
    ConfigError
        When the text is not YAML, naming ``source``.
    """
    try:
        data = yaml.load(text, Loader=_TemplateLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: cannot read the template: {exc}") from None
    return data if isinstance(data, dict) else {}


def template_filters(path: str | Path) -> dict[str, list[Any]]:
    """The filter patterns of every stream subscription in a SAM template, each pattern parsed
    from its JSON string: every ``AWS::Lambda::EventSourceMapping`` resource, by its logical ID
    (the template's ``AggregatorFunctionStream``), and every ``DynamoDB`` event of a function,
    by ``"<function>.<event>"``.

    Raises
    ------
    ConfigError
        When the file cannot be read or parsed, or a pattern is not JSON.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the template: {exc}") from None
    data = parse_template(text, str(path))
    subscriptions: dict[str, dict[str, Any]] = {}
    for name, resource in (data.get("Resources") or {}).items():
        properties = (resource or {}).get("Properties") or {}
        if (resource or {}).get("Type") == "AWS::Lambda::EventSourceMapping":
            subscriptions[name] = properties
        for event_name, event in (properties.get("Events") or {}).items():
            if (event or {}).get("Type") == "DynamoDB":
                subscriptions[f"{name}.{event_name}"] = event.get("Properties") or {}
    found: dict[str, list[Any]] = {}
    for where, properties in subscriptions.items():
        criteria = properties.get("FilterCriteria") or {}
        patterns = []
        for f in criteria.get("Filters") or []:
            try:
                patterns.append(json.loads(f["Pattern"]))
            except (KeyError, TypeError, json.JSONDecodeError) as exc:
                raise ConfigError(f"{path}: {where}: a filter pattern is not JSON: {exc}") from None
        found[where] = patterns
    return found


def check_template(
    path: str | Path, rules: RuleSet, layout: TableLayout | None = None
) -> list[str]:
    """Problems with the template's stream filters for ``rules`` (empty when they match).

    Every stream subscription of the template (:func:`template_filters`) must carry exactly
    the patterns of :func:`filter_patterns`, in any order.

    Raises
    ------
    ConfigError
        When the template cannot be read.
    """
    expected = filter_patterns(rules, layout)
    events = template_filters(path)
    if not events:
        return [f"{path}: no DynamoDB stream subscription found"]
    problems = []
    wanted = sorted(map(_compact, expected))
    for where, patterns in events.items():
        if sorted(map(_compact, patterns)) != wanted:
            problems.append(
                f"{path}: {where}: FilterCriteria differ from the rules'; expected\n"
                + json.dumps(filter_criteria(rules, layout), indent=2)
            )
    return problems

"""RuleLoader's merge keys against a reference interpretation of the YAML merge-key rule.

Documents are generated with anchors, aliases, merges of one mapping and of sequences, merges
of mappings that merge in turn, and keys that are equal as numbers (``1`` and ``1.0``). The
expected value is computed from the generated description by :func:`reference`, which follows
https://yaml.org/type/merge.html and never looks at YAML; the order of the keys is compared too
(PyYAML 6.0.3's, which rule fingerprints were computed with).

``make test-yaml`` runs this file under every PyYAML release named in the Makefile
(``AGGREGATOR_EXPECT_PYYAML`` says which one is meant to be imported); PyYAML 6.0.4 changed its
own merge-key flattening, so the loader must not depend on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.core.rules import RuleLoader

KEYS = ("a", "b", "c", "d", "1", "1.0")


@dataclass
class Alias:
    """``*aN``: the N-th anchored mapping of the document."""

    index: int


@dataclass
class Mapping:
    """A flow mapping: its own keys, its merge (at most one: one source or a sequence of
    sources), and the order in which they are written (``order[i]`` < 0 is the merge)."""

    own: dict[str, Any] = field(default_factory=dict)
    merges: list[Any] = field(default_factory=list)  # each: a source, or a list of sources
    order: list[int] = field(default_factory=list)


def _number_key(key: str) -> Any:
    return Decimal(key) if key[0].isdigit() else key


def _mapping(draw: st.DrawFn, anchors: int, depth: int) -> Mapping:
    sources = st.one_of(
        *([st.builds(Alias, st.integers(0, anchors - 1))] if anchors else []),
        *([st.deferred(lambda: mappings(anchors, depth - 1))] if depth else []),
    )
    values = st.one_of(
        st.integers(-3, 3),
        *([st.builds(Alias, st.integers(0, anchors - 1))] if anchors else []),
        *([st.deferred(lambda: mappings(anchors, depth - 1))] if depth else []),
    )
    own_keys = draw(st.lists(st.sampled_from(KEYS), max_size=4, unique_by=_number_key))
    own = {key: draw(values) for key in own_keys}
    merges: list[Any] = []
    if anchors or depth:
        merges = draw(
            st.lists(st.one_of(sources, st.lists(sources, min_size=1, max_size=3)), max_size=1)
        )
    slots = [i for i in range(len(own))] + [-(m + 1) for m in range(len(merges))]
    order = draw(st.permutations(slots))
    return Mapping(own, merges, list(order))


def mappings(anchors: int, depth: int) -> st.SearchStrategy[Mapping]:
    return st.composite(lambda draw: _mapping(draw, anchors, depth))()


@st.composite
def documents(draw: st.DrawFn) -> list[Mapping]:
    """Anchored mappings ``&a0 ... &aN``; each may alias or merge the ones before it."""
    count = draw(st.integers(1, 5))
    return [draw(mappings(anchors=i, depth=2)) for i in range(count)]


def render_value(value: Any) -> str:
    if isinstance(value, Alias):
        return f"*a{value.index}"
    if isinstance(value, Mapping):
        return render_mapping(value)
    return str(value)


def render_mapping(mapping: Mapping) -> str:
    keys = list(mapping.own)
    parts = []
    for slot in mapping.order:
        if slot >= 0:
            parts.append(f"{keys[slot]}: {render_value(mapping.own[keys[slot]])}")
        else:
            merge = mapping.merges[-slot - 1]
            if isinstance(merge, list):
                parts.append("<<: [" + ", ".join(render_value(s) for s in merge) + "]")
            else:
                parts.append(f"<<: {render_value(merge)}")
    return "{" + ", ".join(parts) + "}"


def render(document: list[Mapping]) -> str:
    return "".join(f"m{i}: &a{i} {render_mapping(m)}\n" for i, m in enumerate(document))


def reference(document: list[Mapping]) -> dict[str, Any]:
    """The merge-key rule, from the description: a mapping's own keys win; a sequence's mappings
    merge in turn, and the first to give a key wins; a merged mapping's own merge is resolved
    first. Keys are compared as values (1 == 1.0). Keys are ordered as PyYAML 6.0.3 ordered
    them: the merged mappings' (the last of a sequence first), then the mapping's own."""

    def value(item: Any) -> Any:
        if isinstance(item, Alias):
            return value(document[item.index])
        if not isinstance(item, Mapping):
            return Decimal(item)
        sources = [
            s for merge in item.merges for s in (merge if isinstance(merge, list) else [merge])
        ]
        merged = [value(source) for source in sources]
        keys = list(item.own)  # as written: in the order of item.order
        own = {_number_key(keys[s]): value(item.own[keys[s]]) for s in item.order if s >= 0}
        winners: dict[Any, Any] = {}
        for mapping in (own, *merged):
            for key, val in mapping.items():
                winners.setdefault(key, val)
        order: dict[Any, None] = {}
        for mapping in (*reversed(merged), own):
            order.update((key, None) for key in mapping if key not in order)
        return {key: winners[key] for key in order}

    return {f"m{i}": value(Alias(i)) for i in range(len(document))}


def ordered(value: Any) -> Any:
    """``value`` with every mapping as its list of items, so that key order counts."""
    if isinstance(value, dict):
        return [(key, ordered(val)) for key, val in value.items()]
    if isinstance(value, list):
        return [ordered(item) for item in value]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_merge_keys_follow_the_yaml_merge_rule(document):
    # make test-yaml names the release it put on the path: make sure it is the one imported
    assert yaml.__version__ == os.environ.get("AGGREGATOR_EXPECT_PYYAML", yaml.__version__)
    text = render(document)
    assert ordered(yaml.load(text, Loader=RuleLoader)) == ordered(reference(document)), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the case PyYAML 6.0.4 gets wrong: a merged mapping's own key beats what it merged
        ("inner: &b {<<: {x: 1}, x: 2}\ntop: {<<: *b, y: 3}", {"x": 2, "y": 3}),
        # a sequence: earlier mappings win over later ones
        ("top: {<<: [{x: 1, y: 1}, {x: 2, z: 2}]}", {"x": 1, "y": 1, "z": 2}),
        # explicit keys win wherever they are written
        ("top: {x: 3, <<: {x: 1, y: 1}}", {"x": 3, "y": 1}),
        # keys equal as numbers are one key, the mapping's own wins
        ("top: {<<: {1: merged}, 1.0: own}", {Decimal(1): "own"}),
    ],
)
def test_merge_rule_examples(text, expected):
    expected = {k: Decimal(v) if isinstance(v, int) else v for k, v in expected.items()}
    assert yaml.load(text, Loader=RuleLoader)["top"] == expected


def test_composed_nodes_are_not_rewritten_by_merging():
    loader = RuleLoader("base: &b {x: 1}\ntop: {<<: *b, y: 2}")
    try:
        root = loader.get_single_node()
        before = [(k.value, len(v.value)) for k, v in root.value]
        loader.construct_document(root)
        assert [(k.value, len(v.value)) for k, v in root.value] == before
    finally:
        loader.dispose()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("top: {<<: 1}", "expected a mapping or list of mappings for merging, but found scalar"),
        ("top: {<<: [{x: 1}, 2]}", "expected a mapping for merging, but found scalar"),
    ],
)
def test_merging_what_is_not_a_mapping_is_an_error(text, problem):
    with pytest.raises(yaml.constructor.ConstructorError) as info:
        yaml.load(text, Loader=RuleLoader)
    assert info.value.problem == problem
